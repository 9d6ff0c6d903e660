//! GET requests to the Kubernetes API: HTTP/1.1 over rustls on a
//! connection of their own (hyper's client connection, tokio-rustls), the
//! answer's status and a body read whole (a list) or chunk by chunk, one
//! JSON line per watch event.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::config::{ApiConfig, ConfigError};

/// Connecting and the answer's head may take this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A body read whole (one Lease) must arrive within this: an API server
/// that froze, or a path that dropped, mid-answer fails the read
/// (retried) instead of holding the watcher forever. A list page is read
/// piece by piece within the same time (`list.rs`).
pub(super) const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest body read whole (one Lease) and the longest watch event
/// line kept whole: a longer one is passed by (its head kept), never a
/// reason to stop.
const MAX_LINE_BYTES: usize = super::split::MAX_PIECE;

/// Why a request to the API failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("connecting to the Kubernetes API at {at}: {reason}")]
    Connect { at: String, reason: String },
    #[error("the Kubernetes API at {at} did not answer within {CONNECT_TIMEOUT:?}")]
    Timeout { at: String },
    #[error(
        "the Kubernetes API did not accept tenure's credentials for {path} (401): {body}; the \
         token expired or is another cluster's: give a fresh one (a tokenFile is re-read at \
         every request: `kubectl create token SERVICEACCOUNT --duration=…` into it)"
    )]
    Unauthorized { path: String, body: String },
    #[error(
        "the Kubernetes API refused {path} ({status}): {body}; tenure needs get, list and \
         watch on coordination.k8s.io leases in every namespace (deploy/kubernetes/rbac.yaml, \
         ClusterRole tenure-lease-reader)"
    )]
    Denied {
        path: String,
        status: u16,
        body: String,
    },
    /// The resourceVersion (or continue token) `path` asks for is no
    /// longer kept: start over from a fresh list (a gap).
    #[error(
        "the Kubernetes API no longer has what {path} asks for (410 Gone: that resourceVersion \
         or continue token expired): {body}"
    )]
    Gone { path: String, body: String },
    /// A resourceVersion that is not an integer: not etcd's revision.
    #[error(
        "the Kubernetes API answered {path} with resourceVersion {value:?}, which is not an \
         integer: tenure takes a Lease's resourceVersion as etcd's revision of the write (a \
         term's token, the watch's resume point), as a kube-apiserver backed by etcd gives it, \
         and this API server does not; watch one backed by etcd, or read the cluster's etcd \
         itself (tenure serve --source kubernetes:/registry/)"
    )]
    NotARevision { path: String, value: String },
    #[error("the Kubernetes API answered {path} with {status}: {body}")]
    Status {
        path: String,
        status: u16,
        body: String,
    },
    #[error("reading the Kubernetes API's answer to {path}: {reason}")]
    Body { path: String, reason: String },
    /// A watch said nothing past its timeout: its connection stopped
    /// forwarding.
    #[error(
        "the Kubernetes API's watch of Leases said nothing for {seconds} s after resourceVersion \
         {revision} (a live one bookmarks or ends sooner): its connection stopped forwarding; \
         watching again on a new one"
    )]
    Stalled { seconds: u64, revision: i64 },
}

/// A GET's answer whose status was 200.
pub(super) struct Answer {
    body: Incoming,
    path: String,
    lines: Lines,
}

/// A watch's body cut into lines as it arrives, none held past a limit.
#[derive(Debug)]
struct Lines {
    max: usize,
    pending: Vec<u8>,
    /// How much of `pending` holds no newline (searched already).
    searched: usize,
    /// A line past `max` is being passed by: its head and its length so
    /// far.
    skipping: Option<(Vec<u8>, usize)>,
}

/// One line of a watch.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Line {
    Whole(Vec<u8>),
    /// Longer than [`MAX_LINE_BYTES`]: its first bytes and its length.
    TooBig {
        head: Vec<u8>,
        len: usize,
    },
}

/// One GET of `path_and_query` (after the server URL's own path).
pub(super) async fn get(cfg: &ApiConfig, path_and_query: &str) -> Result<Answer, ApiError> {
    let at = cfg.authority.clone();
    // Before the request's own time: an exec plugin may take a while.
    let authorization = cfg.authorization().await?;
    let timed =
        tokio::time::timeout(CONNECT_TIMEOUT, request(cfg, path_and_query, authorization)).await;
    let resp = timed.map_err(|_| ApiError::Timeout { at })??;
    let status = resp.status().as_u16();
    if status == 401 {
        // Refused: an exec plugin's token is not used again.
        cfg.refused();
    }
    let path = path_and_query.to_owned();
    if status == 200 {
        return Ok(Answer {
            body: resp.into_body(),
            path,
            lines: Lines::new(MAX_LINE_BYTES),
        });
    }
    let body = match tokio::time::timeout(CONNECT_TIMEOUT, resp.into_body().collect()).await {
        Ok(Ok(b)) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        _ => String::new(),
    };
    Err(ApiError::of_status(status, path, &body))
}

impl ApiError {
    /// The error of an answer to `path` with `status` (not 200) and `body`.
    fn of_status(status: u16, path: String, body: &str) -> ApiError {
        let body = crate::text::cut(body, 512).to_owned();
        match status {
            401 => ApiError::Unauthorized { path, body },
            403 => ApiError::Denied { path, status, body },
            410 => ApiError::Gone { path, body },
            _ => ApiError::Status { path, status, body },
        }
    }

    /// Whether no retry can change it: the API's resourceVersions are not
    /// revisions. (A refusal is retried: a role may be granted meanwhile.)
    pub fn is_permanent(&self) -> bool {
        matches!(self, ApiError::NotARevision { .. })
    }

