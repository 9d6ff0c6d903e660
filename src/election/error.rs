use std::time::Duration;

use super::Leader;

use tonic::Code as tonic_code;

/// Every way an election operation can fail. Callers match on the variant;
/// the message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid election name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },

    #[error("invalid resource name {resource:?}: {reason}")]
    InvalidResource {
        resource: String,
        reason: &'static str,
    },

    #[error("invalid candidate id: {0}")]
    InvalidCandidate(&'static str),

    #[error("invalid fencing token {0}: tokens are etcd revisions and start at 1")]
    InvalidToken(i64),

    #[error("invalid TTL: {0}")]
    InvalidTtl(String),

    #[error(
        "no etcd endpoint given (use --endpoints or TENURE_ENDPOINTS, e.g. http://127.0.0.1:2379)"
    )]
    NoEndpoints,

    /// The caller's token is not the current term of this election.
    #[error("token {token} does not hold election {name}: {}", describe_current(.current))]
    NotHolder {
        name: String,
        token: i64,
        current: Option<Box<Leader>>,
    },

    /// The election's name and another election's keys overlap in etcd's
    /// own `Election` layout (one name is a path prefix of the other).
    #[error(
        "election {name} collides with the key {key:?}: etcd's own Election layout (etcdctl \
         elect, Go's concurrency.Election) takes every key under election/NAME/ for a candidate \
         of NAME, so no election's name may be a path prefix of another's; name it so that it \
         is no prefix of another election and lies under none (e.g. {})",
        .name.replace('/', "-")
    )]
    NameCollision { name: String, key: String },

    /// The client is pinned to one etcd cluster ([`crate::election::Client::only_in_cluster`])
    /// and its endpoints answer as another: nothing was written.
    #[error(
        "etcd answers as cluster id {found:x}, not {expected:x} where this election belongs: \
         nothing was written there; point the endpoints at the etcd cluster {expected:x}"
    )]
    OtherCluster { expected: u64, found: u64 },

    /// A token at or below tenure's token floor: etcd was restored from a
    /// snapshot and its revisions repeat tokens handed out before.
    #[error("{}", describe_floor(*.token, *.floor, *.revision))]
    BelowFloor {
        token: i64,
        floor: i64,
        /// etcd's revision when it said so.
        revision: i64,
    },

    #[error("no leadership of {name} within {waited:?}")]
    Timeout { name: String, waited: Duration },

    #[error("etcd did not answer within {0:?} (is it running and reachable?)")]
    EtcdTimeout(Duration),

    #[error("etcd: {0}")]
    Etcd(Box<etcd_client::Error>),

    #[error("unexpected answer from etcd: {0}")]
    Protocol(String),

    /// The TLS settings cannot be used (unreadable file, missing key, an
    /// http:// endpoint with certificates).
    #[error("TLS setup: {0}")]
    TlsConfig(String),

    /// The TLS handshake with etcd failed; the message says which
    /// certificate and why.
    #[error("{0}")]
    Tls(String),

    /// etcd refused the user, its password, or the lack of one.
    #[error("etcd authentication failed{}: {reason}", for_user(.user))]
    Auth {
        user: Option<String>,
        reason: String,
    },

    /// etcd's authorization refused the request: the user's roles do not
    /// grant it on these keys.
    #[error(
        "etcd denied the request (permission denied){}: its roles do not grant this on the \
         keys under the prefix; grant them with `etcdctl role grant-permission` (README: \
         Connecting to a production etcd)",
        for_user(.user)
    )]
    PermissionDenied { user: Option<String> },
}

fn for_user(user: &Option<String>) -> String {
    match user {
        Some(u) => format!(" for etcd user {u:?}"),
        None => " (no etcd user given)".to_owned(),
    }
}

/// etcd's refusals that no retry will fix, as typed errors.
fn access_error(e: &etcd_client::Error) -> Option<Error> {
    let etcd_client::Error::GRpcStatus(s) = e else {
        return None;
    };
    access_error_in(s.message())
}

/// The same, from the words of etcd's message (a gRPC status, a watch's
/// cancel reason).
fn access_error_in(m: &str) -> Option<Error> {
    let auth = |reason: &str| {
        Some(Error::Auth {
            user: None,
            reason: reason.to_owned(),
        })
    };
    if m.contains("permission denied") {
        return Some(Error::PermissionDenied { user: None });
    }
    if m.contains("invalid user ID or password") {
        return auth("wrong user or password (check --user and the password)");
    }
    if m.contains("authentication is not enabled") {
        return auth("etcd has authentication disabled: drop --user and the password");
    }
    if m.contains("user name is empty") || m.contains("user name not found") {
        return auth("etcd has authentication enabled: give --user NAME and a password");
    }
    if m.contains("invalid auth token") {
        return auth("etcd refused the auth token even after re-authenticating");
    }
    if m.contains("invalid peer certificate") {
        return Some(Error::Tls(format!(
            "TLS to etcd failed: {m} (check --cacert and etcd's certificate)"
        )));
    }
    None
}

