//! client-go's `leaderelection` with a LeaseLock (`tests/go/leasecandidate`):
//! the candidates, their started/stopped-leading lines on the host's clock.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{kill9, repo, spawn, KubeApiserver};

/// `tests/go/leasecandidate`, built once per test binary into the target
/// dir (module mode with the machine's Go; setup.sh --test fetches its
/// modules).
pub fn candidate_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("leasecandidate");
        let status = std::process::Command::new("go")
            .args(["build", "-mod=readonly", "-trimpath", "-o"])
            .arg(&out)
            .arg(".")
            .current_dir(repo().join("tests/go/leasecandidate"))
            .env("GOFLAGS", "-buildvcs=false")
            .status()
            .expect("go build (Go 1.26 on PATH)");
        assert!(status.success(), "go build tests/go/leasecandidate");
        out
    })
    .clone()
}

/// One line a candidate printed: (unix µs, what, its id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said {
    pub at_us: i64,
    pub what: String,
    pub id: String,
}

/// A client-go leader-election candidate on one Lease.
pub struct Candidate {
    child: Child,
    pub id: String,
    said: Arc<Mutex<Vec<Said>>>,
}

/// Lease timings of every candidate: 4 s, renew deadline 3 s, retry 0.5 s.
pub const LEASE: Duration = Duration::from_secs(4);

impl Candidate {
    pub fn start(api: &KubeApiserver, namespace: &str, name: &str, id: &str) -> Candidate {
        let mut cmd = Command::new(candidate_bin());
        cmd.arg("--kubeconfig")
            .arg(api.kubeconfig())
            .args(["--namespace", namespace, "--name", name, "--id", id])
            .args(["--lease-duration", "4s", "--renew-deadline", "3s"])
            .args(["--retry-period", "500ms", "--release-on-cancel"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = spawn(&mut cmd);
        let said = Arc::new(Mutex::new(Vec::new()));
        let sink = said.clone();
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut w = line.split_whitespace();
                let (Some(at), Some(what)) = (w.next(), w.next()) else {
                    continue;
                };
                sink.lock().unwrap().push(Said {
                    at_us: at.parse().unwrap_or(0),
                    what: what.to_owned(),
                    id: w.next().unwrap_or("").to_owned(),
                });
            }
        });
        Candidate {
            child,
            id: id.to_owned(),
            said,
        }
    }

    pub fn said(&self) -> Vec<Said> {
        self.said.lock().unwrap().clone()
    }

    /// When it printed `what` (`started-leading`, `stopped-leading`), each time.
    pub fn times(&self, what: &str) -> Vec<i64> {
        self.said()
            .into_iter()
            .filter(|s| s.what == what)
            .map(|s| s.at_us)
            .collect()
    }

    /// Waits (10 s at most) until it printed `what`: a holder killed the
    /// moment its acquiring write is seen may not have said it leads yet.
    pub async fn said_by_now(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.times(what).is_empty() {
            assert!(Instant::now() < deadline, "the candidate never said {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn signal(&self, signal: Signal) {
        let pid = self.child.id().expect("running");
        kill(Pid::from_raw(pid as i32), signal).expect("kill");
    }

    /// Waits for its exit; its status code (`None`: a signal).
    pub async fn wait(&mut self, within: Duration) -> Option<i32> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .expect("the candidate exited")
            .expect("wait")
            .code()
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        kill9(&self.child);
    }
}

/// The candidate of `id` among `cs`.
pub fn by_id<'a>(cs: &'a mut [Candidate], id: &str) -> &'a mut Candidate {
    cs.iter_mut()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no candidate {id}"))
}

/// Candidates `ids` on the Lease `namespace/name`, started in that order.
pub fn candidates(
    api: &KubeApiserver,
    namespace: &str,
    name: &str,
    ids: &[&str],
) -> Vec<Candidate> {
    ids.iter()
        .map(|id| Candidate::start(api, namespace, name, id))
        .collect()
}
