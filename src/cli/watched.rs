//! `tenure leader PATH`: another system's election, read live through the
//! layout of the `--source` (or `TENURE_SOURCES`, as for serve) whose
//! prefix holds it. Its candidates are the keys that layout names for the
//! election, in the order they lead (`layout::lead_order`, as the watcher
//! has it), each holder cut as the watcher cuts it; nobody, where a key
//! without a lease blocks them (as the watcher has it too).

use anyhow::Context;
use etcd_client::{GetOptions, KeyValue};
use serde::Serialize;

use super::EXIT_ERROR;
use crate::election::keys::holder_of;
use crate::election::Client;
use crate::layout::{lead_order, token_at_rest, Role, Source};
use crate::text::visible;

#[derive(Serialize)]
struct Candidate {
    holder: String,
    token: i64,
    lease_id: i64,
    key: String,
}

#[derive(Serialize)]
struct Led<'a> {
    name: &'a str,
    layout: &'a str,
    #[serde(flatten)]
    leader: &'a Candidate,
    waiting: &'a [Candidate],
}

/// Prints who leads `path` (exit 0), or that nobody does (exit 1).
pub(super) async fn leader(
    client: &Client,
    path: &str,
    sources: &[Source],
    json: bool,
) -> anyhow::Result<i32> {
    let source = sources
        .iter()
        .find(|s| s.may_name(path))
        .with_context(|| no_source(path, sources))?;
    // A Kubernetes Lease: one key, its terms read from its value.
    if source.reads_leases() {
        return super::lease::from_etcd(client, path, source, json).await;
    }
    let key_path = source.key_path(path);
    let resp = client
        .op(client
            .etcd()
            .get(key_path, Some(GetOptions::new().with_prefix())))
        .await
        .with_context(|| format!("reading {key_path}* from etcd"))?;
    let mut candidates: Vec<Candidate> = resp
        .kvs()
        .iter()
        .filter(|kv| {
            let leased = kv.lease() != 0 || !source.layout().candidates_hold_leases();
            leased
                && matches!(source.layout().classify(kv.key(), kv.lease()),
                    Role::Candidate { election, .. } if election == path)
        })
        .map(|kv| Candidate {
            holder: holder_of(kv.value()),
            token: token_at_rest(source.layout(), kv.create_revision(), kv.mod_revision()),
            lease_id: kv.lease(),
            key: String::from_utf8_lossy(kv.key()).into_owned(),
        })
        .collect();
    lead_order(&mut candidates, |c| c.token);
    let Some((leader, waiting)) = candidates.split_first() else {
        eprintln!("tenure: nobody leads {path} (read as {source})");
        return Ok(EXIT_ERROR);
    };
    if let Some((key, rev)) = blocker(resp.kvs(), source, path).filter(|(_, r)| *r < leader.token) {
        eprintln!(
            "tenure: nobody leads {path}: {key} (a key without a lease, CreateRevision {rev}) \
             blocks it; etcd's Campaign waits until it is deleted"
        );
        return Ok(EXIT_ERROR);
    }
    let layout = source.layout().name();
    if json {
        let led = Led {
            name: path,
            layout,
            leader,
            waiting,
        };
        println!("{}", serde_json::to_string(&led)?);
        return Ok(0);
    }
    println!(
        "{} leads {path} (token {}, lease {:x}, {layout} layout)",
        visible(&leader.holder),
        leader.token,
        leader.lease_id
    );
    for (i, w) in waiting.iter().enumerate() {
        println!(
            "  {}. {} waits (token {})",
            i + 1,
            visible(&w.holder),
            w.token
        );
    }
    Ok(0)
}

/// The key without a lease with the lowest CreateRevision among `path`'s,
/// where the layout's candidates hold leases: etcd's `Campaign` waits for
/// it, so no candidate created after it leads (as the watcher has it,
/// `watch/state/blockers.rs`). Its key and CreateRevision, never its value.
fn blocker(kvs: &[KeyValue], source: &Source, path: &str) -> Option<(String, i64)> {
    kvs.iter()
        .filter(|kv| {
            let role = source.layout().classify(kv.key(), kv.lease());
            source.lease_less(&role, kv.lease()) == Some(path)
        })
        .min_by_key(|kv| kv.create_revision())
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                kv.create_revision(),
            )
        })
}

/// Why no `--source` names `path`, and what to give.
fn no_source(path: &str, sources: &[Source]) -> String {
    let lease = crate::layout::path::lease_name_of_path(path)
        .filter(|_| sources.iter().any(|s| s.reads_leases()));
    match lease {
        Some(now) => format!(
            "{path} names no election of these sources: a Kubernetes Lease is named \
             NAMESPACE/NAME ({now}), not by its etcd path"
        ),
        None => format!(
            "{path} is another system's election: give the --source LAYOUT:PREFIX it is written \
             in (or TENURE_SOURCES), as for tenure serve"
        ),
    }
}
