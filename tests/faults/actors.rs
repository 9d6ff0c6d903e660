//! The actors of the scenarios: `tenure campaign` holder processes, churn
//! that keeps electing through faults, and the library watcher feeding a
//! history store.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::support::procfs::{group_members, pgid_of};
pub(crate) use crate::support::wait::wait_until;
use tenure::election::Client;

/// A `tenure campaign` process (its own process group, with the command it
/// runs) whose command writes through the shared fence in a loop with
/// `$TENURE_TOKEN`, logging every decision, and writes once more when told
/// to stop: the deposed holder that ignores the stop request.
pub(crate) struct Holder {
    pub(crate) id: String,
    pub(crate) child: tokio::process::Child,
    pub(crate) pgid: i32,
    pub(crate) lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    pub(crate) log: std::path::PathBuf,
    pub(crate) token: i64,
}

pub(crate) const HOLDER_SCRIPT: &str = r#"
echo $$ > "$FENCE_LOG.pid"
w() { "$TENURE_BIN" fence "$TENURE_ELECTION" db --token "$TENURE_TOKEN" --json >> "$FENCE_LOG" 2>/dev/null; }
trap 'w; exit 0' TERM
while :; do w; sleep 0.05; done
"#;

impl Holder {
    pub(crate) fn spawn(
        endpoints: &[String],
        election: &str,
        id: &str,
        dir: &Path,
        ttl: u64,
        wait: bool,
        env: &[(&str, &str)],
    ) -> Holder {
        let log = dir.join(format!("{id}.jsonl"));
        let mut argv: Vec<String> =
            vec![crate::support::tenure_bin().to_string_lossy().into_owned()];
        argv.extend(
            ["campaign", election, "--id", id, "--ttl", &ttl.to_string()]
                .iter()
                .map(|s| s.to_string()),
        );
        if wait {
            argv.push("--wait".into());
        }
        argv.extend(
            ["--", "sh", "-c", HOLDER_SCRIPT]
                .iter()
                .map(|s| s.to_string()),
        );
        let mut child = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env("TENURE_ENDPOINTS", endpoints.join(","))
            .env_remove("TENURE_PREFIX")
            .env("TENURE_TIMEOUT", "2")
            .env("TENURE_BIN", crate::support::tenure_bin())
            .env("FENCE_LOG", &log)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn tenure campaign");
        let pgid = child.id().expect("pid") as i32;
        let lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
            child.stderr.take().expect("stderr"),
        ));
        Holder {
            id: id.to_owned(),
            child,
            pgid,
            lines,
            log,
            token: 0,
        }
    }

    /// Waits for "... leads NAME with token N".
    pub(crate) async fn leads(&mut self, within: Duration) -> i64 {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = tokio::time::timeout(left, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("{} did not lead within {within:?}", self.id))
                .expect("read stderr")
                .unwrap_or_else(|| panic!("{} exited before leading", self.id));
            if let Some(rest) = line.split(" with token ").nth(1) {
                self.token = rest
                    .split_whitespace()
                    .next()
                    .and_then(|t| t.parse().ok())
                    .expect("token");
                return self.token;
            }
        }
    }

    pub(crate) fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pgid), sig)
            .unwrap_or_else(|e| panic!("{sig} to {}: {e}", self.id));
    }

    /// The process group tenure runs the command in (led by its guard),
    /// from the pid the command wrote and /proc.
    pub(crate) fn command_group(&self) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(format!("{}.pid", self.log.display()))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        pgid_of(pid)
    }

    /// The whole holder freezes (a paused VM): the command's group (guard,
    /// command, its children) and tenure itself.
    pub(crate) fn freeze(&self) {
        let group = self.command_group().expect("the command's group");
        nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(group),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .expect("SIGSTOP the command's group");
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    /// The worst order of waking up: the command's processes get the CPU
    /// before tenure and its guard do, and act with the old token; once one
    /// of its writes after `t_new` is logged, the guard and tenure resume.
    pub(crate) async fn resume_command_first(&self, t_new: i64) {
        use nix::sys::signal::{kill, killpg, Signal};
        use nix::unistd::Pid;
        let group = self.command_group().expect("the command's group");
        for pid in group_members(group).into_iter().filter(|&p| p != group) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
        wait_until(
            "the resumed command writes with its old token",
            Duration::from_secs(10),
            || {
                self.decisions()
                    .iter()
                    .any(|d| d["revision"].as_i64().unwrap_or(0) > t_new)
            },
        )
        .await;
        let _ = killpg(Pid::from_raw(group), Signal::SIGCONT);
        self.signal(Signal::SIGCONT);
    }

    /// Every fence decision the holder's command logged.
    pub(crate) fn decisions(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub(crate) async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit within {within:?}", self.id))
            .expect("wait")
            .code()
    }

    /// Its remaining stderr (after it exited).
    pub(crate) async fn rest_of_stderr(&mut self) -> String {
        let mut out = String::new();
        while let Ok(Ok(Some(l))) =
            tokio::time::timeout(Duration::from_millis(200), self.lines.next_line()).await
        {
            out.push_str(&l);
            out.push('\n');
        }
        out
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(g) = self.command_group() {
            let g = nix::unistd::Pid::from_raw(g);
            let _ = nix::sys::signal::killpg(g, nix::sys::signal::Signal::SIGCONT);
            let _ = nix::sys::signal::killpg(g, nix::sys::signal::Signal::SIGKILL);
        }
        let pg = nix::unistd::Pid::from_raw(self.pgid);
        let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGCONT);
        let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGKILL);
    }
}

