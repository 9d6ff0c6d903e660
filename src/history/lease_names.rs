//! Kubernetes' Leases renamed once, in either backend: a history written
//! before Leases were named as Kubernetes names them holds them as
//! `PREFIX NAMESPACE/NAME` (`/registry/kube-system/x`, or
//! `CLUSTER//registry/kube-system/x` in a history of several clusters);
//! they become `NAMESPACE/NAME` (`CLUSTER/NAMESPACE/NAME`), what the
//! watcher names them now, so that a term recorded before the upgrade and
//! one after are one election's.
//!
//! - **Which**: the names of terms stored with the `lease` layout (only
//!   Leases have it), and only those shaped as the old names were (a path
//!   ending in two non-empty segments). Their every row is renamed: terms,
//!   events (with the name inside their JSON), refusals, the summary row.
//! - **Never two into one**: a name that two old names would both become,
//!   or that the history already holds (one of tenure's own elections
//!   called `kube-system/x`), is left as it was, and a warning names it.
//!   Its rows are not lost; they stay under the old name (the Lease's
//!   later terms, named by the watcher, join the new name).
//! - Run inside the schema migration's transaction (SQLite version 5,
//!   PostgreSQL version 7): all or nothing, once.

use std::collections::{BTreeMap, BTreeSet};

use super::HistoryError;

/// The names of elections with a term of the `lease` layout.
const LEASES_SQL: &str = "SELECT DISTINCT election FROM terms WHERE layout = 'lease'";

/// Every election name the history holds.
const NAMES_SQL: &str = "SELECT election FROM elections";

/// The name an old Lease name has now (`None`: not an old Lease name).
pub(super) fn renamed(old: &str) -> Option<String> {
    if old.starts_with('/') {
        return crate::layout::path::lease_name_of_path(old);
    }
    // `CLUSTER//PREFIX…/NAMESPACE/NAME`: the cluster kept.
    let (cluster, rest) = old.split_once('/')?;
    if !rest.starts_with('/') {
        return None;
    }
    let inner = renamed(rest)?;
    Some(crate::events::qualify(cluster, &inner))
}

/// Which names to rename: `leases` (names with a Lease term) to their new
/// names, leaving out those whose new name `existing` holds or two share.
fn plan(leases: Vec<String>, existing: &BTreeSet<String>) -> Vec<(String, String)> {
    let mut by_new: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for old in leases {
        if let Some(new) = renamed(&old) {
            by_new.entry(new).or_default().push(old);
        }
    }
    let mut pairs = Vec::new();
    for (new, olds) in by_new {
        if olds.len() > 1 || existing.contains(&new) {
            tracing::warn!(
                name = %new,
                old = ?olds,
                "history: Leases are named NAMESPACE/NAME now, but this name is taken: \
                 these keep their old names"
            );
            continue;
        }
        pairs.extend(olds.into_iter().map(|old| (old, new.clone())));
    }
    pairs
}

/// The statements that rename one election (`old`, `new`): SQLite's and
/// PostgreSQL's, which differ in placeholders and JSON functions only.
const RENAME: [(&str, &str); 4] = [
    (
        "UPDATE terms SET election = ?2 WHERE election = ?1",
        "UPDATE terms SET election = $2 WHERE election = $1",
    ),
    (
        "UPDATE refusals SET election = ?2 WHERE election = ?1",
        "UPDATE refusals SET election = $2 WHERE election = $1",
    ),
    (
        "UPDATE events SET election = ?2, json = json_set(json, '$.election', ?2) \
         WHERE election = ?1",
        "UPDATE events SET election = $2, \
         json = jsonb_set(json::jsonb, '{election}', to_jsonb($2::text))::text \
         WHERE election = $1",
    ),
    (
        "UPDATE elections SET election = ?2 WHERE election = ?1",
        "UPDATE elections SET election = $2 WHERE election = $1",
    ),
];

/// The rename in a SQLite migration transaction.
pub(super) fn sqlite(tx: &rusqlite::Transaction<'_>) -> Result<(), HistoryError> {
    let column = |sql: &str| -> Result<Vec<String>, HistoryError> {
        let mut stmt = tx.prepare(sql)?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    };
    let existing: BTreeSet<String> = column(NAMES_SQL)?.into_iter().collect();
    for (old, new) in plan(column(LEASES_SQL)?, &existing) {
        for (sql, _) in RENAME {
            tx.execute(sql, (&old, &new))?;
        }
    }
    Ok(())
}

/// The rename in a PostgreSQL migration transaction.
pub(super) fn postgres(tx: &mut postgres::Transaction<'_>) -> Result<(), HistoryError> {
    let mut column = |sql: &str| -> Result<Vec<String>, HistoryError> {
        let rows = tx.query(sql, &[])?;
        rows.iter()
            .map(|r| r.try_get::<_, String>(0).map_err(HistoryError::from))
            .collect()
    };
    let existing: BTreeSet<String> = column(NAMES_SQL)?.into_iter().collect();
    let leases = column(LEASES_SQL)?;
    for (old, new) in plan(leases, &existing) {
        for (_, sql) in RENAME {
            tx.execute(sql, &[&old, &new])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_lease_name_becomes_namespace_slash_name() {
        let cases = [
            ("/registry/kube-system/x", Some("kube-system/x")),
            ("/a/b/registry/ns/x", Some("ns/x")),
            ("/ns/x", Some("ns/x")),
            ("c1//registry/ns/x", Some("c1/ns/x")),
            // Already renamed: left alone.
            ("ns/x", None),
            ("c1/ns/x", None),
            ("/x", None),
            ("/registry//x", None),
            ("", None),
        ];
        for (old, new) in cases {
            assert_eq!(renamed(old).as_deref(), new, "{old}");
        }
    }

    #[test]
    fn a_name_taken_or_shared_is_left_alone() {
        let existing: BTreeSet<String> = ["team/db".to_owned()].into();
        let plan = plan(
            vec![
                "/registry/ns/x".to_owned(),
                "/other/ns/x".to_owned(),
                "/registry/team/db".to_owned(),
                "/registry/ns/y".to_owned(),
            ],
            &existing,
        );
        assert_eq!(plan, vec![("/registry/ns/y".to_owned(), "ns/y".to_owned())]);
    }
}
