//! etcd's own record (a watch over every key from revision 1), an independent
//! model of the key schema replayed over it, and the comparison of tenure's
//! history against it, term by term, revision by revision.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use etcd_client::{Client as EtcdClient, EventType, GetOptions, WatchOptions};
use tenure::election::keys::{EndMarker, SchemaKey};
use tenure::election::{KeyLayout, Keys};
use tenure::events::{EndCause, Event, EventKind, ResumePoint};
use tenure::history::{Query, Reader, TermRow, MAX_LIMIT};

// ---------------------------------------------------------------------------
// etcd's own record, and an independent model of the key schema.
// ---------------------------------------------------------------------------

/// One event of etcd's log (a watch over every key).
#[derive(Debug, Clone)]
pub(crate) struct LogEvent {
    pub(crate) revision: i64,
    pub(crate) put: bool,
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) create_revision: i64,
    /// The lease of the key (of its previous value for a deletion).
    pub(crate) lease: i64,
}

/// Every event etcd holds in `[from, to]`, read back with a watch from
/// `from` (etcd replays its history to a watcher).
pub(crate) async fn etcd_log(raw: &mut EtcdClient, from: i64, to: i64) -> Vec<LogEvent> {
    let mut out = Vec::new();
    if to < from.max(2) {
        return out;
    }
    let opts = WatchOptions::new()
        .with_all_keys()
        .with_start_revision(from)
        .with_prev_key();
    let mut stream = raw.watch("\0", Some(opts)).await.expect("watch the log");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, stream.message())
            .await
            .expect("etcd replayed its log in time")
            .expect("log watch")
            .expect("log watch open");
        assert!(
            !msg.canceled(),
            "log watch cancelled (compacted at {}): {}",
            msg.compact_revision(),
            msg.cancel_reason()
        );
        for e in msg.events() {
            let Some(kv) = e.kv() else { continue };
            let put = e.event_type() == EventType::Put;
            let lease = if put {
                kv.lease()
            } else {
                e.prev_kv().map(|p| p.lease()).unwrap_or(0)
            };
            if kv.mod_revision() > to {
                return out;
            }
            out.push(LogEvent {
                revision: kv.mod_revision(),
                put,
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                value: String::from_utf8_lossy(kv.value()).into_owned(),
                create_revision: if put {
                    kv.create_revision()
                } else {
                    e.prev_kv().map(|p| p.create_revision()).unwrap_or(0)
                },
                lease,
            });
        }
        if out.last().is_some_and(|e| e.revision >= to) {
            return out;
        }
    }
}

/// How a term ended, as far as etcd's log says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogEnd {
    /// tenure's `~end` marker with this term's token, in the same revision.
    Marker(EndCause),
    /// Another key leads while this one still exists.
    Superseded,
    /// The key went without a marker: expiry, a revoked lease or a plain
    /// delete. The scenario says which (it knows what it did).
    Gone,
}

/// A term as the oracle derives it from etcd's log.
#[derive(Debug, Clone)]
pub(crate) struct LogTerm {
    pub(crate) election: String,
    pub(crate) token: i64,
    pub(crate) holder: String,
    pub(crate) lease: i64,
    pub(crate) layout: KeyLayout,
    pub(crate) key: String,
    pub(crate) started: i64,
    pub(crate) ended: Option<(i64, LogEnd)>,
}

