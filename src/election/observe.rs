//! `observe`: a stream of leader changes of one election, in either layout.

use std::collections::BTreeMap;

use etcd_client::{EventType, KeyValue};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::keywatch::{RangeWatch, Watched};
use super::{pick_leader, Client, ElectionName, Error, Leader};

/// Leader changes of one election. The first item is the leader at the
/// time of the call (`None`: nobody); then one item per change of holder,
/// term or value, in revision order.
pub struct Observer {
    rx: mpsc::Receiver<Option<Leader>>,
    task: JoinHandle<()>,
}

impl Observer {
    pub(crate) async fn start(client: Client, name: ElectionName) -> Result<Self, Error> {
        let (kvs, revision) = client.read_election(&name).await?;
        let (tx, rx) = mpsc::channel(64);
        let task = tokio::spawn(run(client, name, kvs, revision, tx));
        Ok(Self { rx, task })
    }

    /// The next leader change; `None` only if the observer's task ended.
    pub async fn next(&mut self) -> Option<Option<Leader>> {
        self.rx.recv().await
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
    tx: mpsc::Sender<Option<Leader>>,
) {
    let mut keys: BTreeMap<Vec<u8>, KeyValue> =
        kvs.into_iter().map(|kv| (kv.key().to_vec(), kv)).collect();
    let leader_of = |keys: &BTreeMap<Vec<u8>, KeyValue>| {
        let kvs: Vec<KeyValue> = keys.values().cloned().collect();
        pick_leader(client.keys(), &name, &kvs)
    };
    let mut last = leader_of(&keys);
    if tx.send(last.clone()).await.is_err() {
        return;
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
        }
        let now = leader_of(&keys);
        if !same_term(&last, &now) {
            last = now.clone();
            if tx.send(now).await.is_err() {
                return;
            }
        }
    }
}
