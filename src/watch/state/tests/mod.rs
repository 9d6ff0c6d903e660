//! The state machine's tests, by scenario, fed key changes and snapshots as
//! etcd would send them; the helpers that build them are here.

mod bounds;
mod collisions;
mod concurrency;
mod deletions;
mod key_layout;
mod leases;
mod members;
mod queue;
mod snapshot;
mod terms;

use super::*;

fn put(key: &str, value: &str, create: i64, rev: i64, lease: i64) -> Change {
    Change::Put(kv_at(key, value, create, rev, lease))
}

fn kv_at(key: &str, value: &str, create: i64, rev: i64, lease: i64) -> Kv {
    Kv {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        create_revision: create,
        mod_revision: rev,
        lease,
    }
}

fn del(key: &str, rev: i64, lease: i64) -> Change {
    Change::Delete {
        key: key.as_bytes().to_vec(),
        revision: rev,
        lease: Some(lease),
    }
}

fn kinds(p: &[Pending]) -> Vec<&'static str> {
    p.iter().map(|p| p.event.kind.name()).collect()
}

/// A Lease value as kube-apiserver stores it in JSON, times in seconds.
fn lease(holder: &str, acquired: i64, renewed: i64, transitions: i64) -> String {
    let t = |s: i64| format!("1970-01-01T00:{:02}:{:02}.000000Z", s / 60, s % 60);
    format!(
        r#"{{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{{}},"spec":{{"holderIdentity":"{holder}","leaseDurationSeconds":15,"acquireTime":"{}","renewTime":"{}","leaseTransitions":{transitions}}}}}"#,
        t(acquired),
        t(renewed)
    )
}
