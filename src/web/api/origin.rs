//! Where a mutating call comes from: the first check of [`Mutation`]
//! (`auth.rs`), against DNS rebinding and other sites' pages.
//!
//! A page on `evil.example` whose name is made to resolve to 127.0.0.1
//! reaches a `tenure serve` on this machine through the user's browser,
//! same-origin as far as the browser knows; only the `Host` header it sends
//! (`evil.example:8080`) says so. A rebinding needs a *name*: a Host that
//! is an IP literal is the address the browser itself connected to, and
//! `localhost` is resolved by the browser, never by the attacker's DNS.
//!
//! - **Host**, when the API takes calls without a credential (`--no-auth`,
//!   as `tenure dev` runs): an IP literal (v4, or v6 in brackets: the
//!   listen address, 127.0.0.1, [::1], a pod's or a Service's address),
//!   `localhost`, or a name given with `--allowed-host NAME[:PORT]`; any
//!   other name is 403 `host_not_allowed`. The port is not compared: a
//!   rebinding is in the name, and behind a Service or a port forward the
//!   port the client used is not the one serve listens on. A serve on
//!   0.0.0.0 is no exception (it would take every name on every network it
//!   listens on): a name its callers use (an ingress's, a Service's DNS
//!   name) is given with `--allowed-host`. No Host at all (HTTP/1.0): no
//!   browser sends that, nothing to rebind. With `--api-token` the Host is
//!   not checked: the token is what a rebinding page does not have, and
//!   the names of a real deployment are not serve's to know.
//! - **Origin**, on every mutating call, when the request has one (browsers
//!   send it; curl and the client libraries do not): the same origin as the
//!   request's Host (scheme's default port when none is written), or a name
//!   given with `--allowed-host`; `null` (a sandboxed page, a file) never.
//!   Else 403 `origin_not_allowed`. tenure's pages make no mutating call.
//!
//! [`Mutation`]: super::auth::Mutation

use axum::http::{header, HeaderMap, StatusCode, Uri};

use super::ApiError;
use crate::web::{AppState, Auth};

/// A name a mutating call may be addressed to besides the ones no
/// rebinding can use (`serve --allowed-host NAME[:PORT]`): lower case;
/// without a port, any port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    name: String,
    port: Option<u16>,
}

impl AllowedHost {
    /// `NAME` or `NAME:PORT` (clap's value parser).
    pub fn parse(s: &str) -> Result<AllowedHost, String> {
        let a = Authority::parse(s).ok_or_else(|| {
            format!("{s:?} is not a host name: give NAME or NAME:PORT (e.g. tenure.example.com)")
        })?;
        Ok(AllowedHost {
            name: a.host,
            port: a.port,
        })
    }

    fn allows(&self, host: &str, port: Option<u16>) -> bool {
        self.name == host && (self.port.is_none() || self.port == port)
    }
}

/// A host and its port, as a Host header or an Origin writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    /// Lower case; an IPv6 address without its brackets.
    host: String,
    port: Option<u16>,
}