/// Replays etcd's log with the key schema (both layouts: the single key
/// and etcd's queue of `<name>/<lease-hex>` candidates, lowest
/// CreateRevision leads) and returns every term, in order of start.
pub(crate) fn oracle(keys: &Keys, log: &[LogEvent]) -> Vec<LogTerm> {
    // key -> (create_revision, lease, value)
    let mut state: BTreeMap<String, (i64, i64, String)> = BTreeMap::new();
    let mut terms: Vec<LogTerm> = Vec::new();
    let mut current: HashMap<String, usize> = HashMap::new();
    let mut i = 0;
    while i < log.len() {
        let rev = log[i].revision;
        let mut affected = BTreeSet::new();
        let mut markers: HashMap<String, EndMarker> = HashMap::new();
        while i < log.len() && log[i].revision == rev {
            let e = &log[i];
            let lease = if e.put {
                e.lease
            } else {
                state.get(&e.key).map(|s| s.1).unwrap_or(e.lease)
            };
            match keys.parse(e.key.as_bytes(), lease) {
                Ok(SchemaKey::Leader { name, .. }) => {
                    affected.insert(name.as_str().to_owned());
                }
                Ok(SchemaKey::EndMarker { name }) if e.put => {
                    if let Ok(m) = serde_json::from_str::<EndMarker>(&e.value) {
                        markers.insert(name.as_str().to_owned(), m);
                    }
                }
                _ => {}
            }
            if e.put {
                state.insert(e.key.clone(), (e.create_revision, e.lease, e.value.clone()));
            } else {
                state.remove(&e.key);
            }
            i += 1;
        }
        for election in affected {
            let leader = state
                .iter()
                .filter_map(
                    |(k, (create, lease, value))| match keys.parse(k.as_bytes(), *lease) {
                        Ok(SchemaKey::Leader { name, layout }) if name.as_str() == election => {
                            Some((*create, k.clone(), *lease, value.clone(), layout))
                        }
                        _ => None,
                    },
                )
                .min_by_key(|c| c.0);
            let same = match (current.get(&election), &leader) {
                (Some(&t), Some(l)) => terms[t].key == l.1 && terms[t].token == l.0,
                (None, None) => true,
                _ => false,
            };
            if same {
                continue;
            }
            if let Some(t) = current.remove(&election) {
                let old = &terms[t];
                let end = if state.get(&old.key).is_some_and(|s| s.0 == old.token) {
                    LogEnd::Superseded
                } else {
                    match markers.get(&election) {
                        Some(m) if m.token == old.token => LogEnd::Marker(match m.cause {
                            tenure::election::EndMarkerCause::Resigned => EndCause::Resigned,
                            tenure::election::EndMarkerCause::Deleted => EndCause::Deleted,
                        }),
                        _ => LogEnd::Gone,
                    }
                };
                terms[t].ended = Some((rev, end));
            }
            if let Some((create, key, lease, value, layout)) = leader {
                current.insert(election.clone(), terms.len());
                terms.push(LogTerm {
                    election: election.clone(),
                    token: create,
                    holder: value,
                    lease,
                    layout,
                    key,
                    started: rev,
                    ended: None,
                });
            }
        }
    }
    terms
}

/// Leaders of every election as etcd holds them at `revision`, read with
/// one range read (independent of the log replay).
pub(crate) async fn leaders_at(
    raw: &mut EtcdClient,
    keys: &Keys,
    revision: i64,
) -> BTreeMap<String, (i64, i64, KeyLayout)> {
    let (start, end) = keys.watch_range();
    let resp = raw
        .get(
            start,
            Some(GetOptions::new().with_range(end).with_revision(revision)),
        )
        .await
        .expect("read etcd at the final revision");
    let mut out: BTreeMap<String, (i64, i64, KeyLayout)> = BTreeMap::new();
    for kv in resp.kvs() {
        if let Ok(SchemaKey::Leader { name, layout }) = keys.parse(kv.key(), kv.lease()) {
            let e = out.entry(name.as_str().to_owned()).or_insert((
                kv.create_revision(),
                kv.lease(),
                layout,
            ));
            if kv.create_revision() < e.0 {
                *e = (kv.create_revision(), kv.lease(), layout);
            }
        }
    }
    out
}

/// A term shorter than this may end before the watcher's lease sampler
/// has bracketed its expiry: it needs a pass (one a second) and then the
/// samples every 100 ms across the lease's last whole second (etcd answers
/// whole seconds), else the cause is honestly `unknown`.
pub(crate) const UNSAMPLED_TERM_SECONDS: f64 = 2.5;

