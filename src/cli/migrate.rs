//! Which clusters a history records against the feeds serve is given: a
//! history of one unnamed cluster and one of named clusters are not mixed
//! (names, resume revisions and fleet-wide marks differ), but for one case:
//! a shared PostgreSQL history of one cluster becomes the history of one
//! named cluster when exactly one configured cluster is the etcd cluster it
//! recorded (by etcd's cluster id). Anything ambiguous is refused, saying
//! what to do.

use anyhow::Context;

use super::replica::History;
use crate::feed::identity::{etcd_cluster_id, first_key};
use crate::feed::Feed;
use crate::history::Db;

/// A named cluster the history has not seen yet is welcome (a new one);
/// one it records that is not configured stays in it, not watched.
pub(super) async fn same_clusters(store: &History, feeds: &[Feed], db: &Db) -> anyhow::Result<()> {
    let reader = store.reader();
    let recorded = tokio::task::spawn_blocking(move || reader.scopes())
        .await?
        .context("reading which clusters the history records")?;
    let named = feeds.iter().any(|f| f.scope().is_some());
    let names: Vec<&str> = recorded.iter().flatten().map(String::as_str).collect();
    if named && recorded.contains(&None) {
        if let Db::Postgres(url) = db {
            return name_the_unnamed(store, feeds, url, db).await;
        }
        anyhow::bail!(
            "the history at {} records one etcd cluster watched without --cluster: several \
             clusters need a history of their own (give another --db), or serve it without \
             --cluster",
            db.display()
        );
    }
    if !named && !names.is_empty() {
        anyhow::bail!(
            "the history at {} records the clusters {} (serve --cluster/--config): give them \
             again, or another --db for one cluster without --cluster",
            db.display(),
            names.join(", ")
        );
    }
    Ok(())
}

/// A shared history of one unnamed cluster, served with `--cluster`: it
/// becomes the history of the one configured cluster whose etcd cluster id
/// is the one it recorded; refused when none or several are.
async fn name_the_unnamed(
    store: &History,
    feeds: &[Feed],
    url: &str,
    db: &Db,
) -> anyhow::Result<()> {
    let reader = store.reader();
    let recorded = tokio::task::spawn_blocking(move || reader.resume_point())
        .await?
        .context("reading which etcd cluster the history records")?
        .and_then(|r| r.cluster_id);
    let mut matching = Vec::new();
    let mut unknown = Vec::new();
    for f in feeds {
        let Some(name) = f.scope() else { continue };
        match f.watched.client.as_ref() {
            Some(client) => match etcd_cluster_id(client, first_key(&f.watched, client)).await {
                Some(id) if Some(id) == recorded => matching.push(name.clone()),
                Some(_) => {}
                None => unknown.push(name.to_string()),
            },
            None => unknown.push(name.to_string()),
        }
    }
    let id = recorded.map_or_else(|| "unknown".to_owned(), |i| format!("{i:x}"));
    match (matching.as_slice(), recorded) {
        ([name], Some(_)) if unknown.is_empty() => {
            let (url, n) = (url.to_owned(), name.to_string());
            let named =
                tokio::task::spawn_blocking(move || crate::history::name_unnamed_cluster(&url, &n))
                    .await?
                    .context("naming the history's cluster")?;
            if named {
                eprintln!(
                    "tenure: the history at {} recorded one etcd cluster (id {id}) watched \
                     without --cluster: it is now the history of cluster {name}",
                    db.display()
                );
            }
            Ok(())
        }
        _ => anyhow::bail!(
            "the history at {} records one etcd cluster (id {id}) watched without --cluster, \
             and {} of the configured clusters is that one{}: serve it with --cluster naming \
             that etcd once (with every --cluster reachable), then its history goes on as \
             that cluster's; or serve it without --cluster, or give another --db",
            db.display(),
            matching.len(),
            if unknown.is_empty() {
                String::new()
            } else {
                format!(" (unknown for {}: not answering)", unknown.join(", "))
            }
        ),
    }
}