impl Authority {
    /// `host`, `host:port`, `[v6]`, `[v6]:port`; `None` for anything else.
    fn parse(s: &str) -> Option<Authority> {
        let (host, port) = match s.strip_prefix('[') {
            Some(rest) => {
                let (v6, after) = rest.split_once(']')?;
                v6.parse::<std::net::Ipv6Addr>().ok()?;
                (v6, after)
            }
            None => {
                let (h, _) = s.rsplit_once(':').unwrap_or((s, ""));
                let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
                if h.is_empty() || !h.chars().all(valid) {
                    return None;
                }
                (h, &s[h.len()..])
            }
        };
        let port = match port {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse::<u16>().ok()?),
        };
        Some(Authority {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// No rebinding can be in it: an IP literal, or `localhost`.
    fn unrebindable(&self) -> bool {
        self.host == "localhost" || self.host.parse::<std::net::IpAddr>().is_ok()
    }
}

/// An `Origin` header: `scheme://authority`, its port the scheme's
/// default when none is written.
fn origin(value: &str) -> Option<Authority> {
    let (scheme, rest) = value.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let mut a = Authority::parse(rest)?;
    a.port = Some(a.port.unwrap_or(default));
    Some(a)
}

/// Checks a mutating call's Host and Origin (see the module documentation).
pub(super) fn check(state: &AppState, headers: &HeaderMap, uri: &Uri) -> Result<(), ApiError> {
    let host_text = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()));
    let host = host_text.and_then(Authority::parse);
    let named = |a: &Authority| {
        state
            .allowed_hosts
            .iter()
            .any(|n| n.allows(&a.host, a.port))
    };
    if matches!(state.auth, Auth::Open) {
        match (host_text, &host) {
            (None, _) => {}
            (Some(_), Some(h)) if h.unrebindable() || named(h) => {}
            (Some(text), _) => return Err(host_refused(text)),
        }
    }
    let Some(value) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or("(not text)");
    // A Host without a port is at the Origin's scheme's default.
    let allowed = origin(text).is_some_and(|o| {
        let same = host
            .as_ref()
            .is_some_and(|h| h.host == o.host && h.port.or(o.port) == o.port);
        same || named(&o)
    });
    if allowed {
        Ok(())
    } else {
        Err(origin_refused(text, host_text.unwrap_or("(none)")))
    }
}

fn host_refused(host: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "host_not_allowed",
        format!(
            "Host {host:?} is not a name this server takes mutating calls for (it runs with \
             --no-auth, and a web page could have led a browser here by that name: DNS \
             rebinding): call it by its address (127.0.0.1:PORT, localhost:PORT), or start \
             tenure serve with --allowed-host NAME for each name its callers use"
        ),
    )
}

fn origin_refused(origin: &str, host: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "origin_not_allowed",
        format!(
            "Origin {origin:?} is not this server's (Host {host:?}): mutating calls are not \
             taken from another site's page; call the API from your program (no Origin), or \
             start tenure serve with --allowed-host NAME for that page's host"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins_are_read_as_browsers_write_them() {
        let a = |s: &str| Authority::parse(s).map(|a| (a.host, a.port));
        assert_eq!(a("127.0.0.1:8080"), Some(("127.0.0.1".into(), Some(8080))));
        assert_eq!(a("[::1]:80"), Some(("::1".into(), Some(80))));
        assert_eq!(a("Evil.Example"), Some(("evil.example".into(), None)));
        for bad in ["", ":80", "a b", "a:x", "[::1", "[zz]:1", "a/b", "a@b:1"] {
            assert_eq!(a(bad), None, "{bad:?}");
        }
        assert!(Authority::parse("[::1]").is_some_and(|a| a.unrebindable()));
        assert!(Authority::parse("localhost:9").is_some_and(|a| a.unrebindable()));
        assert!(!Authority::parse("127.0.0.1.evil.example").is_some_and(|a| a.unrebindable()));
        let o = |s: &str| origin(s).map(|a| (a.host, a.port));
        assert_eq!(
            o("https://t.example"),
            Some(("t.example".into(), Some(443)))
        );
        assert_eq!(
            o("http://127.0.0.1:8080"),
            Some(("127.0.0.1".into(), Some(8080)))
        );
        assert_eq!(o("null"), None);
        assert_eq!(o("file://x"), None);
        let named = AllowedHost::parse("T.example").expect("a name");
        assert!(named.allows("t.example", Some(1)) && named.allows("t.example", None));
        let with_port = AllowedHost::parse("t.example:8080").expect("a name");
        assert!(
            with_port.allows("t.example", Some(8080)) && !with_port.allows("t.example", Some(1))
        );
        assert!(AllowedHost::parse("http://t.example").is_err());
    }
}
