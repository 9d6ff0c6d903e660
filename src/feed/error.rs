//! What a feed refuses or cannot do, typed; the command line adds where.

use crate::history::HistoryError;

#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// A `--source` the cluster's etcd cannot serve.
    #[error("{cluster}: reading --source: {error}")]
    Sources {
        cluster: String,
        error: crate::watch::SourcesError,
    },
    /// The history could not be read (`what` was being read).
    #[error("{what}: {error}")]
    History {
        what: &'static str,
        error: HistoryError,
    },
    /// A blocking read of the history did not finish (its task panicked
    /// or was cancelled).
    #[error("{what}: the read did not finish: {why}")]
    Task { what: &'static str, why: String },
    /// The Kubernetes Lease source is not usable as configured.
    #[error("the Lease source: {0}")]
    LeaseSource(crate::layout::SourceError),
    /// Another etcd than the one the history recorded under the cluster's
    /// name answers (not adopted).
    #[error("checking {cluster}'s etcd: {why}")]
    NotRecorded { cluster: String, why: String },
}

/// A blocking read of the history, off the runtime, named for its error.
pub async fn read_history<T: Send + 'static>(
    what: &'static str,
    read: impl FnOnce() -> Result<T, HistoryError> + Send + 'static,
) -> Result<T, FeedError> {
    match tokio::task::spawn_blocking(read).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(error)) => Err(FeedError::History { what, error }),
        Err(e) => Err(FeedError::Task {
            what,
            why: e.to_string(),
        }),
    }
}
