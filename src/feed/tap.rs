//! A feed's one watcher, shared by the serve loop and the feed's writer
//! term: a cluster is watched once, whatever records it.
//!
//! The serve loop (metrics, readiness, live pages) takes every update of
//! the feed's watcher. A writer term on the shared history must record
//! from where the history left off (the previous writer's last commit),
//! from the history's own state, so that the history is one unbroken
//! chain whoever wrote it. So a term asks for a [`Tap`]: the watcher is
//! started again from the history's resume point, and its updates go to
//! the term and, once past what the serve loop has already applied, to
//! the serve loop. Until this replica's watcher has seen as far as the new
//! one (it may lag the previous writer), both run: the old one for the
//! serve loop, the new one for the term; then the old one is stopped.
//!
//! Invariants: the serve loop never applies a revision twice, nor skips
//! one the old watcher had not passed; the term receives every update of
//! its watcher from its resume point on, in order; a term that ends (its
//! receiver dropped) is never waited for.

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::events::{ResumePoint, Update, WatchStatus};

/// A writer term's request: the feed's updates from `resume` (the history's
/// resume point, read with the term's fence claimed) into `tx`.
pub struct Tap {
    pub resume: Option<ResumePoint>,
    pub tx: mpsc::Sender<Update>,
}

/// Starts the feed's watcher (of its etcd, or of the Kubernetes API) from a
/// resume point into a channel; the task ends when the watcher does.
pub type Start = Box<dyn FnMut(Option<ResumePoint>, mpsc::Sender<Update>) -> JoinHandle<()> + Send>;

/// One running watcher: its task (aborted when dropped), its updates and
/// how far they have reached.
struct Chain {
    task: JoinHandle<()>,
    rx: mpsc::Receiver<Update>,
    /// The revision of the last batch it delivered (the highest of one
    /// timeline; after a reset, the new timeline's), or its resume point's
    /// before the first. Caught-up notices do not count: on etcd before
    /// 3.4.25 / 3.5.8 one may overtake events at or below it.
    seen: i64,
    /// It has delivered a reset: what it delivers next is a new timeline.
    reset: bool,
}

impl Chain {
    fn start(start: &mut Start, resume: Option<ResumePoint>) -> Chain {
        let seen = resume.as_ref().map_or(0, |r| r.revision);
        let (tx, rx) = mpsc::channel(1024);
        Chain {
            task: start(resume, tx),
            rx,
            seen,
            reset: false,
        }
    }

