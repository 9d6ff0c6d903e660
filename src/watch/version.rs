//! etcd's version, which says whether its progress notifications are
//! ordered after the events they cover (3.4.25+, 3.5.8+: etcd issue 15220).
//!
//! Asked with `Status`; etcd 3.5 with authentication answers it to root
//! only, so a least-privilege serve asks a plain-HTTP endpoint's `/version`
//! instead (no credentials needed). Over TLS that fallback is not tried: the
//! version is then unknown, and unknown is never taken for ordered.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::election::Client;

const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// `/version` answers about 60 bytes; anything past this is not etcd.
const MAX_ANSWER_BYTES: u64 = 16 * 1024;

/// etcd's server version (`3.5.30`), or why it could not be read.
pub async fn etcd_version(client: &Client) -> Result<String, String> {
    let status = match client.op(client.etcd().status()).await {
        Ok(s) => return Ok(s.version().to_owned()),
        Err(e) => e.to_string(),
    };
    for endpoint in client.endpoints() {
        let Some(host) = endpoint.strip_prefix("http://") else {
            continue;
        };
        let host = host.trim_end_matches('/');
        match tokio::time::timeout(ASK_TIMEOUT, http_version(host)).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => tracing::debug!(endpoint, error = %e, "etcd's /version"),
            Err(_) => tracing::debug!(endpoint, "etcd's /version: no answer"),
        }
    }
    Err(format!(
        "Status: {status}; /version is asked only of plain-http endpoints, and none answered"
    ))
}

/// `GET /version` over HTTP/1.0: `{"etcdserver":"3.5.30",…}`.
async fn http_version(host: &str) -> Result<String, String> {
    let mut conn = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET /version HTTP/1.0\r\nHost: {host}\r\n\r\n");
    conn.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    conn.take(MAX_ANSWER_BYTES)
        .read_to_end(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    parse_answer(&answer)
}

fn parse_answer(answer: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(answer).map_err(|_| "not UTF-8".to_owned())?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| "not an HTTP answer".to_owned())?;
    if !head.starts_with("HTTP/1.") || !head.lines().next().is_some_and(|l| l.contains(" 200")) {
        return Err(format!("answered {:?}", head.lines().next().unwrap_or("")));
    }
    let v: serde_json::Value = serde_json::from_str(body.trim()).map_err(|e| e.to_string())?;
    v["etcdserver"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "no etcdserver in the answer".to_owned())
}

/// Whether etcd `version` orders requested progress notifications after
/// pending events: 3.4.25+, 3.5.8+, 3.6 and later (etcd PRs 15697, 15695
/// for etcd issue 15220). Unparsable: no.
pub fn progress_ordered(version: &str) -> bool {
    fixed_in(version, 25, 8)
}

/// Whether etcd `version` also answers a progress request made while a
/// watch catches up once it has (3.4.31+, 3.5.13+, 3.6: etcd issue 17507;
/// from 3.4.25 and 3.5.8 until then the request waits for the watch's next
/// event, forever on an idle range). Implies [`progress_ordered`].
pub fn progress_answered_when_synced(version: &str) -> bool {
    fixed_in(version, 31, 13)
}

/// Whether `version` is at least 3.4.`patch_3_4` on 3.4, 3.5.`patch_3_5`
/// on 3.5, or any later minor or major (3.6 has both fixes). Unparsable or
/// older: no.
fn fixed_in(version: &str, patch_3_4: u64, patch_3_5: u64) -> bool {
    let mut parts = version
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().ok());
    let (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    match (major, minor) {
        (3, 4) => patch >= patch_3_4,
        (3, 5) => patch >= patch_3_5,
        (3, m) => m >= 6,
        (m, _) => m > 3,
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_answer, progress_answered_when_synced, progress_ordered};

    #[test]
    fn progress_is_trusted_only_where_etcd_fixed_its_order() {
        for v in ["3.4.23", "3.5.1", "3.5.7", "3.3.27", "", "garbage", "3.4"] {
            assert!(!progress_ordered(v), "{v}");
        }
        for v in ["3.4.25", "3.5.8", "3.5.21", "3.6.0", "v3.6.4", "4.0.0"] {
            assert!(progress_ordered(v), "{v}");
        }
        for v in ["3.4.30", "3.5.12", "3.5.8", "", "x"] {
            assert!(!progress_answered_when_synced(v), "{v}");
        }
        for v in ["3.4.31", "3.5.13", "3.5.16", "3.5.30", "3.6.0", "4.0.0"] {
            assert!(progress_answered_when_synced(v), "{v}");
        }
    }

    #[test]
    fn the_server_version_is_read_and_anything_else_refused() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"etcdserver\":\"3.5.30\",\"etcdcluster\":\"3.5.0\"}";
        assert_eq!(parse_answer(ok).as_deref(), Ok("3.5.30"));
        assert!(parse_answer(b"HTTP/1.0 404 Not Found\r\n\r\n{}").is_err());
        assert!(parse_answer(b"HTTP/1.0 200 OK\r\n\r\n{\"x\":1}").is_err());
        assert!(parse_answer(b"\x00\x01garbage").is_err());
    }
}
