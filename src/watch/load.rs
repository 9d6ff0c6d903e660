//! Loading the state: at the resume revision, from a fresh snapshot after
//! a gap, or as a reset when etcd is another timeline.

use std::collections::HashSet;
use std::time::Duration;

use etcd_client::{GetOptions, KeyValue};
use tokio::sync::mpsc;

use super::contradiction::{contradiction, witness_missing};
use super::state::Seen;
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
                witnesses: Vec::new(),
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
        reset: bool,
    ) -> Result<(i64, u64), Closed> {
        let mut loading = Loading::new(resume.as_ref(), false, reset);
        loop {
            match self.snapshot(loading.asked()).await {
                Ok((kvs, revision, cluster)) => {
                    if let Some(recorded) = self.refused(resume.as_ref(), cluster) {
                        refuse(recorded, cluster, tx).await?;
                        // Whatever made this load a reset was read from the
                        // refused etcd: the recorded one, back, is checked
                        // afresh from the resume point.
                        loading.afresh();
                        loading.pause().await;
                        continue;
                    }
                    self.check_progress_order().await;
                    let another = match loading.to_check() {
                        Some(r) => {
                            self.another_timeline(r, loading.at_resume(), &kvs, revision, cluster)
                                .await
                        }
                        None => false,
                    };
                    if let (Some(seen), false) = (loading.seen_before(), another) {
                        loading.kept(self.kept_leases(seen, &kvs).await);
                    }
                    let Some((batch, statuses)) =
                        loading.loaded(state, &kvs, revision, cluster, another)
                    else {
                        continue;
                    };
                    self.publish(state, statuses, batch, revision, cluster, tx)
                        .await?;
                    return Ok((revision, cluster));
                }
                Err(e) if loading.at_resume() && is_gone_revision(&e) => {
                    tracing::warn!(error = %e, "the resume revision is no longer in etcd; resyncing");
                    loading.gone();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the snapshot from etcd; retrying");
                    send(tx, Update::Watch(WatchStatus::EtcdUp(false))).await?;
                    loading.pause().await;
                }
            }
        }
    }

    /// The cluster id recorded in `resume` when etcd answers as `cluster`,
    /// another one the operator did not adopt (`WatchConfig::adopt`), or
    /// none (0: its answer had no header): such an etcd is refused, not
    /// taken for a new timeline. `None`: the same etcd, an adopted one, or
    /// nothing to compare (no resume point, no id recorded).
    fn refused(&self, resume: Option<&Resume>, cluster: u64) -> Option<u64> {
        let recorded = resume?.cluster_id.filter(|&c| c != 0)?;
        (cluster != recorded && self.cfg.adopt != Some(cluster)).then_some(recorded)
    }

    /// Whether the snapshot (`kvs` at `revision` of `cluster`) is another
    /// timeline than the resume point's: another cluster id, a revision
    /// behind the stored one (read at the present), a state the stored
    /// one cannot have become, or a term history recorded that etcd's
    /// revision did not create (both: a restore under the same cluster id).
    async fn another_timeline(
        &self,
        r: &Resume,
        at_resume: bool,
        kvs: &[Kv],
        revision: i64,
        cluster: u64,
    ) -> bool {
        if r.cluster_id.is_some_and(|c| c != cluster) {
            return true;
        }
        let why = match contradicted(
            &self.sources,
            r,
            at_resume,
            kvs,
            revision,
            self.cfg.max_elections,
        ) {
            Some(why) => why,
            None => match self.witness_contradiction(r).await {
                Some(why) => why,
                None => return false,
            },
        };
        tracing::warn!(
            stored = r.revision,
            revision,
            %why,
            "etcd's state contradicts the history: etcd started over \
             under the same cluster id (a restore from a snapshot)"
        );
        true
    }

    /// Why etcd contradicts the newest term history recorded at or below
    /// the stored revision ([`Resume::witnesses`]) whose election is still
    /// read: asked at that term's token for the keys written there. The
    /// newest one decides (a timeline diverges at one revision: older
    /// terms agree if it does). `None` when it agrees, when its revision is
    /// compacted (not known), or when etcd does not answer.
    async fn witness_contradiction(&self, r: &Resume) -> Option<String> {
        let w = r
            .witnesses
            .iter()
            .find(|w| self.sources.watches_name(&w.election))?;
        // Not keys-only: etcd 3.7 answers those without each key's lease.
        let mut kv = self.client.etcd().kv_client();
        let mut created = Vec::new();
        for (start, end) in self.sources.ranges() {
            // Read at the token, every key written there: a key created
            // there was, and a key whose value defines its terms was
            // rewritten there by its term's first write.
            let opts = GetOptions::new()
                .with_range(end)
                .with_revision(w.token)
                .with_min_mod_revision(w.token)
                .with_max_mod_revision(w.token);
            match self.client.op(kv.get(start, Some(opts))).await {
                Ok(resp) => created.extend(resp.kvs().iter().map(kv_of)),
                Err(e) => {
                    tracing::debug!(error = %e, token = w.token, "a witness could not be read");
                    return None;
                }
            }
        }
        witness_missing(&self.sources, w, &created)
    }

    /// Hands the loaded state on: its statuses, the leases to track, the
    /// batch of events, the waiting counts and the cluster id.
    async fn publish(
        &self,
        state: &mut State,
        statuses: Vec<WatchStatus>,
        events: Vec<Event>,
        revision: i64,
        cluster: u64,
        tx: &mpsc::Sender<Update>,
    ) -> Result<(), Closed> {
        self.report(statuses, tx).await?;
        send(tx, Update::Watch(WatchStatus::EtcdUp(true))).await?;
        send(tx, Update::Batch(Batch { revision, events })).await?;
        // After the batch: the sinks take it meanwhile.
        self.track_all_leases(state);
        report_waiting(state, tx).await?;
        send(
            tx,
            Update::Cluster {
                cluster_id: cluster,
            },
        )
        .await
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

/// Says that another etcd than the recorded one answers (`found`, not
/// `recorded`): refused, nothing loaded or recorded meanwhile.
async fn refuse(recorded: u64, found: u64, tx: &mpsc::Sender<Update>) -> Result<(), Closed> {
    tracing::error!(
        recorded = format_args!("{recorded:x}"),
        found = format_args!("{found:x}"),
        "another etcd cluster than the recorded one answers: refused, nothing is loaded or \
         recorded until the recorded one answers again (serve --adopt-etcd adopts it)"
    );
    send(
        tx,
        Update::Watch(WatchStatus::NotTheRecordedEtcd { recorded, found }),
    )
    .await
}

/// Where a load stands between its reads, whatever it reads (etcd's
/// snapshot here, the Kubernetes API's list in `kube`): at the resume
/// revision or at the present, a reset or not, and the pause before the
/// next try. The rules of what a load records are here, once.
pub(super) struct Loading<'r> {
    resume: Option<&'r Resume>,
    at_resume: bool,
    reset: bool,
    backoff: Duration,
    /// Keys written past the resume revision that kept their leases
    /// ([`Watcher::kept_leases`]).
    kept: HashSet<Vec<u8>>,
}