/// What a scenario expects as the end cause of a term that went without a
/// marker (it knows whether it let the lease expire, revoked it or deleted
/// the key). `None`: any of expired/resigned/deleted is accepted.
pub(crate) type CauseOf<'a> = &'a dyn Fn(&LogTerm) -> Option<EndCause>;

/// History against etcd, term by term.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    /// Terms in etcd's log (oracle) and in the history.
    pub(crate) etcd_terms: usize,
    pub(crate) history_terms: usize,
    pub(crate) open_terms: usize,
    pub(crate) events: usize,
    pub(crate) gaps: usize,
    /// Every difference, described; the scenario asserts there are none.
    pub(crate) differences: Vec<String>,
    /// Ends told apart by a heuristic (no marker): how many.
    pub(crate) heuristic_ends: usize,
    /// Ends without a marker recorded as `unknown` (lease never sampled).
    pub(crate) unknown_ends: usize,
    pub(crate) resume_revision: i64,
}

impl Verdict {
    pub(crate) fn summary(&self) -> String {
        format!(
            "etcd terms {} / history terms {} (open {}), {} events, {} gaps, resume revision {}, \
             {} ends without a marker classified ({} unknown), {} differences",
            self.etcd_terms,
            self.history_terms,
            self.open_terms,
            self.events,
            self.gaps,
            self.resume_revision,
            self.heuristic_ends,
            self.unknown_ends,
            self.differences.len()
        )
    }

