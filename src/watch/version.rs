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

#[cfg(test)]
mod tests {
    use super::parse_answer;

    #[test]
    fn the_server_version_is_read_and_anything_else_refused() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"etcdserver\":\"3.5.30\",\"etcdcluster\":\"3.5.0\"}";
        assert_eq!(parse_answer(ok).as_deref(), Ok("3.5.30"));
        assert!(parse_answer(b"HTTP/1.0 404 Not Found\r\n\r\n{}").is_err());
        assert!(parse_answer(b"HTTP/1.0 200 OK\r\n\r\n{\"x\":1}").is_err());
        assert!(parse_answer(b"\x00\x01garbage").is_err());
    }
}
