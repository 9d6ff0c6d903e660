//! `tenure serve` as a real child process: started against a harness etcd
//! with a history file, on a free loopback port read back from its stderr;
//! SIGKILLed and reaped when dropped (and on the test's death, through
//! PR_SET_PDEATHSIG). The benches start theirs with it too.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::prom::metric_value;

pub struct Serve {
    child: Child,
    pub addr: String,
    /// When the process was spawned (the benches time its start-up).
    pub spawned: Instant,
    pub db: PathBuf,
    logs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Serve {
    /// Starts `tenure serve --db DB --listen 127.0.0.1:0` with extra env.
    pub async fn start(
        endpoints: &[String],
        db: &Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        let mut cmd = Command::new(super::tenure_bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(extra_args)
            .env("TENURE_ENDPOINTS", endpoints.join(","))
            .env_remove("TENURE_PREFIX")
            .env_remove("TENURE_LOG")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        // SAFETY: only calls prctl(2), which is async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let spawned = Instant::now();
        let mut child = cmd.spawn().expect("spawn tenure serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let logs = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let addr = loop {
            let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
                .await
                .expect("tenure serve announced its address")
                .expect("read stderr")
                .unwrap_or_else(|| {
                    panic!(
                        "tenure serve exited early: {:?}",
                        logs.lock().map(|l| l.clone())
                    )
                });
            logs.lock().expect("logs").push(line.clone());
            if let Some(rest) = line.split("serving on http://").nth(1) {
                break rest.split_whitespace().next().expect("address").to_owned();
            }
        };
        let sink = logs.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(mut l) = sink.lock() {
                    l.push(line);
                }
            }
        });
        Serve {
            child,
            addr,
            spawned,
            db: db.to_owned(),
            logs,
        }
    }

    /// Waits for /readyz: the watcher has loaded its snapshot, so what a
    /// test does next is seen as it happens, not in a snapshot.
    pub async fn ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = reqwest::get(self.url("/readyz")).await {
                if r.status().is_success() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "serve never became ready: {:?}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }

    /// All its stderr lines so far, one string.
    pub fn log_text(&self) -> String {
        self.logs().join("\n")
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(self.url("/metrics"))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("body")
    }

    /// The value of one sample line (`name{labels}` exactly as rendered, or
    /// a bare name), if present.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        metric_value(&self.metrics().await, series)
    }

    /// Waits until the watcher has processed `revision` (tenure_watch_revision).
    pub async fn caught_up(&self, revision: i64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.metric("tenure_watch_revision").await.unwrap_or(0.0) >= revision as f64 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "serve never reached revision {revision}: {:?}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// SIGTERM and wait: a graceful stop that commits the history.
    pub async fn stop(mut self) -> Option<i32> {
        let _ = kill(Pid::from_raw(self.pid()), Signal::SIGTERM);
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("serve stopped after SIGTERM")
            .expect("wait");
        status.code()
    }

    /// Waits (`within` at most) for it to exit by itself; its code.
    pub async fn exited(&mut self, within: Duration) -> Option<i32> {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("serve still runs after {within:?}: {}", self.log_text()))
            .expect("wait");
        status.code()
    }

    /// SIGKILL and wait: a crash.
    pub async fn crash(mut self) {
        let _ = kill(Pid::from_raw(self.pid()), Signal::SIGKILL);
        let _ = self.child.wait().await;
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // Only our own child, by its pid (`id()` is None once it was reaped).
        if let Some(pid) = self.child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                match self.child.try_wait() {
                    Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                    _ => break,
                }
            }
        }
    }
}
