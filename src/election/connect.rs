//! How tenure connects to etcd: endpoints, TLS files (etcdctl's `--cacert`,
//! `--cert`, `--key`) and an etcd user.
//!
//! What etcd-client 0.21 does by itself, and what is added here:
//!
//! * With a user, `Client::connect` authenticates once, and with
//!   `with_auto_token_refresh(true)` every unary request (and the opening of
//!   a watch or keepalive stream) that etcd refuses with "invalid auth
//!   token" is re-authenticated and retried once. etcd's simple tokens
//!   expire after `--auth-token-ttl` seconds without use (JWT tokens after
//!   their TTL), so a long-running `serve` or `campaign` depends on this.
//! * A watch *created* with an expired token is not refused with an error but
//!   cancelled by etcd (cancel reason "invalid auth token"); etcd-client does
//!   not refresh on that. [`super::keywatch::RangeWatch`] does (see there).
//! * Keepalive streams and open watch streams are not checked against the
//!   token by etcd (3.4): they keep working across expiry.
//! * TLS and authentication failures are turned into errors an operator can
//!   act on ([`Error::Tls`], [`Error::Auth`], [`Error::PermissionDenied`]),
//!   found at connect time with one request, and never retried.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Certificate, Client as EtcdClient, ConnectOptions, Identity, TlsOptions};

use super::error::Error;

/// How long establishing a connection (TCP and TLS) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// PEM files for TLS to etcd, as etcdctl takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signed etcd's server certificate (`--cacert`).
    pub ca: Option<PathBuf>,
    /// This client's certificate (`--cert`), for etcd's `--client-cert-auth`.
    pub cert: Option<PathBuf>,
    /// This client's private key (`--key`).
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }
}

/// An etcd user and its password. `Debug` does not show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    password: String,
}

impl Credentials {
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            user: user.into(),
            password: password.into(),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// Everything but the endpoints that a connection to etcd needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectConfig {
    pub tls: TlsFiles,
    pub credentials: Option<Credentials>,
}

impl ConnectConfig {
    /// Plain loopback or trusted network: no TLS, no user.
    pub fn plain() -> Self {
        Self::default()
    }

    pub fn user(&self) -> Option<&str> {
        self.credentials.as_ref().map(|c| c.user.as_str())
    }