    /// A 404: the object asked for does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::Status { status: 404, .. })
    }
}

async fn request(
    cfg: &ApiConfig,
    path_and_query: &str,
    authorization: Option<String>,
) -> Result<hyper::Response<Incoming>, ApiError> {
    let connect = |reason: String| ApiError::Connect {
        at: cfg.authority.clone(),
        reason,
    };
    let tcp = TcpStream::connect((cfg.host.as_str(), cfg.port))
        .await
        .map_err(|e| connect(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    let tls = tokio_rustls::TlsConnector::from(cfg.tls.clone())
        .connect(cfg.server_name.clone(), tcp)
        .await
        .map_err(|e| connect(format!("TLS: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| connect(e.to_string()))?;
    // The connection runs while the answer is read; it ends with it.
    crate::task::spawn("kubernetes api connection", async move {
        let _ = conn.await;
    });
    let mut req = hyper::Request::get(format!("{}{path_and_query}", cfg.base_path))
        .header(hyper::header::HOST, &cfg.authority)
        .header(hyper::header::ACCEPT, "application/json")
        .header(hyper::header::USER_AGENT, "tenure");
    if let Some(bearer) = authorization {
        req = req.header(hyper::header::AUTHORIZATION, bearer);
    }
    let req = req
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| connect(e.to_string()))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| connect(e.to_string()))
}

impl Answer {
    /// The whole body (a list), bounded.
    pub(super) async fn whole(self) -> Result<Bytes, ApiError> {
        let limited = http_body_util::Limited::new(self.body, MAX_LINE_BYTES);
        let reason = match tokio::time::timeout(BODY_TIMEOUT, limited.collect()).await {
            Ok(Ok(b)) => return Ok(b.to_bytes()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("not whole within {BODY_TIMEOUT:?}"),
        };
        Err(ApiError::Body {
            path: self.path,
            reason,
        })
    }

    /// The next chunk of the body; `None` at its end.
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, ApiError> {
        loop {
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(self.body_error(e.to_string())),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }

    /// The next complete line (a watch event); `None` when the server
    /// closed the stream. A line past [`MAX_LINE_BYTES`] is read no
    /// further than its head: the stream goes on after it.
    pub(super) async fn line(&mut self) -> Result<Option<Line>, ApiError> {
        loop {
            if let Some(line) = self.lines.take() {
                return Ok(Some(line));
            }
            match self.chunk().await? {
                None => return Ok(None),
                Some(data) => self.lines.pending.extend_from_slice(&data),
            }
        }
    }

    fn body_error(&self, reason: String) -> ApiError {
        ApiError::Body {
            path: self.path.clone(),
            reason,
        }
    }
}

impl Lines {
    fn new(max: usize) -> Self {
        Self {
            max,
            pending: Vec::new(),
            searched: 0,
            skipping: None,
        }
    }

    /// A line complete in what was read, if any (blank lines passed by).
    fn take(&mut self) -> Option<Line> {
        loop {
            let newline = self.pending[self.searched..]
                .iter()
                .position(|b| *b == b'\n');
            let Some(i) = newline.map(|i| i + self.searched) else {
                self.searched = self.pending.len();
                self.skip_long();
                return None;
            };
            self.searched = 0;
            let rest = self.pending.split_off(i + 1);
            let mut line = std::mem::replace(&mut self.pending, rest);
            line.pop();
            if let Some((head, len)) = self.skipping.take() {
                return Some(Line::TooBig {
                    head,
                    len: len + line.len(),
                });
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Some(Line::Whole(line));
            }
        }
    }

    /// Past the longest line: keep its head, drop the rest as it comes.
    fn skip_long(&mut self) {
        if let Some((_, len)) = &mut self.skipping {
            *len += self.pending.len();
            self.pending.clear();
            self.searched = 0;
        } else if self.pending.len() > self.max {
            let len = self.pending.len();
            let mut head = std::mem::take(&mut self.pending);
            head.truncate(super::split::HEAD.min(self.max));
            self.searched = 0;
            self.skipping = Some((head, len));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ApiError, Line, Lines};

    #[test]
    fn a_line_past_the_limit_is_passed_by_and_the_next_is_read_whole() {
        let mut lines = Lines::new(10);
        let mut got = Vec::new();
        for chunk in [
            &b"{\"a\":1}\n\n{\"type\":\"MOD"[..],
            b"IFIED\",\"obj",
            b"ect\":{}}\n{\"b\":2}\n",
        ] {
            lines.pending.extend_from_slice(chunk);
            while let Some(l) = lines.take() {
                got.push(l);
            }
        }
        assert_eq!(
            got,
            [
                Line::Whole(b"{\"a\":1}".to_vec()),
                Line::TooBig {
                    head: b"{\"type\":\"M".to_vec(),
                    len: 31
                },
                Line::Whole(b"{\"b\":2}".to_vec()),
            ]
        );
        assert!(lines.pending.is_empty() && lines.skipping.is_none());
    }

    #[test]
    fn a_gone_names_the_resource_version_asked_for() {
        let path = "/apis/coordination.k8s.io/v1/leases?watch=1&resourceVersion=812".to_owned();
        let gone = ApiError::of_status(410, path, "too old resource version: 812 (900)");
        let said = gone.to_string();
        assert!(matches!(gone, ApiError::Gone { .. }), "{said}");
        assert!(said.contains("resourceVersion=812"), "{said}");
        assert!(!said.contains("resourceVersion 0"), "{said}");
    }
}