impl<'r> Loading<'r> {
    /// A load from `resume`: at its revision, unless `from_present` (it is
    /// known gone) or `reset` (another timeline: its present is read).
    pub(super) fn new(resume: Option<&'r Resume>, from_present: bool, reset: bool) -> Self {
        Self {
            resume,
            // Once `reset` holds, `at_resume` never does.
            at_resume: resume.is_some() && !from_present && !reset,
            reset,
            backoff: Duration::from_millis(100),
            kept: HashSet::new(),
        }
    }

    /// The revision history saw last, where the read is past it on the
    /// same timeline (as far as known): what came between is not seen.
    pub(super) fn seen_before(&self) -> Option<i64> {
        self.resume
            .filter(|_| !self.at_resume && !self.reset)
            .map(|r| r.revision)
    }

    /// The keys written past the resume revision that etcd's log shows
    /// kept their leases.
    pub(super) fn kept(&mut self, kept: HashSet<Vec<u8>>) {
        self.kept = kept;
    }

    /// The revision to read at (`None`: the present).
    pub(super) fn asked(&self) -> Option<i64> {
        self.resume.filter(|_| self.at_resume).map(|r| r.revision)
    }

    /// Whether the next read is at the resume revision.
    pub(super) fn at_resume(&self) -> bool {
        self.at_resume
    }

