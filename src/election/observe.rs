//! `observe`: a stream of leader changes of one election, in either layout.

use crate::task::Locked;
use std::collections::BTreeMap;

use etcd_client::{EventType, KeyValue};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::keywatch::{RangeWatch, Watched};
use super::{queue_of, Client, ElectionName, Error, Leader};

/// One election as etcd holds it: who leads, and who waits behind (queue
/// layout keys, next first; the single-key layout's waiters hold no key).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Observed {
    pub leader: Option<Leader>,
    pub waiting: Vec<Leader>,
}

/// Changes of one election. The first item is the state at the time of the
/// call; then one item per change of holder, term, value or queue, in
/// revision order. [`Observer::next`] reports leader changes only,
/// [`Observer::next_change`] the queue's too.
pub struct Observer {
    rx: mpsc::Receiver<Observed>,
    task: JoinHandle<()>,
    /// Why the task ended, when etcd refused it the election.
    failed: std::sync::Arc<std::sync::Mutex<Option<Error>>>,
    /// The leader `next` returned last (`None` before the first call).
    reported: Option<Option<Leader>>,
}

impl Observer {
    pub(crate) async fn start(client: Client, name: ElectionName) -> Result<Self, Error> {
        let (kvs, revision) = client.read_election(&name).await?;
        let (tx, rx) = mpsc::channel(64);
        let failed: std::sync::Arc<std::sync::Mutex<Option<Error>>> = Default::default();
        let task = crate::task::spawn("observer", {
            let failed = std::sync::Arc::clone(&failed);
            async move {
                let user = client.connect_config().user().map(str::to_owned);
                if let Some(e) = run(client, name, kvs, revision, tx).await {
                    *failed.locked() = Some(e.with_user(user.as_deref()));
                }
            }
        });
        Ok(Self {
            rx,
            task,
            failed,
            reported: None,
        })
    }

    /// After [`Observer::next`] returned `None`: why, when etcd refused
    /// the watch (permission or authentication).
    pub fn take_error(&mut self) -> Option<Error> {
        self.failed.locked().take()
    }

    /// The next leader change; `None` only if the observer's task ended.
    pub async fn next(&mut self) -> Option<Option<Leader>> {
        loop {
            let o = self.rx.recv().await?;
            if let Some(last) = &self.reported {
                if same_term(last, &o.leader) {
                    continue;
                }
            }
            self.reported = Some(o.leader.clone());
            return Some(o.leader);
        }
    }

    /// The next change of the leader or of the queue behind it; `None` only
    /// if the observer's task ended.
    pub async fn next_change(&mut self) -> Option<Observed> {
        let o = self.rx.recv().await?;
        self.reported = Some(o.leader.clone());
        Some(o)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn same_term(a: &Option<Leader>, b: &Option<Leader>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.token == b.token && a.key == b.key && a.holder == b.holder,
        _ => false,
    }
}

async fn run(
    client: Client,
    name: ElectionName,
    kvs: Vec<KeyValue>,
    revision: i64,
    tx: mpsc::Sender<Observed>,
) -> Option<Error> {
    let mut keys: BTreeMap<Vec<u8>, KeyValue> =
        kvs.into_iter().map(|kv| (kv.key().to_vec(), kv)).collect();
    let leader_of = |keys: &BTreeMap<Vec<u8>, KeyValue>| {
        let kvs: Vec<KeyValue> = keys.values().cloned().collect();
        let mut queue = queue_of(client.keys(), &name, &kvs).into_iter();
        Observed {
            leader: queue.next(),
            waiting: queue.collect(),
        }
    };
    let mut last = leader_of(&keys);
    if tx.send(last.clone()).await.is_err() {
        return None;
    }
    let (start, end) = client.keys().election_range(&name);
    let mut watch = RangeWatch::new(&client.etcd(), start, Some(end.into_bytes()), revision + 1);
    loop {
        match watch.next().await {
            Watched::Events(events) => {
                for e in events {
                    let Some(kv) = e.kv() else { continue };
                    match e.event_type() {
                        EventType::Put => {
                            keys.insert(kv.key().to_vec(), kv.clone());
                        }
                        EventType::Delete => {
                            keys.remove(kv.key());
                        }
                    }
                }
            }
            Watched::Compacted => match client.read_election(&name).await {
                Ok((kvs, revision)) => {
                    keys = kvs.into_iter().map(|kv| (kv.key().to_vec(), kv)).collect();
                    watch.resume_after(revision);
                }
                Err(e) => {
                    tracing::warn!(error = %e, election = %name, "observe: re-read after compaction failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    continue;
                }
            },
            Watched::Denied(e) => return Some(e),
        }
        let now = leader_of(&keys);
        let queue = |o: &Observed| -> Vec<(i64, String)> {
            o.waiting
                .iter()
                .map(|w| (w.token, w.holder.clone()))
                .collect()
        };
        if !same_term(&last.leader, &now.leader) || queue(&last) != queue(&now) {
            last = now.clone();
            if tx.send(now).await.is_err() {
                return None;
            }
        }
    }
}