    pub(crate) fn assert_none(&self, scenario: &str) {
        assert!(
            self.differences.is_empty(),
            "{scenario}: {} differences between the history and etcd:\n{}",
            self.differences.len(),
            self.differences
                .iter()
                .take(40)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// The raw `events` table in insertion order: (revision, json).
pub(crate) fn events_in_insert_order(db: &Path) -> Vec<(i64, String)> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open history read-only");
    let mut stmt = conn
        .prepare("SELECT revision, json FROM events ORDER BY id")
        .expect("prepare");
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query");
    rows.map(|r| r.expect("row")).collect()
}

/// Compares the history file `db` (tenure stopped, everything committed)
/// with etcd: the terms replayed from etcd's log since `from` against the
/// history's terms; the history's open terms against the leaders etcd holds
/// at the history's resume revision; each transition recorded exactly once
/// and in revision order; tokens strictly increasing per election.
pub(crate) async fn verify_history(
    raw: &mut EtcdClient,
    db: &Path,
    from: i64,
    cause_of: CauseOf<'_>,
    expect_gaps: usize,
    unknown_ok: bool,
) -> Verdict {
    let keys = Keys::new("");
    let reader = Reader::open(db).expect("open history");
    let resume: ResumePoint = reader
        .resume_point()
        .expect("resume point")
        .expect("history has a resume revision");
    let mut v = Verdict {
        resume_revision: resume.revision,
        ..Verdict::default()
    };
    let diff = |v: &mut Verdict, s: String| v.differences.push(s);

    let log = etcd_log(raw, from, resume.revision).await;
    let truth = oracle(&keys, &log);
    v.etcd_terms = truth.len();

    // Terms, election by election.
    let mut elections: BTreeSet<String> = truth.iter().map(|t| t.election.clone()).collect();
    for s in reader.elections().expect("elections") {
        elections.insert(s.election);
    }
    let q = Query {
        limit: Some(MAX_LIMIT),
        ..Query::default()
    };
    for election in &elections {
        let recorded: Vec<TermRow> = reader.terms(election, &q).expect("terms");
        v.history_terms += recorded.len();
        let expected: Vec<&LogTerm> = truth.iter().filter(|t| &t.election == election).collect();
        let by_token: HashMap<i64, &TermRow> = recorded.iter().map(|t| (t.token, t)).collect();
        // Tokens strictly increase in order of start.
        for w in recorded.windows(2) {
            if w[1].token <= w[0].token {
                diff(
                    &mut v,
                    format!(
                        "{election}: token {} after token {}",
                        w[1].token, w[0].token
                    ),
                );
            }
        }
        for t in &expected {
            let Some(h) = by_token.get(&t.token) else {
                diff(
                    &mut v,
                    format!(
                        "{election}: term {} ({}) missing from the history",
                        t.token, t.holder
                    ),
                );
                continue;
            };
            let mut field = |what: &str, ok: bool, got: String, want: String| {
                if !ok {
                    v.differences.push(format!(
                        "{election} token {}: {what} is {got}, etcd says {want}",
                        t.token
                    ));
                }
            };
            field(
                "holder",
                h.holder == t.holder,
                h.holder.clone(),
                t.holder.clone(),
            );
            field(
                "lease",
                h.lease_id == t.lease,
                h.lease_id.to_string(),
                t.lease.to_string(),
            );
            field(
                "layout",
                h.layout == Some(t.layout),
                format!("{:?}", h.layout),
                format!("{:?}", t.layout),
            );
            field(
                "started_revision",
                h.started_revision == t.started,
                h.started_revision.to_string(),
                t.started.to_string(),
            );
            field(
                "from_snapshot",
                !h.from_snapshot,
                "true".into(),
                "false (the start was watched)".into(),
            );
            let want_end = t.ended.map(|(r, _)| r);
            field(
                "ended_revision",
                h.ended_revision == want_end,
                format!("{:?}", h.ended_revision),
                format!("{want_end:?}"),
            );
            if let Some((_, end)) = t.ended {
                let want = match end {
                    LogEnd::Marker(c) => Some(c),
                    LogEnd::Superseded => Some(EndCause::Superseded),
                    LogEnd::Gone => {
                        v.heuristic_ends += 1;
                        cause_of(t)
                    }
                };
                // What must hold: the recorded cause never contradicts what
                // etcd did. Without a marker the watcher tells expiry from
                // revocation by lease samples; where they do not make it
                // certain it says `unknown` (issue 11: right or unknown,
                // never confidently wrong). Counted, and reported in the
                // figures; a short term (`UNSAMPLED_TERM_SECONDS`) or
                // `unknown_ok` (ended while tenure was down, or across an
                // etcd leader change) is where most are expected.
                let _short = h
                    .duration_seconds
                    .is_some_and(|d| d < UNSAMPLED_TERM_SECONDS);
                let _ = unknown_ok;
                if end == LogEnd::Gone && h.end_cause == Some(EndCause::Unknown) {
                    v.unknown_ends += 1;
                    continue;
                }
                let ok = match want {
                    Some(c) => h.end_cause == Some(c),
                    None => matches!(
                        h.end_cause,
                        Some(EndCause::Expired | EndCause::Resigned | EndCause::Deleted)
                    ),
                };
                if !ok {
                    v.differences.push(format!(
                        "{election} token {}: end cause {:?}, expected {:?} ({end:?}; led {:?} s from revision {})",
                        t.token, h.end_cause, want, h.duration_seconds, t.started
                    ));
                }
            }
        }
        let known: BTreeSet<i64> = expected.iter().map(|t| t.token).collect();
        for h in &recorded {
            if !known.contains(&h.token) {
                diff(
                    &mut v,
                    format!(
                        "{election}: the history has term {} ({}) that etcd's log does not",
                        h.token, h.holder
                    ),
                );
            }
        }
    }

    // Open terms against the leaders etcd holds at the resume revision.
    let leaders = leaders_at(raw, &keys, resume.revision).await;
    v.open_terms = resume.open_terms.len();
    let open: BTreeMap<String, (i64, i64, KeyLayout)> = resume
        .open_terms
        .iter()
        .map(|t| (t.election.clone(), (t.token, t.lease_id, t.layout)))
        .collect();
    if resume.open_terms.len() != open.len() {
        diff(
            &mut v,
            "the history holds two open terms for one election".into(),
        );
    }
    if open != leaders {
        for (e, l) in &leaders {
            if open.get(e) != Some(l) {
                diff(
                    &mut v,
                    format!(
                        "{e}: etcd's leader at {} is {l:?}, history's open term {:?}",
                        resume.revision,
                        open.get(e)
                    ),
                );
            }
        }
        for (e, o) in &open {
            if !leaders.contains_key(e) {
                diff(
                    &mut v,
                    format!("{e}: history has open term {o:?}, etcd has no leader"),
                );
            }
        }
    }

    // Every transition exactly once, in revision order.
    let rows = events_in_insert_order(db);
    v.events = rows.len();
    let mut last = 0;
    let mut started: HashMap<(String, i64), u32> = HashMap::new();
    let mut ended: HashMap<(String, i64), u32> = HashMap::new();
    for (rev, json) in &rows {
        if *rev < last {
            diff(
                &mut v,
                format!("event at revision {rev} stored after revision {last}"),
            );
        }
        last = last.max(*rev);
        let e: Event = serde_json::from_str(json).expect("event json");
        match e.kind {
            EventKind::TermStarted { token, .. } => {
                *started.entry((e.election, token)).or_default() += 1
            }
            EventKind::TermEnded { token, .. } => {
                *ended.entry((e.election, token)).or_default() += 1
            }
            EventKind::Gap { .. } => v.gaps += 1,
            _ => {}
        }
    }
    for ((e, t), n) in started.iter().chain(ended.iter()) {
        if *n > 1 {
            diff(
                &mut v,
                format!("{e} token {t}: a transition recorded {n} times"),
            );
        }
    }
    if v.gaps != expect_gaps {
        let gaps = v.gaps;
        diff(
            &mut v,
            format!("{gaps} gaps recorded, expected {expect_gaps}"),
        );
    }
    v
}

/// Refusals and acceptances the history recorded, against etcd's log of
/// fence keys: (accepted, refused) in the history; every accepted write is
/// checked against the term that led at its revision.
pub(crate) struct FenceAudit {
    pub(crate) accepted: usize,
    pub(crate) refused: usize,
    /// Accepted writes whose token was not the leader's at that revision.
    pub(crate) stale_accepted: Vec<String>,
    /// A resource's stored token went down.
    pub(crate) regressions: Vec<String>,
}

impl FenceAudit {
    /// No stale write accepted, no stored token gone down.
    pub(crate) fn assert_clean(&self) {
        assert!(self.stale_accepted.is_empty(), "{:?}", self.stale_accepted);
        assert!(self.regressions.is_empty(), "{:?}", self.regressions);
    }
}

pub(crate) fn audit_fences(log: &[LogEvent], terms: &[LogTerm], keys: &Keys) -> FenceAudit {
    let mut a = FenceAudit {
        accepted: 0,
        refused: 0,
        stale_accepted: Vec::new(),
        regressions: Vec::new(),
    };
    let mut stored: HashMap<String, i64> = HashMap::new();
    for e in log.iter().filter(|e| e.put) {
        match keys.parse(e.key.as_bytes(), e.lease) {
            Ok(SchemaKey::Fence { name, resource }) => {
                a.accepted += 1;
                let token: i64 = e.value.trim_start_matches('0').parse().unwrap_or(0);
                let leading = terms.iter().any(|t| {
                    t.election == name.as_str()
                        && t.layout == KeyLayout::Single
                        && t.token == token
                        && t.started <= e.revision
                        && t.ended.is_none_or(|(end, _)| e.revision < end)
                });
                if !leading {
                    a.stale_accepted.push(format!(
                        "{name}/{resource}: token {token} accepted at revision {} while it did not lead",
                        e.revision
                    ));
                }
                let prev = stored.insert(e.key.clone(), token).unwrap_or(0);
                if token < prev {
                    a.regressions.push(format!(
                        "{name}/{resource}: stored token went from {prev} to {token} at {}",
                        e.revision
                    ));
                }
            }
            Ok(SchemaKey::Refusal { .. }) => a.refused += 1,
            _ => {}
        }
    }
    a
}