    /// The resume point a read is checked against (is it another
    /// timeline?): `None` once the load is a reset, or without one.
    pub(super) fn to_check(&self) -> Option<&'r Resume> {
        self.resume.filter(|_| !self.reset)
    }

    /// Starts over from the resume point, as a load that is no reset,
    /// keeping the pause: what was read so far came from a refused etcd.
    pub(super) fn afresh(&mut self) {
        self.at_resume = self.resume.is_some();
        self.reset = false;
        self.kept.clear();
    }

    /// The resume revision is gone: the present is read next.
    pub(super) fn gone(&mut self) {
        self.at_resume = false;
    }

    /// A read of `kvs` at `revision` (of `cluster`; 0: not known),
    /// `another` when it showed another timeline than the resume point's:
    /// the events and statuses it loads, or `None` when the present must be
    /// read instead (another timeline, seen at the resume revision).
    pub(super) fn loaded(
        &mut self,
        state: &mut State,
        kvs: &[Kv],
        revision: i64,
        cluster: u64,
        another: bool,
    ) -> Option<(Vec<Event>, Vec<WatchStatus>)> {
        if another && !self.reset {
            self.reset = true;
            if self.at_resume {
                self.at_resume = false;
                return None;
            }
        }
        let at_ms = now_ms();
        Some(match (self.resume, self.reset) {
            (Some(r), true) => reset_batch(state, r, kvs, revision, cluster, at_ms),
            _ => {
                let kept = std::mem::take(&mut self.kept);
                resumed_batch(
                    state,
                    self.resume,
                    self.at_resume,
                    kvs,
                    revision,
                    kept,
                    at_ms,
                )
            }
        })
    }

    /// After a failed read: the pause before the next, doubling up to 5 s.
    pub(super) async fn pause(&mut self) {
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(Duration::from_secs(5));
    }
}

/// Why `kvs` at `revision` is another timeline than `r`'s, by what the
/// read shows: its revision behind the stored one (read at the present),
/// or a state the stored one cannot have become. `None`: nothing shows it.
pub(super) fn contradicted(
    sources: &crate::layout::Sources,
    r: &Resume,
    at_resume: bool,
    kvs: &[Kv],
    revision: i64,
    max_elections: usize,
) -> Option<String> {
    if !at_resume && revision < r.revision {
        return Some(format!(
            "its revision {revision} is behind the stored {}",
            r.revision
        ));
    }
    contradiction(sources, r, kvs, revision, max_elections)
}

/// A reset from the resume point `r` to the snapshot: every term open in
/// the old timeline ends (`unknown`, at the stored revision), a `Reset`
/// event, then the snapshot's terms start.
pub(super) fn reset_batch(
    state: &mut State,
    r: &Resume,
    kvs: &[Kv],
    revision: i64,
    cluster: u64,
    at_ms: i64,
) -> (Vec<Event>, Vec<WatchStatus>) {
    tracing::warn!(
        stored = r.revision,
        revision,
        previous_cluster = ?r.cluster_id,
        cluster,
        "etcd is another timeline (restored or replaced): recording a reset"
    );
    let mut batch: Vec<Event> = r
        .open_terms
        .iter()
        .map(|t| Event {
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
                renewals: None,
            },
        })
        .collect();
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
    let (events, statuses) = state.load(revision, kvs, &[], at_ms);
    batch.extend(events);
    (batch, statuses)
}

/// The same timeline: at the resume revision (no events but what the
/// stored terms and the snapshot disagree on), from a fresh snapshot after
/// a gap (a `Gap` event first), or a first start.
pub(super) fn resumed_batch(
    state: &mut State,
    resume: Option<&Resume>,
    at_resume: bool,
    kvs: &[Kv],
    revision: i64,
    kept: HashSet<Vec<u8>>,
    at_ms: i64,
) -> (Vec<Event>, Vec<WatchStatus>) {
    let open = resume.map(|r| r.open_terms.as_slice()).unwrap_or(&[]);
    // Read past the stored revision: what came between is not known, but
    // for the keys etcd's log shows kept their leases (`kept`).
    let seen = resume.filter(|_| !at_resume).map(|r| Seen {
        to: r.revision,
        kept,
    });
    let (mut events, statuses) = state.load_after(revision, kvs, open, seen.as_ref(), at_ms);
    if at_resume {
        // Collisions present at the stored revision were recorded when
        // they arose.
        events.retain(|e| !matches!(e.kind, EventKind::NameCollision { .. }));
    }
    let mut batch = Vec::new();
    if let (Some(r), false) = (resume, at_resume) {
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
    (batch, statuses)
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
