//! Loading the state: at the resume revision, from a fresh snapshot after
//! a gap, or as a reset when etcd is another timeline.

use std::time::Duration;

use etcd_client::{GetOptions, KeyValue};
use tokio::sync::mpsc;

use super::contradiction::contradiction;
use super::{report_waiting, send, Closed, Kv, OpenTerm, Resume, State, Watcher};
use super::{MAX_MESSAGE_BYTES, SNAPSHOT_PAGE_KEYS};
use crate::election::Error;
use crate::events::{now_ms, Batch, EndCause, Event, EventKind, Update, WatchStatus};

impl Watcher {
    /// Records a reset from `applied` of `cluster` and reloads from a fresh
    /// snapshot of the new timeline.
    pub(super) async fn reset(
        &self,
        state: &mut State,
        applied: i64,
        cluster: u64,
        live_at_ms: Option<i64>,
        tx: &mpsc::Sender<Update>,
    ) -> Result<(i64, u64), Closed> {
        tracing::warn!(
            applied,
            "etcd's revision went behind the applied one or its cluster changed: \
             recording a reset and reloading"
        );
        let open = open_terms(state);
        self.load(
            state,
            Some(Resume {
                revision: applied,
                open_terms: open,
                cluster_id: Some(cluster),
                live_at_ms,
            }),
            tx,
            true,
        )
        .await
    }

