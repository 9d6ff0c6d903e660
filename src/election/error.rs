use std::time::Duration;

use super::Leader;

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

    #[error("no leadership of {name} within {waited:?}")]
    Timeout { name: String, waited: Duration },

    #[error("etcd did not answer within {0:?} (is it running and reachable?)")]
    EtcdTimeout(Duration),

    #[error("etcd: {0}")]
    Etcd(Box<etcd_client::Error>),

    #[error("unexpected answer from etcd: {0}")]
    Protocol(String),
}

impl From<etcd_client::Error> for Error {
    fn from(e: etcd_client::Error) -> Self {
        Error::Etcd(Box::new(e))
    }
}

fn describe_current(current: &Option<Box<Leader>>) -> String {
    match current {
        Some(l) => format!("it is held by {:?} with token {}", l.holder, l.token),
        None => "nobody leads it now".to_owned(),
    }
}

impl Error {
    /// True when etcd could not be reached or did not answer in time: the
    /// operation may be retried, and nothing was decided.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::EtcdTimeout(_) => true,
            Error::Etcd(e) => {
                matches!(
                    **e,
                    etcd_client::Error::TransportError(_)
                        | etcd_client::Error::IoError(_)
                        | etcd_client::Error::GRpcStatus(_)
                ) && !self.is_lease_not_found()
            }
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