    /// Checks the endpoints against the TLS settings and builds the options.
    /// The files are read now, so a rotated certificate is used by the next
    /// connection.
    pub(crate) fn options(&self, endpoints: &[String]) -> Result<ConnectOptions, Error> {
        let https = endpoints
            .iter()
            .filter(|e| e.starts_with("https://"))
            .count();
        if https > 0 && https < endpoints.len() {
            return Err(Error::TlsConfig(
                "mixed http:// and https:// endpoints: use https:// for all of them".to_owned(),
            ));
        }
        if let Some(plain) = endpoints.iter().find(|e| !e.starts_with("https://")) {
            if !self.tls.is_empty() {
                return Err(Error::TlsConfig(format!(
                    "--cacert, --cert and --key need https:// endpoints, but {plain:?} is not \
                     (write https://{})",
                    plain.trim_start_matches("http://")
                )));
            }
        }
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true)
            // A member cut off from the cluster fails requests and watches
            // instead of serving stale answers or hanging.
            .with_require_leader(true)
            // Re-authenticate and retry once when a token has expired.
            .with_auto_token_refresh(true);
        if https > 0 {
            let mut tls = TlsOptions::new().timeout(CONNECT_TIMEOUT);
            match &self.tls.ca {
                Some(ca) => {
                    tls = tls.ca_certificate(Certificate::from_pem(read_pem(ca, "--cacert")?))
                }
                None => tls = tls.with_native_roots(),
            }
            match (&self.tls.cert, &self.tls.key) {
                (Some(cert), Some(key)) => {
                    tls = tls.identity(Identity::from_pem(
                        read_pem(cert, "--cert")?,
                        read_pem(key, "--key")?,
                    ))
                }
                (None, None) => {}
                (Some(_), None) => {
                    return Err(Error::TlsConfig(
                        "--cert needs --key (the client certificate's private key)".to_owned(),
                    ))
                }
                (None, Some(_)) => {
                    return Err(Error::TlsConfig(
                        "--key needs --cert (the client certificate)".to_owned(),
                    ))
                }
            }
            opts = opts.with_tls(tls);
        }
        if let Some(c) = &self.credentials {
            opts = opts.with_user(c.user.clone(), c.password.clone());
        }
        Ok(opts)
    }

    fn uses_tls(endpoints: &[String]) -> bool {
        endpoints.iter().any(|e| e.starts_with("https://"))
    }

    /// Connects. Without a user the connection is lazy, except that over
    /// TLS one request checks the handshake, so a certificate problem is an
    /// error now and not an endless retry later. With a user, etcd-client
    /// authenticates now (one request), which checks both.
    /// `check_handshake: false` skips that request over TLS without a user
    /// (for a reconnection: the settings were checked at the first connect,
    /// and a frozen member must not hold the watcher up).
    pub(crate) async fn connect(
        &self,
        endpoints: &[String],
        check_handshake: bool,
    ) -> Result<EtcdClient, Error> {
        let opts = self.options(endpoints)?;
        // Authentication is one request, sent after the handshake.
        let limit = CONNECT_TIMEOUT * 2;
        let mut etcd =
            match tokio::time::timeout(limit, EtcdClient::connect(endpoints, Some(opts))).await {
                Ok(Ok(etcd)) => etcd,
                Ok(Err(e)) => return Err(self.explain(endpoints, e)),
                Err(_) => return Err(Error::EtcdTimeout(limit)),
            };
        if check_handshake && self.credentials.is_none() && Self::uses_tls(endpoints) {
            if let Ok(Err(e)) = tokio::time::timeout(limit, etcd.status()).await {
                let e = self.explain(endpoints, e);
                // Not reachable now: stay lazy, like a plain connection.
                if !e.is_unavailable() {
                    return Err(e);
                }
            }
        }
        Ok(etcd)
    }

    /// Turns what etcd or the TLS layer said into an error that says what to
    /// do about it.
    pub(crate) fn explain(&self, endpoints: &[String], e: etcd_client::Error) -> Error {
        let at = endpoints.join(",");
        let text = error_text(&e);
        if let Some(tls) = tls_problem(&text, &self.tls, &at) {
            return Error::Tls(tls);
        }
        // Without a client certificate (or with one etcd does not trust),
        // etcd ends the handshake with an alert, or closes the connection
        // (with TLS 1.3 the client may already be writing): reported as a
        // fatal alert, a closed connection or a broken pipe.
        let refused = text.contains("received fatal alert")
            || text.contains("connection closed")
            || text.contains("broken pipe");
        if Self::uses_tls(endpoints) && refused {
            let what = match &self.tls.cert {
                None => "etcd requires a client certificate (it runs with --client-cert-auth): \
                         give --cert and --key"
                    .to_owned(),
                Some(cert) => format!(
                    "etcd refused the client certificate {}: is it signed by a CA in etcd's \
                     --trusted-ca-file, meant for client auth, and not expired?",
                    cert.display()
                ),
            };
            return Error::Tls(format!("etcd at {at} ended the TLS handshake: {what}"));
        }
        Error::from(e).with_user(self.user())
    }
}

fn read_pem(path: &Path, flag: &str) -> Result<Vec<u8>, Error> {
    let pem = std::fs::read(path).map_err(|e| {
        Error::TlsConfig(format!("cannot read {flag} file {}: {e}", path.display()))
    })?;
    if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(Error::TlsConfig(format!(
            "{flag} file {} is not PEM (expected a -----BEGIN ...----- block)",
            path.display()
        )));
    }
    Ok(pem)
}