    /// Loads the state: at the resume revision when etcd still has it (no
    /// events), else from a fresh snapshot with a gap event first. When etcd
    /// is another timeline than the resume point's (another cluster id, or
    /// its revision behind the stored one: a restore, a new cluster), or
    /// `reset` says so, records a reset instead: terms open in the old
    /// timeline end (`unknown`), the snapshot's terms start. Retries until
    /// etcd answers. Returns the revision the state is at and etcd's
    /// cluster id.
    pub(super) async fn load(
        &self,
        state: &mut State,
        resume: Option<Resume>,
        tx: &mpsc::Sender<Update>,
        mut reset: bool,
    ) -> Result<(i64, u64), Closed> {
        let mut backoff = Duration::from_millis(100);
        let mut at_resume = resume.is_some() && !reset;
        loop {
            let read = match (&resume, at_resume) {
                (Some(r), true) => self.snapshot(Some(r.revision)).await,
                _ => self.snapshot(None).await,
            };
            match read {
                Ok((kvs, revision, cluster)) => {
                    self.check_progress_order().await;
                    if let Some(r) = &resume {
                        let other_cluster = r.cluster_id.is_some_and(|c| c != cluster);
                        let sources = &self.sources;
                        let contradicted =
                            || contradiction(sources, r, &kvs, revision, self.cfg.max_elections);
                        let why = if other_cluster || (!at_resume && revision < r.revision) {
                            Some(String::new())
                        } else if reset {
                            None
                        } else {
                            contradicted()
                        };
                        if let Some(why) = why {
                            if !why.is_empty() {
                                tracing::warn!(
                                    stored = r.revision,
                                    revision,
                                    %why,
                                    "etcd's state contradicts the history: etcd started over \
                                     under the same cluster id (a restore from a snapshot)"
                                );
                            }
                            reset = true;
                            if at_resume {
                                // Read again, at the new timeline's present.
                                at_resume = false;
                                continue;
                            }
                        }
                    }
                    let at_ms = now_ms();
                    let mut batch = Vec::new();
                    let statuses = match (&resume, reset) {
                        (Some(r), true) => {
                            tracing::warn!(
                                stored = r.revision,
                                revision,
                                previous_cluster = ?r.cluster_id,
                                cluster,
                                "etcd is another timeline (restored or replaced): recording a reset"
                            );
                            batch.extend(r.open_terms.iter().map(|t| Event {
                                revision: r.revision,
                                at_ms,
                                election: t.election.clone(),
                                kind: EventKind::TermEnded {
                                    token: t.token,
                                    holder: t.holder.clone(),
                                    lease_id: t.lease_id,
                                    cause: EndCause::Unknown,
                                    started_revision: t.started_revision,
                                    started_at_ms: t.started_at_ms,
                                },
                            }));
                            batch.push(Event {
                                revision,
                                at_ms,
                                election: String::new(),
                                kind: EventKind::Reset {
                                    from_revision: r.revision,
                                    to_revision: revision,
                                    previous_cluster_id: r.cluster_id,
                                    cluster_id: cluster,
                                },
                            });
                            let (events, statuses) = state.load(revision, &kvs, &[], at_ms);
                            batch.extend(events);
                            statuses
                        }
                        _ => {
                            let open = resume
                                .as_ref()
                                .map(|r| r.open_terms.as_slice())
                                .unwrap_or(&[]);
                            let (mut events, statuses) = state.load(revision, &kvs, open, at_ms);
                            if at_resume {
                                // Collisions present at the stored revision
                                // were recorded when they arose.
                                events
                                    .retain(|e| !matches!(e.kind, EventKind::NameCollision { .. }));
                            }
                            if let (Some(r), false) = (&resume, at_resume) {
                                batch.push(Event {
                                    revision,
                                    at_ms,
                                    election: String::new(),
                                    kind: EventKind::Gap {
                                        from_revision: r.revision + 1,
                                        to_revision: revision,
                                    },
                                });
                            }
                            batch.extend(events);
                            statuses
                        }
                    };
                    self.report(statuses, tx).await?;
                    self.track_all_leases(state);
                    send(tx, Update::Watch(WatchStatus::EtcdUp(true))).await?;
                    send(
                        tx,
                        Update::Batch(Batch {
                            revision,
                            events: batch,
                        }),
                    )
                    .await?;
                    report_waiting(state, tx).await?;
                    send(
                        tx,
                        Update::Cluster {
                            cluster_id: cluster,
                        },
                    )
                    .await?;
                    return Ok((revision, cluster));
                }
                Err(e) if at_resume && is_gone_revision(&e) => {
                    tracing::warn!(error = %e, "the resume revision is no longer in etcd; resyncing");
                    at_resume = false;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the snapshot from etcd; retrying");
                    send(tx, Update::Watch(WatchStatus::EtcdUp(false))).await?;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Every key of every source's ranges, at `revision` (or at the first
    /// page's), with etcd's cluster id.
    async fn snapshot(&self, revision: Option<i64>) -> Result<(Vec<Kv>, i64, u64), Error> {
        let mut kv = self
            .client
            .etcd()
            .kv_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let mut kvs = Vec::new();
        let mut at = revision;
        let mut cluster = 0;
        for (start, end) in self.sources.ranges() {
            let mut from = start;
            // Pages of one revision: the first page's (or the asked one).
            loop {
                let mut opts = GetOptions::new()
                    .with_range(end.clone())
                    .with_limit(SNAPSHOT_PAGE_KEYS);
                if let Some(r) = at {
                    opts = opts.with_revision(r);
                }
                let resp = self.client.op(kv.get(from.clone(), Some(opts))).await?;
                if let Some(h) = resp.header() {
                    cluster = h.cluster_id();
                    at = at.or(Some(h.revision()));
                }
                kvs.extend(resp.kvs().iter().map(kv_of));
                match resp.kvs().last() {
                    Some(last) if resp.more() => {
                        from = last.key().to_vec();
                        from.push(0);
                    }
                    _ => break,
                }
            }
        }
        Ok((kvs, at.unwrap_or_default(), cluster))
    }
}

pub(super) fn open_terms(state: &State) -> Vec<OpenTerm> {
    state
        .leaders()
        .map(|(name, t)| OpenTerm {
            election: name.to_owned(),
            token: t.token,
            holder: t.holder.clone(),
            lease_id: t.lease_id,
            layout: t.layout,
            started_revision: t.started_revision,
            started_at_ms: t.started_at_ms,
        })
        .collect()
}

fn is_gone_revision(e: &Error) -> bool {
    let s = e.to_string();
    s.contains("required revision has been compacted")
        || s.contains("required revision is a future revision")
}

pub(super) fn kv_of(kv: &KeyValue) -> Kv {
    Kv {
        key: kv.key().to_vec(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        lease: kv.lease(),
    }
}
