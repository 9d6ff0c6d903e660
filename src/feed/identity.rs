//! Whether a feed's etcd is the one its history recorded under its name.
//!
//! A history records, per cluster name, the etcd cluster id it watched
//! (`watcher_state`, `cluster_id`). Two replicas given the same names for
//! other etcds (`--cluster a=Y --cluster b=X` after `a=X b=Y`), or an
//! endpoint that now leads to another etcd, would otherwise read that etcd
//! as a restore of the recorded one: record a reset, raise tenure's token
//! floor in it, reset its writer fence. So a feed whose etcd answers with
//! another cluster id is refused before anything of it is written anywhere
//! (token floor, campaign, fence row, history): at start (serve exits,
//! naming both ids), when a cluster that did not answer at start connects,
//! before each writer campaign and claim, and by the watcher on every
//! reconnect (`WatchConfig::adopt`). A deliberately replaced etcd (a new
//! cluster, or a restore under another cluster token) is adopted by the
//! operator, once, with `--adopt-etcd NAME=ID`; its first load is then a
//! reset, as a restore's is.
//!
//! Invariant: nothing here writes; a refusal is the whole feed's (another
//! feed is not held back by it once serve runs).

use std::time::Duration;

use super::{in_cluster, Feed, FeedError, Watched};
use crate::election::Client;
use crate::events::not_the_recorded_etcd;
use crate::history::Reader;

/// How long an etcd may take to say its cluster id.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a feed's etcd may not be recorded as its cluster (yet).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Another etcd than the recorded one answers, not adopted.
    #[error("{0}")]
    NotRecorded(String),
    /// The etcd or the history did not say: asked again.
    #[error("{0}")]
    Unknown(String),
}

/// etcd's cluster id, from the header of a count of `key` (`None`: no
/// answer). A key the serve's role may read: a refused read has no header.
pub async fn etcd_cluster_id(client: &Client, key: Vec<u8>) -> Option<u64> {
    let mut etcd = client.etcd().clone();
    let count = etcd_client::GetOptions::new().with_count_only();
    let answer = tokio::time::timeout(ASK_TIMEOUT, client.op(etcd.get(key, Some(count))))
        .await
        .ok()?
        .ok()?;
    answer
        .header()
        .map(|h| h.cluster_id())
        .filter(|&id| id != 0)
}

/// The first key `w`'s watcher reads in `client`'s etcd (its role may
/// read that much), else tenure's own root.
pub fn first_key(w: &Watched, client: &Client) -> Vec<u8> {
    let prefix = client.keys().prefix();
    super::watched_ranges(prefix, &w.sources, w.sources_only)
        .into_iter()
        .next()
        .map_or_else(
            || client.keys().elections_root().into_bytes(),
            |(start, _)| start,
        )
}

/// The etcd cluster id the history recorded for `w` (`None`: none yet).
async fn recorded(w: &Watched, reader: &Reader) -> Result<Option<u64>, String> {
    let (reader, scope) = (reader.clone(), w.name.clone());
    let resume = super::error::read_history("reading which etcd the history recorded", move || {
        reader.resume_point_of(scope.as_deref())
    })
    .await
    .map_err(|e| e.to_string())?;
    Ok(resume.and_then(|r| r.cluster_id).filter(|&id| id != 0))
}

/// Whether `client`'s etcd may be recorded as `w`'s cluster: the one its
/// history recorded, one the operator adopted, or any while none is. Its
/// cluster id when it may.
pub async fn verify(w: &Watched, client: &Client, reader: &Reader) -> Result<u64, Refused> {
    let recorded = recorded(w, reader).await.map_err(Refused::Unknown)?;
    let Some(found) = etcd_cluster_id(client, first_key(w, client)).await else {
        return Err(Refused::Unknown(format!(
            "{}'s etcd did not say its cluster id within {ASK_TIMEOUT:?}: nothing of it is \
             written until it says it is the etcd its history recorded{}",
            in_cluster(&w.name),
            recorded.map(|r| format!(" ({r:x})")).unwrap_or_default()
        )));
    };
    let Some(recorded) = recorded else {
        return Ok(found);
    };
    if found == recorded || w.adopt == Some(found) {
        return Ok(found);
    }
    Err(Refused::NotRecorded(not_the_recorded_etcd(
        w.name.as_deref(),
        recorded,
        found,
    )))
}

/// At start, every connected feed: serve does not start when one answers
/// as another etcd than its history recorded. One that does not answer
/// now is checked once it does, before anything of it is written (by its
/// pipeline, before its floor and its client are handed on; by its writer
/// before each campaign and claim; by the watcher itself).
pub async fn verify_at_start(feeds: &[Feed], reader: &Reader) -> Result<(), FeedError> {
    for feed in feeds {
        let Some(client) = &feed.watched.client else {
            continue;
        };
        match verify(&feed.watched, client, reader).await {
            Ok(_) => {}
            Err(Refused::Unknown(why)) => {
                eprintln!("tenure: {why}; checked again before anything of it is written");
            }
            Err(e) => {
                return Err(FeedError::NotRecorded {
                    cluster: in_cluster(&feed.watched.name),
                    why: e.to_string(),
                })
            }
        }
    }
    Ok(())
}
