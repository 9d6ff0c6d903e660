//! Kubernetes' Leases read through its API (`serve --kubeconfig`), beside
//! a serve reading the same Leases from kube-apiserver's etcd (`--source
//! kubernetes:/registry/`), with the real parts: kube-apiserver v1.37 on
//! the harness etcd, client-go v0.37 `leaderelection` candidates on
//! `default/demo`, and tenure's ServiceAccount bound to the ClusterRole
//! deploy/kubernetes ships (get, list and watch on leases: shown to read
//! Leases and nothing else).
//!
//! The scenario: a release, a kill -9 (expiry), the API serve killed -9
//! and restarted, a forced takeover through the API, the Lease deleted, a
//! release, then a frozen leader alone (its Lease lapses, counted by both
//! serves, until a new candidate takes it: expired) and a last release. Both histories must equal the test's own record (its
//! etcd watch of the Lease key, `support::kube::LeaseLog`): the same
//! holders, tokens (etcd revisions), ends and causes. Then the API serve
//! is stopped while a term begins and ends, etcd is compacted and
//! kube-apiserver restarted (its watch cache starts over): the API serve
//! resumes at a resourceVersion nobody has any more (410 Gone), lists
//! afresh and records a gap over that term, never the term itself; the
//! etcd serve, which watched throughout, has it. Once more without the
//! compaction: the exact list at the stored resourceVersion is read from
//! etcd, and the new watch cache refuses the watch from there (410).
//!
//! Within it: `tenure leader` on the Lease, from etcd and through the API,
//! against the Lease as kube-apiserver returns it and the test's etcd
//! watch; a user no role is bound to (403: said on stderr and in /readyz,
//! retried until a binding grants the verbs). Beside it: an API that never
//! answers (/readyz names the API, not etcd) and one whose
//! resourceVersions are not integers (serve exits 1 saying what to do).
//!
//! Beside it, what the API's sizes and connections may do: a tenant's 55
//! Leases with a 1.3 MB holderIdentity (a 72 MB list) beside a renewed
//! Lease in another namespace (recorded, ready); a proxy whose open
//! connections stop forwarding (noticed within 12 s, the handover
//! recorded); 100 Leases per etcd transaction (every one recorded).
//!
//! Wall time: 39-45 s on 2 shared cores (kube-apiserver started three
//! times, 3-6 s each; three 4 s Leases run out).
//!
//! The files: `history.rs` (the scenario), `leader.rs`, `page.rs` and
//! `denied.rs` (checks made within it), `odd_apis.rs` (an API that never
//! answers, one whose resourceVersions are no revisions), `sizes.rs` (sizes
//! and connections). The helpers several of them use are here.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod denied;
mod history;
mod leader;
mod odd_apis;
mod page;
mod sizes;

use std::path::Path;

use support::kube::{self, KubeApiserver};
use support::Serve;

const KEY: &str = "/registry/leases/default/demo";

const NAME: &str = "default/demo";

const LEASE_API: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/demo";

/// The gaps serve recorded: (from, to) revisions.
async fn gaps(serve: &Serve) -> Vec<(i64, i64)> {
    kube::events(serve, NAME)
        .await
        .iter()
        .filter(|e| e["type"] == "gap")
        .map(|e| {
            let rev = |k: &str| e[k].as_i64().unwrap_or_else(|| panic!("{k} in {e}"));
            (rev("from_revision"), rev("to_revision"))
        })
        .collect()
}

/// A token of tenure's ServiceAccount in `dir/token`, and a kubeconfig
/// for it at `dir/kubeconfig`; the account reads Leases and nothing else.
async fn reader(api: &KubeApiserver, dir: &Path) -> String {
    let kubeconfig = api.reader_kubeconfig(dir).await;
    let token = std::fs::read_to_string(dir.join("token")).unwrap();
    let leases = "/apis/coordination.k8s.io/v1/leases";
    assert_eq!(api.status_as(&token, leases).await, 200);
    assert_eq!(api.status_as(&token, "/api/v1/secrets").await, 403);
    assert_eq!(
        api.status_as(&token, "/api/v1/namespaces/default/configmaps")
            .await,
        403
    );
    kubeconfig.display().to_string()
}