    /// Notes how far `u` reaches; `true` when it is a reset.
    fn saw(&mut self, u: &Update) -> bool {
        let Update::Batch(b) = u else {
            return false;
        };
        if b.has_reset() {
            self.seen = b.revision;
            self.reset = true;
            return true;
        }
        self.seen = self.seen.max(b.revision);
        false
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `u` as the serve loop is to get it, when it has applied every revision
/// up to `applied` of a watcher since replaced: a batch is one watch
/// response and may span revisions (a Kubernetes batch carries objects
/// into a later one), so its events at or below `applied` are dropped,
/// and a batch or caught-up notice wholly at or below it is not shown.
fn unseen(u: Update, applied: i64) -> Option<Update> {
    match u {
        Update::Batch(b) if b.revision <= applied => None,
        Update::Batch(mut b) => {
            b.events.retain(|e| e.revision > applied);
            Some(Update::Batch(b))
        }
        Update::Watch(WatchStatus::CaughtUp { revision }) if revision <= applied => None,
        u => Some(u),
    }
}

/// Where the serve loop takes every feed's updates, tagged with its index.
pub type Serve = mpsc::Sender<(usize, Option<Update>)>;

/// The feed's watcher feeding the serve loop (as feed `i`) and, on request,
/// a writer term.
pub struct Forwarder {
    pub i: usize,
    pub start: Start,
    pub all: Serve,
    /// A writer term's requests (`None`: no shared history).
    pub taps: Option<mpsc::Receiver<Tap>>,
}

/// What the forwarder keeps between updates.
struct Route {
    /// The watcher whose updates the serve loop gets.
    local: Chain,
    /// Something has reached the serve loop.
    forwarded: bool,
    /// The serve loop has applied every revision up to here of a watcher
    /// since replaced (0: none, or a new timeline since).
    applied: i64,
    /// The term's updates, when `local` is its watcher.
    writer: Option<mpsc::Sender<Update>>,
    /// A term's own watcher, while `local` has not seen as far.
    pending: Option<(Chain, mpsc::Sender<Update>)>,
    /// `local` has delivered a reset since `pending` started: it is on a
    /// new timeline, whose revisions do not compare with the old one's.
    local_reset: bool,
}

impl Forwarder {
    /// Runs the watcher from `resume` until it ends or the serve loop is
    /// gone; `(i, None)` then tells the serve loop that it ended.
    pub async fn run(mut self, resume: Option<ResumePoint>) {
        let mut r = Route {
            local: Chain::start(&mut self.start, resume),
            forwarded: false,
            applied: 0,
            writer: None,
            pending: None,
            local_reset: false,
        };
        loop {
            tokio::select! {
                u = r.local.rx.recv() => match u {
                    Some(u) => if !r.show(u, (self.i, &self.all)).await {
                        return;
                    },
                    // Ended for good: so is the feed (a term's watcher has
                    // delivered revisions the serve loop would miss).
                    None => break,
                },
                u = next_of(&mut r.pending) => match u {
                    Some(u) => if !r.for_term(u, (self.i, &self.all)).await {
                        return;
                    },
                    // Its watcher ended: the term hears it (its sender
                    // dropped with it).
                    None => r.pending = None,
                },
                Some(tap) = next_tap(&mut self.taps) => {
                    r.writer = None;
                    let chain = Chain::start(&mut self.start, tap.resume);
                    r.pending = Some((chain, tap.tx));
                    r.local_reset = false;
                }
            }
            r.switch();
        }
        let _ = self.all.send((self.i, None)).await;
    }
}

impl Route {
    /// One update of the serve loop's watcher: to the term that taps it,
    /// and what the serve loop has not applied to the serve loop (as feed
    /// `i`; `false`: the serve loop is gone).
    async fn show(&mut self, u: Update, (i, all): (usize, &Serve)) -> bool {
        if self.local.saw(&u) {
            // A new timeline: nothing of it was applied.
            self.applied = 0;
            self.local_reset = true;
        }
        if let Some(w) = &self.writer {
            if w.send(u.clone()).await.is_err() {
                self.writer = None;
            }
        }
        let Some(u) = unseen(u, self.applied) else {
            return true;
        };
        self.forwarded = true;
        all.send((i, Some(u))).await.is_ok()
    }

    /// One update of a term's own watcher, while the serve loop's is the
    /// old one: to the term; a reset the old one has not delivered also to
    /// the serve loop (the switch follows at once). `false`: the serve loop
    /// is gone.
    async fn for_term(&mut self, u: Update, (i, all): (usize, &Serve)) -> bool {
        let Some((chain, tx)) = &mut self.pending else {
            return true;
        };
        let shown = (chain.saw(&u) && !self.local_reset).then(|| u.clone());
        if tx.send(u).await.is_err() {
            self.pending = None;
            return true;
        }
        match shown {
            Some(u) => {
                self.forwarded = true;
                all.send((i, Some(u))).await.is_ok()
            }
            None => true,
        }
    }

    /// The term's watcher becomes the feed's once the old one has seen as
    /// far (or has shown the serve loop nothing yet), on the same
    /// timeline; a term gone is dropped.
    fn switch(&mut self) {
        if self.pending.as_ref().is_some_and(|(_, tx)| tx.is_closed()) {
            self.pending = None;
        }
        let ready = match &self.pending {
            None => false,
            Some(_) if !self.forwarded => true,
            // Only the term's is on a new timeline: its reset was shown.
            Some((chain, _)) if chain.reset && !self.local_reset => true,
            // Only the serve loop's is: wait for the term's to reset too.
            Some((chain, _)) if !chain.reset && self.local_reset => false,
            Some((chain, _)) => self.local.seen >= chain.seen,
        };
        if ready {
            self.promote();
        }
    }

    /// Makes the term's watcher the feed's now.
    fn promote(&mut self) {
        let Some((chain, tx)) = self.pending.take() else {
            return;
        };
        self.applied = if !self.forwarded {
            // Nothing shown yet: all of it is new to the serve loop.
            0
        } else if chain.reset && !self.local_reset {
            // Shown up to its reset, the last it delivered.
            chain.seen
        } else {
            self.applied.max(self.local.seen)
        };
        self.local = chain;
        self.writer = Some(tx);
    }
}

/// The next update of a term's own watcher (never, without one).
async fn next_of(pending: &mut Option<(Chain, mpsc::Sender<Update>)>) -> Option<Update> {
    match pending {
        Some((chain, _)) => chain.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next tap (never, without a shared history or once it is gone).
async fn next_tap(taps: &mut Option<mpsc::Receiver<Tap>>) -> Option<Tap> {
    match taps {
        Some(rx) => match rx.recv().await {
            Some(t) => Some(t),
            None => {
                *taps = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Batch, Event, EventKind};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Each watcher started: its resume revision, and the sender the test
    /// scripts it with (dropped by the forwarder: closed).
    type Starts = Arc<Mutex<Vec<(i64, mpsc::Sender<Update>)>>>;

    fn scripted() -> (Starts, Start) {
        let starts: Starts = Arc::default();
        let kept = starts.clone();
        let start: Start = Box::new(move |resume, tx| {
            let from = resume.map_or(0, |r| r.revision);
            kept.lock().unwrap().push((from, tx));
            crate::task::spawn("scripted watcher", std::future::pending())
        });
        (starts, start)
    }

    async fn started(starts: &Starts, k: usize) -> (i64, mpsc::Sender<Update>) {
        for _ in 0..500 {
            if let Some(s) = starts.lock().unwrap().get(k) {
                return s.clone();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("watcher {k} never started");
    }

    fn at(revision: i64) -> Event {
        Event {
            revision,
            at_ms: 0,
            election: "e".into(),
            kind: EventKind::CandidateQueued {
                token: revision,
                holder: "h".into(),
                lease_id: 0,
            },
        }
    }

    fn batch(revision: i64, events: &[i64]) -> Update {
        Update::Batch(Batch {
            revision,
            events: events.iter().map(|&r| at(r)).collect(),
        })
    }

    fn reset(revision: i64) -> Update {
        let mut e = at(revision);
        e.kind = EventKind::Reset {
            from_revision: 20,
            to_revision: revision,
            previous_cluster_id: Some(1),
            cluster_id: 1,
        };
        Update::Batch(Batch {
            revision,
            events: vec![e],
        })
    }

    fn from(revision: i64) -> Option<ResumePoint> {
        Some(ResumePoint {
            revision,
            ..ResumePoint::default()
        })
    }

    /// The revisions of a batch's events (`None`: not a batch).
    fn revisions(u: &Update) -> Option<(i64, Vec<i64>)> {
        match u {
            Update::Batch(b) => Some((b.revision, b.events.iter().map(|e| e.revision).collect())),
            _ => None,
        }
    }

    struct Rig {
        starts: Starts,
        inbox: mpsc::Receiver<(usize, Option<Update>)>,
        taps: mpsc::Sender<Tap>,
    }

    impl Rig {
        fn new() -> Rig {
            let (starts, start) = scripted();
            let (all, inbox) = mpsc::channel(64);
            let (taps, rx) = mpsc::channel(1);
            let f = Forwarder {
                i: 0,
                start,
                all,
                taps: Some(rx),
            };
            crate::task::spawn("forwarder", f.run(None));
            Rig {
                starts,
                inbox,
                taps,
            }
        }

        async fn tap(&self, resume: i64) -> mpsc::Receiver<Update> {
            let (tx, rx) = mpsc::channel(64);
            let tap = Tap {
                resume: from(resume),
                tx,
            };
            self.taps.send(tap).await.unwrap();
            rx
        }

        /// The serve loop's next batch.
        async fn shown(&mut self) -> (i64, Vec<i64>) {
            let next = tokio::time::timeout(Duration::from_secs(2), self.inbox.recv());
            let (_, u) = next.await.expect("shown in time").expect("open");
            revisions(&u.expect("an update")).expect("a batch")
        }

        /// Nothing more reaches the serve loop for a moment.
        async fn nothing_shown(&mut self) {
            let next = tokio::time::timeout(Duration::from_millis(100), self.inbox.recv());
            if let Ok(u) = next.await {
                panic!(
                    "shown: {:?}",
                    u.and_then(|(_, u)| u.as_ref().and_then(revisions))
                );
            }
        }
    }

    async fn recorded(rx: &mut mpsc::Receiver<Update>) -> (i64, Vec<i64>) {
        let next = tokio::time::timeout(Duration::from_secs(2), rx.recv());
        revisions(&next.await.expect("in time").expect("open")).expect("a batch")
    }

    #[tokio::test]
    async fn a_batch_spanning_the_switch_shows_the_serve_loop_only_what_it_had_not() {
        let mut rig = Rig::new();
        let (_, old) = started(&rig.starts, 0).await;
        old.send(batch(10, &[9, 10])).await.unwrap();
        assert_eq!(rig.shown().await, (10, vec![9, 10]));
        let mut term = rig.tap(5).await;
        let (resumed, new) = started(&rig.starts, 1).await;
        assert_eq!(resumed, 5, "the term's watcher starts at its resume point");
        new.send(batch(5, &[])).await.unwrap();
        // One watch response: replayed revisions and new ones.
        new.send(batch(12, &[7, 9, 11, 12])).await.unwrap();
        assert_eq!(recorded(&mut term).await, (5, vec![]));
        assert_eq!(recorded(&mut term).await, (12, vec![7, 9, 11, 12]));
        assert_eq!(rig.shown().await, (12, vec![11, 12]));
        assert!(old.is_closed(), "the old watcher is gone: watched once");
    }

    #[tokio::test]
    async fn what_the_serve_loop_applied_never_counts_down_across_terms() {
        let mut rig = Rig::new();
        let (_, old) = started(&rig.starts, 0).await;
        old.send(batch(20, &[20])).await.unwrap();
        assert_eq!(rig.shown().await, (20, vec![20]));
        let first = rig.tap(5).await;
        let (_, c1) = started(&rig.starts, 1).await;
        c1.send(batch(8, &[6, 7, 8])).await.unwrap();
        drop(first);
        let mut second = rig.tap(8).await;
        let (_, c2) = started(&rig.starts, 2).await;
        c2.send(batch(15, &[9, 15])).await.unwrap();
        c2.send(batch(22, &[21, 22])).await.unwrap();
        assert_eq!(recorded(&mut second).await, (15, vec![9, 15]));
        assert_eq!(rig.shown().await, (22, vec![21, 22]));
    }

    #[tokio::test]
    async fn a_new_timeline_is_shown_though_its_revisions_are_lower() {
        let mut rig = Rig::new();
        let (_, old) = started(&rig.starts, 0).await;
        old.send(batch(20, &[20])).await.unwrap();
        assert_eq!(rig.shown().await, (20, vec![20]));
        let _term = rig.tap(5).await;
        let (_, new) = started(&rig.starts, 1).await;
        new.send(reset(3)).await.unwrap();
        new.send(batch(4, &[4])).await.unwrap();
        assert_eq!(rig.shown().await, (3, vec![3]));
        assert_eq!(rig.shown().await, (4, vec![4]));
    }

    #[tokio::test]
    async fn a_lagging_watcher_serves_until_it_has_seen_as_far_as_the_terms() {
        let mut rig = Rig::new();
        let (_, old) = started(&rig.starts, 0).await;
        old.send(batch(5, &[5])).await.unwrap();
        assert_eq!(rig.shown().await, (5, vec![5]));
        let mut term = rig.tap(8).await;
        let (_, new) = started(&rig.starts, 1).await;
        new.send(batch(8, &[])).await.unwrap();
        new.send(batch(9, &[9])).await.unwrap();
        assert_eq!(recorded(&mut term).await, (8, vec![]));
        assert_eq!(recorded(&mut term).await, (9, vec![9]));
        rig.nothing_shown().await;
        old.send(batch(7, &[6, 7])).await.unwrap();
        assert_eq!(rig.shown().await, (7, vec![6, 7]));
        assert!(!old.is_closed(), "still the serve loop's");
        old.send(batch(9, &[8, 9])).await.unwrap();
        assert_eq!(rig.shown().await, (9, vec![8, 9]));
        new.send(batch(10, &[10])).await.unwrap();
        assert_eq!(recorded(&mut term).await, (10, vec![10]));
        assert_eq!(rig.shown().await, (10, vec![10]));
        assert!(old.is_closed(), "switched: watched once");
    }

    #[tokio::test]
    async fn a_term_before_anything_was_shown_takes_the_watcher_at_once() {
        let mut rig = Rig::new();
        let (_, old) = started(&rig.starts, 0).await;
        let mut term = rig.tap(4).await;
        let (_, new) = started(&rig.starts, 1).await;
        new.send(batch(4, &[3, 4])).await.unwrap();
        assert_eq!(recorded(&mut term).await, (4, vec![3, 4]));
        assert_eq!(rig.shown().await, (4, vec![3, 4]));
        assert!(old.is_closed());
    }

    #[tokio::test]
    async fn a_reset_only_the_terms_watcher_saw_is_shown_to_the_serve_loop() {
        let mut rig = Rig::new();
        let (_, old) = started(&rig.starts, 0).await;
        old.send(batch(20, &[20])).await.unwrap();
        assert_eq!(rig.shown().await, (20, vec![20]));
        let mut term = rig.tap(25).await;
        let (_, new) = started(&rig.starts, 1).await;
        new.send(reset(3)).await.unwrap();
        assert_eq!(recorded(&mut term).await, (3, vec![3]));
        assert_eq!(rig.shown().await, (3, vec![3]));
        new.send(batch(4, &[4])).await.unwrap();
        assert_eq!(rig.shown().await, (4, vec![4]));
        assert!(old.is_closed());
    }

    #[tokio::test]
    async fn a_reset_both_watchers_saw_is_shown_once() {
        let mut rig = Rig::new();
        let (_, old) = started(&rig.starts, 0).await;
        old.send(batch(20, &[20])).await.unwrap();
        assert_eq!(rig.shown().await, (20, vec![20]));
        let mut term = rig.tap(25).await;
        let (_, new) = started(&rig.starts, 1).await;
        old.send(reset(3)).await.unwrap();
        assert_eq!(rig.shown().await, (3, vec![3]));
        new.send(reset(3)).await.unwrap();
        assert_eq!(recorded(&mut term).await, (3, vec![3]));
        new.send(batch(4, &[4])).await.unwrap();
        assert_eq!(recorded(&mut term).await, (4, vec![4]));
        assert_eq!(rig.shown().await, (4, vec![4]));
        assert!(old.is_closed());
    }

    #[tokio::test]
    async fn a_term_that_ends_is_not_waited_for() {
        let mut rig = Rig::new();
        let (_, old) = started(&rig.starts, 0).await;
        old.send(batch(5, &[5])).await.unwrap();
        assert_eq!(rig.shown().await, (5, vec![5]));
        let term = rig.tap(5).await;
        let (_, new) = started(&rig.starts, 1).await;
        drop(term);
        for r in 6..200 {
            new.send(batch(r, &[r])).await.unwrap();
            assert_eq!(rig.shown().await, (r, vec![r]));
        }
    }
}