// ---------------------------------------------------------------------------
// Churn: campaign/resign cycles that keep going through faults (errors and
// timeouts are counted, not fatal). etcd's log, not this driver, is the
// truth the history is checked against.
// ---------------------------------------------------------------------------

pub(crate) struct Churn {
    pub(crate) stop: Arc<std::sync::atomic::AtomicBool>,
    pub(crate) tasks: Vec<tokio::task::JoinHandle<()>>,
    pub(crate) tally: Tally,
}

impl Churn {
    pub(crate) fn start(client: &Client, prefix: &str, workers: usize, pause: Duration) -> Churn {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tally = Tally::default();
        let tasks = (0..workers)
            .map(|w| {
                let (client, stop, tally) = (client.clone(), stop.clone(), tally.clone());
                let n = name(&format!("{prefix}/c{w}"));
                tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let cand = format!("w{w}-{i}");
                        match client.acquire_detached(&n, &cand, ttl(30), None).await {
                            Ok(Ok(won)) => {
                                tally.add("campaign");
                                tokio::time::sleep(pause).await;
                                match client.resign(&n, won.token).await {
                                    Ok(_) => tally.add("resign"),
                                    Err(e) => {
                                        tally.add(if e.is_unavailable() {
                                            "resign_unavailable"
                                        } else {
                                            "resign_failed"
                                        });
                                        // Whoever leads now (maybe this term) goes.
                                        let _ = client.depose(&n).await;
                                    }
                                }
                            }
                            Ok(Err(_)) => {
                                tally.add("held");
                                let _ = client.depose(&n).await;
                            }
                            Err(e) => {
                                tally.add(if e.is_unavailable() {
                                    "campaign_unavailable"
                                } else {
                                    "campaign_failed"
                                });
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                        tokio::time::sleep(pause).await;
                    }
                })
            })
            .collect();
        Churn { stop, tasks, tally }
    }

    pub(crate) async fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
        self.tally
    }
}

/// The library watcher feeding a history store, as `tenure serve` does,
/// with every update timestamped.
pub(crate) struct LibWatcher {
    pub(crate) task: tokio::task::JoinHandle<()>,
    pub(crate) consumer: tokio::task::JoinHandle<()>,
    pub(crate) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) seen: Arc<Mutex<Vec<(Instant, tenure::events::Update)>>>,
}

impl LibWatcher {
    pub(crate) fn start(client: Client, cfg: tenure::watch::WatchConfig, db: &Path) -> LibWatcher {
        let store = tenure::history::Store::open(db, Duration::ZERO).expect("store");
        let resume = store.resume_point().expect("resume");
        let (tx, mut rx) = tokio::sync::mpsc::channel(4096);
        let task = tokio::spawn(async move {
            let _ = tenure::watch::Watcher::new(client, cfg)
                .run(resume, tx)
                .await;
        });
        let seen: Arc<Mutex<Vec<(Instant, tenure::events::Update)>>> = Arc::default();
        let log = seen.clone();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let consumer = tokio::spawn(async move {
            // (Aborting `Watcher::run` does not end its lease sampler, which
            // holds a sender too: stop on a signal, not on a closed channel.)
            loop {
                let u = tokio::select! {
                    u = rx.recv() => match u { Some(u) => u, None => break },
                    _ = &mut stopped => break,
                };
                if let tenure::events::Update::Batch(b) = &u {
                    store.write(b.clone()).await.expect("history write");
                }
                log.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((Instant::now(), u));
            }
            store.close().await.expect("close history");
        });
        LibWatcher {
            task,
            consumer,
            stop: Some(stop),
            seen,
        }
    }

    /// The highest batch revision seen so far.
    pub(crate) fn revision(&self) -> i64 {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(_, u)| match u {
                tenure::events::Update::Batch(b) => Some(b.revision),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// When the first update after `since` matching `f` arrived.
    pub(crate) fn first_after(
        &self,
        since: Instant,
        f: impl Fn(&tenure::events::Update) -> bool,
    ) -> Option<Instant> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(at, u)| *at >= since && f(u))
            .map(|(at, _)| *at)
    }

    pub(crate) async fn caught_up(&self, revision: i64) {
        wait_until("the watcher caught up", Duration::from_secs(60), || {
            self.revision() >= revision
        })
        .await;
    }

    /// Stops the watcher and commits the history.
    pub(crate) async fn stop(mut self) {
        self.task.abort();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), &mut self.consumer)
            .await
            .expect("history committed")
            .expect("consumer");
    }
}
