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
    /// The highest revision it has delivered (a batch, or a caught-up
    /// notice), or its resume point's before the first.
    seen: i64,
}

impl Chain {
    fn start(start: &mut Start, resume: Option<ResumePoint>) -> Chain {
        let seen = resume.as_ref().map_or(0, |r| r.revision);
        let (tx, rx) = mpsc::channel(1024);
        Chain {
            task: start(resume, tx),
            rx,
            seen,
        }
    }

    fn saw(&mut self, u: &Update) {
        if let Some(r) = revision_of(u) {
            self.seen = self.seen.max(r);
        }
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The revision an update says is processed: a batch's, or a caught-up
/// notice's.
fn revision_of(u: &Update) -> Option<i64> {
    match u {
        Update::Batch(b) => Some(b.revision),
        Update::Watch(WatchStatus::CaughtUp { revision }) => Some(*revision),
        _ => None,
    }
}

/// The feed's watcher feeding the serve loop (as feed `i`) and, on request,
/// a writer term.
pub struct Forwarder {
    pub i: usize,
    pub start: Start,
    pub all: mpsc::Sender<(usize, Option<Update>)>,
    /// A writer term's requests (`None`: no shared history).
    pub taps: Option<mpsc::Receiver<Tap>>,
}

impl Forwarder {
    /// Runs the watcher from `resume` until it ends or the serve loop is
    /// gone; `(i, None)` then tells the serve loop that it ended.
    pub async fn run(mut self, resume: Option<ResumePoint>) {
        let mut local = Chain::start(&mut self.start, resume);
        // Nothing has reached the serve loop: `local.seen` is only its start.
        let mut forwarded = false;
        // The serve loop has applied up to here of an older watcher.
        let mut applied = 0;
        // The term's updates, when `local` is its watcher.
        let mut writer: Option<mpsc::Sender<Update>> = None;
        // A term's own watcher, while `local` has not seen as far.
        let mut pending: Option<(Chain, mpsc::Sender<Update>)> = None;
        loop {
            tokio::select! {
                u = local.rx.recv() => {
                    let Some(u) = u else { break };
                    local.saw(&u);
                    if let Some(w) = &writer {
                        if w.send(u.clone()).await.is_err() {
                            writer = None;
                        }
                    }
                    if revision_of(&u).is_some_and(|r| r <= applied) {
                        continue;
                    }
                    forwarded = true;
                    if self.all.send((self.i, Some(u))).await.is_err() {
                        return;
                    }
                }
                u = next_of(&mut pending) => match u {
                    Some(u) => {
                        if let Some((chain, tx)) = &mut pending {
                            chain.saw(&u);
                            if tx.send(u).await.is_err() {
                                pending = None;
                            }
                        }
                    }
                    // Its watcher ended: the term hears it (its sender
                    // dropped with it).
                    None => pending = None,
                },
                Some(tap) = next_tap(&mut self.taps) => {
                    writer = None;
                    let chain = Chain::start(&mut self.start, tap.resume);
                    pending = Some((chain, tap.tx));
                }
            }
            if pending.as_ref().is_some_and(|(_, tx)| tx.is_closed()) {
                pending = None;
            }
            // The term's watcher becomes the feed's once the old one has
            // seen as far (or has shown the serve loop nothing yet).
            if let Some((chain, _)) = &pending {
                if !forwarded || local.seen >= chain.seen {
                    if let Some((chain, tx)) = pending.take() {
                        applied = if forwarded { local.seen } else { 0 };
                        local = chain;
                        writer = Some(tx);
                    }
                }
            }
        }
        let _ = self.all.send((self.i, None)).await;
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
