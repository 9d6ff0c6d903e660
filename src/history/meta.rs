//! The keys of the `watcher_state` table (either backend): where the
//! history stands, read and written by the writer and the readers.

/// The resume revision's key in `watcher_state`.
pub(super) const RESUME_KEY: &str = "resume_revision";
/// The etcd cluster id last recorded (its u64 bits as i64).
pub(super) const CLUSTER_KEY: &str = "cluster_id";
/// The current timeline (`terms.epoch`); absent means 0.
pub(super) const EPOCH_KEY: &str = "epoch";
/// The last moment (unix ms) the history's watcher is known to have been
/// live: the commit of a batch, or a caught-up heartbeat.
/// Time after it, until a watcher is live again, was not watched.
pub(super) const WATCHED_KEY: &str = "watched_at_ms";

/// Which cluster's state: `None` for the one cluster of a serve
/// without `--cluster`, whose keys are the plain ones above; `Some(name)`
/// for a named cluster, whose keys end in `@name`. A name never holds `@`
/// or `/` (`cli::clusters` refuses them), so no two scopes share a key.
pub type Scope = Option<std::sync::Arc<str>>;

/// `key` of `scope`: the key itself, or `key@name`.
pub fn scoped(key: &str, scope: Option<&str>) -> String {
    match scope {
        None => key.to_owned(),
        Some(name) => format!("{key}@{name}"),
    }
}

/// The SQL that lists the resume keys: one per cluster the history records.
pub(super) const SCOPES_SQL: &str = "SELECT key FROM watcher_state \
     WHERE key = 'resume_revision' OR key LIKE 'resume_revision@%' ORDER BY key";

/// The cluster a resume key is of (`None`: the unnamed one).
pub(super) fn scope_of_key(key: &str) -> Option<String> {
    key.strip_prefix(RESUME_KEY)
        .and_then(|rest| rest.strip_prefix('@'))
        .map(str::to_owned)
}
