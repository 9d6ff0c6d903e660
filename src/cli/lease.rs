//! `tenure leader` on a Kubernetes Lease (`NAMESPACE/NAME`, as
//! `--source kubernetes:PREFIX` and the API name it): its holder, token, renewal,
//! duration and whether it lapsed by its own clock fields. Read from
//! kube-apiserver's etcd with the `kubernetes` layout, or through the API
//! (`--kubeconfig`, `--in-cluster`: `watch::kube::read_lease`); either way
//! the value is decoded by the layout's own reader, as the watcher reads it.
//!
//! The token is the watcher's: the revision of the write that gave the
//! Lease to its holder. From etcd it is found by reading the key's earlier
//! values back to that write (while etcd keeps them); through the API, or
//! past etcd's compaction, it is not known, and the answer says that the
//! number shown is the value's own revision.

use std::path::Path;

use anyhow::Context;
use etcd_client::GetOptions;
use serde::Serialize;

use super::EXIT_ERROR;
use crate::election::Client;
use crate::layout::kubernetes::{Kubernetes, DEFAULT_PREFIX, NAME, NAME_WITH_HEARTBEATS};
use crate::layout::{Claim, Hold, Role, Source, Unreadable};

/// The most earlier values read back for a term's first write (a Lease
/// renewed every 2 s between two compactions, 5 minutes apart, has 150).
const MAX_WALK: usize = 1000;

/// The etcd key of the Lease `path` names in `source`
/// (`default/demo` → `/registry/leases/default/demo`), checked against the
/// layout's own reading of keys; `None` when it names none.
pub(super) fn key_of(source: &Source, path: &str) -> Option<String> {
    let prefix = Kubernetes::prefix_of(source.prefix());
    let key = format!("{prefix}leases/{path}");
    matches!(source.layout().classify(key.as_bytes(), 0),
        Role::Candidate { election, .. } if election == path)
    .then_some(key)
}

/// What `tenure leader` says of a Lease.
#[derive(Serialize)]
struct Answer<'a> {
    name: &'a str,
    layout: &'static str,
    /// `etcd` or `kubernetes-api`.
    read_from: &'static str,
    holder: String,
    /// The pod a `hostname_uuid` holder identity names (client-go's, as
    /// kube-controller-manager writes it); `null` for any other identity.
    pod: Option<String>,
    /// The term's token when `token_is` is `acquisition`; the value's
    /// revision when it is `value_revision` (the acquisition not known).
    token: i64,
    token_is: &'static str,
    /// The revision (resourceVersion) of the value read.
    revision: i64,
    acquired_us: Option<i64>,
    renewed_us: Option<i64>,
    duration_seconds: Option<i64>,
    /// renewTime (else acquireTime) plus the duration, on the writer's clock.
    runs_out_us: Option<i64>,
    /// Whether that moment passed on this machine's clock (`null`: a field
    /// is missing).
    lapsed: Option<bool>,
    transitions: Option<i64>,
}

/// `tenure leader PATH --source kubernetes:PREFIX`: the Lease read from etcd.
pub(super) async fn from_etcd(
    client: &Client,
    path: &str,
    source: &Source,
    json: bool,
) -> anyhow::Result<i32> {
    let key = key_of(source, path).with_context(|| {
        format!(
            "{path} names no Lease of {source}: give NAMESPACE/NAME (a heartbeat lease needs \
             --source {NAME_WITH_HEARTBEATS}:PREFIX)"
        )
    })?;
    let resp = client
        .op(client.etcd().get(key.as_str(), None))
        .await
        .with_context(|| format!("reading {key} from etcd"))?;
    let Some(kv) = resp.kvs().first() else {
        return Ok(nobody(path, "no such Lease"));
    };
    let Some(hold) = held(source, kv.value(), path)? else {
        return Ok(nobody(path, "its holderIdentity is empty"));
    };
    let acquired = acquired_at(client, source, &key, &hold, kv.mod_revision()).await;
    let answer = Answer::of(path, source, "etcd", hold, kv.mod_revision(), acquired);
    answer.print(json)
}

/// `tenure leader PATH --kubeconfig FILE` (or `--in-cluster`, `kubeconfig`
/// `None`): the Lease read through the API.
pub(super) async fn through_api(
    path: &str,
    kubeconfig: Option<&Path>,
    json: bool,
) -> anyhow::Result<i32> {
    let api = match kubeconfig {
        Some(file) => crate::watch::kube::ApiConfig::from_kubeconfig(file)
            .with_context(|| format!("reading the kubeconfig {}", file.display()))?,
        None => crate::watch::kube::ApiConfig::in_cluster()?,
    };
    let source = Source::parse(&format!("{NAME}:{DEFAULT_PREFIX}"))?;
    let named = path
        .split_once('/')
        .filter(|_| crate::layout::path::is_lease_name(path));
    let Some((namespace, name)) = named else {
        anyhow::bail!(
            "{path} names no Lease: a Lease is NAMESPACE/NAME (kubectl get lease -n NAMESPACE \
             NAME), as tenure serve names it"
        );
    };
    let kv = crate::watch::kube::read_lease(&api, DEFAULT_PREFIX, namespace, name)
        .await
        .with_context(|| format!("reading the Lease {namespace}/{name}"))?;
    let Some(kv) = kv else {
        return Ok(nobody(path, "no such Lease"));
    };
    let Some(hold) = held(&source, &kv.value, path)? else {
        return Ok(nobody(path, "its holderIdentity is empty"));
    };
    let answer = Answer::of(path, &source, "kubernetes-api", hold, kv.mod_revision, None);
    answer.print(json)
}