/// The error and its sources, one line.
pub(crate) fn error_text(e: &etcd_client::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    if let etcd_client::Error::GRpcStatus(s) = e {
        text.push_str(": ");
        text.push_str(s.message());
        if let Some(src) = std::error::Error::source(s) {
            text.push_str(&format!(": {src:?}"));
        }
    }
    text
}

/// A server certificate the client refused, in words.
pub(crate) fn tls_problem(text: &str, tls: &TlsFiles, at: &str) -> Option<String> {
    if !text.contains("invalid peer certificate") {
        return None;
    }
    let ca = tls
        .ca
        .as_ref()
        .map(|p| format!("--cacert {}", p.display()))
        .unwrap_or_else(|| "the system's CAs (no --cacert given)".to_owned());
    let why = if text.contains("UnknownIssuer") || text.contains("unknown issuer") {
        format!(
            "its certificate is not signed by a CA in {ca} (unknown CA): give the CA that \
             signed etcd's certificate"
        )
    } else if text.contains("NotValidForName") || text.contains("not valid for name") {
        "its certificate does not name the host of the endpoint (server name mismatch): use \
         a host name or IP address that is in the certificate's subjectAltName"
            .to_owned()
    } else if text.contains("Expired") || text.contains("expired") {
        "its certificate has expired: renew etcd's server certificate (or check this \
         machine's clock)"
            .to_owned()
    } else if text.contains("NotValidYet") || text.contains("not valid yet") {
        "its certificate is not valid yet: check this machine's clock".to_owned()
    } else {
        let detail = text
            .split("invalid peer certificate")
            .nth(1)
            .unwrap_or("")
            .trim_start_matches(':')
            .trim();
        format!("its certificate was refused ({detail})")
    };
    Some(format!("TLS to etcd at {at} failed: {why}"))
}

impl super::Client {
    /// Reads (counts) the key ranges `serve` watches, to find out now
    /// whether this client may: a permission, user or TLS problem is an
    /// error; an unreachable etcd is not (the watcher waits for it).
    pub async fn check_read_access(&self, ranges: &[(Vec<u8>, Vec<u8>)]) -> Result<(), Error> {
        for (start, end) in ranges {
            let opts = etcd_client::GetOptions::new()
                .with_range(end.clone())
                .with_count_only();
            match self.op(self.etcd().get(start.clone(), Some(opts))).await {
                Ok(_) => {}
                Err(e) if e.is_access_denied() => return Err(e),
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(endpoints: &[&str], tls: TlsFiles) -> Result<(), Error> {
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.to_string()).collect();
        let config = ConnectConfig {
            tls,
            credentials: None,
        };
        config.options(&endpoints).map(|_| ())
    }

    #[test]
    fn tls_settings_are_checked_before_connecting() {
        let ca = TlsFiles {
            ca: Some("/nonexistent/ca.crt".into()),
            ..TlsFiles::default()
        };
        let e = options(&["http://127.0.0.1:2379"], ca.clone()).expect_err("http");
        assert!(e.to_string().contains("need https:// endpoints"), "{e}");
        let e =
            options(&["https://a:2379", "http://b:2379"], TlsFiles::default()).expect_err("mixed");
        assert!(e.to_string().contains("mixed"), "{e}");
        let e = options(&["https://127.0.0.1:2379"], ca).expect_err("missing");
        assert!(e.to_string().contains("cannot read --cacert file"), "{e}");
        assert!(options(&["http://127.0.0.1:2379"], TlsFiles::default()).is_ok());
    }

    #[test]
    fn server_certificate_problems_in_words() {
        let tls = TlsFiles::default();
        let say = |t: &str| tls_problem(t, &tls, "https://e:2379").unwrap_or_default();
        assert!(say("invalid peer certificate: UnknownIssuer").contains("unknown CA"));
        assert!(say("invalid peer certificate: NotValidForName").contains("name mismatch"));
        assert!(say("invalid peer certificate: Expired").contains("expired"));
        assert!(tls_problem("tcp connect error", &tls, "x").is_none());
    }
}
