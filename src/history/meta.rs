//! The keys of the `watcher_state` table (either backend): where the
//! history stands, read and written by the writer and the readers.

/// The resume revision's key in `watcher_state`.
pub(super) const RESUME_KEY: &str = "resume_revision";
/// The etcd cluster id last recorded (its u64 bits as i64).
pub(super) const CLUSTER_KEY: &str = "cluster_id";
/// The current timeline (`terms.epoch`); absent means 0.
pub(super) const EPOCH_KEY: &str = "epoch";
/// The last moment (unix ms) the history's watcher is known to have been
/// live: the commit of a batch, or a caught-up heartbeat (issue 20.7).
/// Time after it, until a watcher is live again, was not watched.
pub(super) const WATCHED_KEY: &str = "watched_at_ms";