/// The holder `value` names (`None`: nobody), as the layout reads it.
fn held(source: &Source, value: &[u8], path: &str) -> anyhow::Result<Option<Hold>> {
    match source.layout().read_claim(value) {
        Some(Claim::Held(hold)) => Ok(Some(hold)),
        Some(Claim::Free { .. }) => Ok(None),
        Some(Claim::Unreadable(Unreadable::Encrypted)) => anyhow::bail!(
            "the Lease {path} is encrypted at rest in etcd (k8s:enc:): read it through the API \
             (--kubeconfig FILE)"
        ),
        _ => anyhow::bail!("the value of {path} is not a Lease tenure can read"),
    }
}

fn nobody(path: &str, why: &str) -> i32 {
    eprintln!("tenure: nobody leads {path} ({why})");
    EXIT_ERROR
}

/// The revision of the write that gave the Lease to `hold`'s holder: its
/// earlier values read back (at most [`MAX_WALK`]) while they are the same
/// term. `None` when that write is not known: compacted, unreadable on the
/// way, or further back than the walk goes.
async fn acquired_at(
    client: &Client,
    source: &Source,
    key: &str,
    hold: &Hold,
    mod_revision: i64,
) -> Option<i64> {
    let mut at = mod_revision;
    for _ in 0..MAX_WALK {
        if at <= 1 {
            return Some(at);
        }
        let before = GetOptions::new().with_revision(at - 1);
        let resp = client.op(client.etcd().get(key, Some(before))).await.ok()?;
        // No value before: the key was created (again) by the write at `at`.
        let Some(kv) = resp.kvs().first() else {
            return Some(at);
        };
        match source.layout().read_claim(kv.value()) {
            Some(Claim::Held(h)) if h.same_term(hold) => at = kv.mod_revision(),
            Some(Claim::Held(_) | Claim::Free { .. }) => return Some(at),
            _ => return None,
        }
    }
    None
}

impl<'a> Answer<'a> {
    fn of(
        name: &'a str,
        source: &Source,
        read_from: &'static str,
        hold: Hold,
        revision: i64,
        acquired: Option<i64>,
    ) -> Self {
        let runs_out_us = hold.runs_out_us();
        let now_us = crate::events::now_ms().saturating_mul(1000);
        Answer {
            name,
            layout: source.layout().name(),
            read_from,
            token: acquired.unwrap_or(revision),
            token_is: if acquired.is_some() {
                "acquisition"
            } else {
                "value_revision"
            },
            revision,
            acquired_us: hold.acquired_us,
            renewed_us: hold.renewed_us,
            duration_seconds: hold.duration_s,
            runs_out_us,
            lapsed: runs_out_us.map(|out| out < now_us),
            transitions: hold.transitions,
            pod: crate::layout::kubernetes::pod_of(&hold.holder).map(str::to_owned),
            holder: hold.holder,
        }
    }

    fn print(&self, json: bool) -> anyhow::Result<i32> {
        if json {
            println!("{}", serde_json::to_string(self)?);
            return Ok(0);
        }
        let token = if self.token_is == "acquisition" {
            format!("token {}", self.token)
        } else {
            format!(
                "token not known: {} is its value's revision, the write that gave it to {} \
                 is not read",
                self.revision,
                crate::text::visible(&self.holder)
            )
        };
        let pod = self.pod.as_deref().map_or(String::new(), |p| {
            format!(" (pod {})", crate::text::visible(p))
        });
        println!(
            "{}{pod} leads {} ({token}; {} layout, read from {})",
            crate::text::visible(&self.holder),
            crate::text::visible(self.name),
            self.layout,
            self.read_from
        );
        let time = |us: Option<i64>| us.map_or("not written".to_owned(), format_us);
        println!(
            "  acquired {}, renewed {}, lease {} s",
            time(self.acquired_us),
            time(self.renewed_us),
            self.duration_seconds
                .map_or("not written".to_owned(), |s| s.to_string())
        );
        let verdict = match self.lapsed {
            Some(true) => "lapsed",
            Some(false) => "not lapsed",
            None => "lapsed or not: not known",
        };
        println!(
            "  runs out {} by its own clock fields: {verdict} by this machine's clock",
            time(self.runs_out_us)
        );
        Ok(0)
    }
}

fn format_us(us: i64) -> String {
    crate::history::format_ms(us.div_euclid(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(spec: &str, path: &str) -> Option<String> {
        key_of(&Source::parse(spec).expect("source"), path)
    }

    #[test]
    fn a_lease_name_is_its_key_less_leases() {
        let kcm = "kube-system/kube-controller-manager";
        assert_eq!(
            key("kubernetes:/registry/", kcm).as_deref(),
            Some("/registry/leases/kube-system/kube-controller-manager")
        );
        assert_eq!(
            key("kubernetes:/other", "default/demo").as_deref(),
            Some("/other/leases/default/demo")
        );
        // A heartbeat is no election unless the source reads them.
        let node = "kube-node-lease/node-1";
        assert_eq!(key("kubernetes:/registry/", node), None);
        assert!(key("kubernetes+heartbeats:/registry/", node).is_some());
        // Not NAMESPACE/NAME.
        assert_eq!(key("kubernetes:/registry/", "default"), None);
        assert_eq!(key("kubernetes:/registry/", "a/b/c"), None);
        assert_eq!(key("kubernetes:/registry/", "/registry/a/b"), None);
    }
}