impl From<etcd_client::Error> for Error {
    fn from(e: etcd_client::Error) -> Self {
        if let Some(access) = access_error(&e) {
            return access;
        }
        Error::Etcd(Box::new(e))
    }
}

fn describe_floor(token: i64, floor: i64, revision: i64) -> String {
    if revision <= floor {
        format!(
            "etcd's revision {revision} is at or below tenure's token floor {floor}: etcd was \
             restored from a snapshot without --bump-revision and its revisions repeat tokens \
             handed out before, so token {token} is refused; restore it again with `etcdutl \
             snapshot restore --bump-revision 1000000000 --mark-compacted` (docs/operations.md, \
             Restoring etcd)"
        )
    } else {
        format!(
            "token {token} is at or below tenure's token floor {floor}: it dates from before \
             etcd was restored from a snapshot, when a term of the other timeline may have had \
             it too; campaign again for a token above the floor (docs/operations.md, Restoring \
             etcd)"
        )
    }
}

fn describe_current(current: &Option<Box<Leader>>) -> String {
    match current {
        Some(l) => format!("it is held by {:?} with token {}", l.holder, l.token),
        None => "nobody leads it now".to_owned(),
    }
}

/// A connection that broke under a request reaches us as gRPC `Unknown`
/// (or `Internal`) with the transport's words: the request may or may not
/// have been applied, and a new connection may work.
fn is_connection_failure(message: &str) -> bool {
    const SIGNS: [&str; 6] = [
        "transport error",
        "h2 protocol error",
        "connection reset",
        "broken pipe",
        "connection closed",
        "error trying to connect",
    ];
    let m = message.to_ascii_lowercase();
    SIGNS.iter().any(|s| m.contains(s))
}

impl Error {
    /// A watch cancelled by etcd with `reason` for want of permission or
    /// authentication, as the error a request refused for it is; `None`
    /// for any other cancellation.
    pub(crate) fn from_refusal(reason: &str) -> Option<Error> {
        access_error_in(reason)
            .filter(|e| matches!(e, Error::PermissionDenied { .. } | Error::Auth { .. }))
    }

    /// Names the etcd user in an authentication or permission error.
    pub fn with_user(self, user: Option<&str>) -> Self {
        match self {
            Error::Auth { user: None, reason } => Error::Auth {
                user: user.map(str::to_owned),
                reason,
            },
            Error::PermissionDenied { user: None } => Error::PermissionDenied {
                user: user.map(str::to_owned),
            },
            other => other,
        }
    }

    /// True for TLS, authentication and permission errors: configuration
    /// an operator must fix; retrying does not help.
    pub fn is_access_denied(&self) -> bool {
        matches!(
            self,
            Error::TlsConfig(_)
                | Error::Tls(_)
                | Error::Auth { .. }
                | Error::PermissionDenied { .. }
        )
    }

    /// True when etcd could not be reached or did not answer in time: the
    /// operation may be retried, and it may or may not have been applied.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::EtcdTimeout(_) => true,
            Error::Etcd(e) => match &**e {
                etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
                etcd_client::Error::GRpcStatus(s) => {
                    matches!(
                        s.code(),
                        tonic_code::Unavailable
                            | tonic_code::DeadlineExceeded
                            | tonic_code::Cancelled
                    ) || (matches!(s.code(), tonic_code::Unknown | tonic_code::Internal)
                        && is_connection_failure(s.message()))
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// True when the same request may succeed if sent again: etcd was
    /// unreachable, slow, electing a leader or overloaded. False for what no
    /// retry fixes (permission denied, authentication, invalid argument, a
    /// missing lease, an unsupported request): those are reported at once.
    pub fn is_retryable(&self) -> bool {
        if self.is_unavailable() {
            return true;
        }
        match self {
            Error::Etcd(e) => match &**e {
                // "too many requests", a txn aborted by a leader change; not
                // a full disk (NOSPACE alarm): no retry frees space.
                etcd_client::Error::GRpcStatus(s) => {
                    matches!(
                        s.code(),
                        tonic_code::ResourceExhausted | tonic_code::Aborted
                    ) && !s.message().contains("database space exceeded")
                }
                // A stream that broke: a new one may work.
                etcd_client::Error::WatchError(_) => true,
                etcd_client::Error::LeaseKeepAliveError(_) => !self.is_lease_not_found(),
                _ => false,
            },
            _ => false,
        }
    }

    /// True when etcd said the lease does not exist (revoked or expired).
    pub fn is_lease_not_found(&self) -> bool {
        match self {
            Error::Etcd(e) => match &**e {
                etcd_client::Error::GRpcStatus(s) => {
                    s.message().contains("requested lease not found")
                }
                etcd_client::Error::LeaseKeepAliveError(m) => m.contains("not found"),
                _ => false,
            },
            _ => false,
        }
    }
}
