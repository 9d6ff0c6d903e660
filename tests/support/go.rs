//! A real Go etcd client as a child process: `tests/go/etcdactor`, built on
//! etcd's own `clientv3/concurrency` package (`Session`, `Election`,
//! `Mutex`), scripted line by line. One [`GoActor`] is one Go service with
//! one `concurrency.Session` (one lease) for its whole life.
//!
//! The program is built in module mode with the machine's Go, once per test
//! binary and client line into `target/go-etcdactor-LINE`, against
//! `go.etcd.io/etcd/client/v3` of the server's own line (committed go.mod
//! and go.sum per line), and not at all when that binary is newer than
//! `main.go` and its modfile.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use super::member::etcd_version;

const INSTALL: &str = "Go 1.26 on PATH (the machine's) and Go's module proxy; scripts/setup.sh --test downloads the modules";
/// How long one scripted answer may take by default.
pub const ANSWER: Duration = Duration::from_secs(10);

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is target/tmp")
        .to_path_buf()
}

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go/etcdactor")
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The client line built against the etcd under test: the server's own
/// minor line (`go.3.5.mod`, `go.mod` for 3.6, `go.3.7.mod`), and 3.5's for
/// a 3.4 server (3.4's client is not a `client/v3` module; 3.5's speaks to
/// 3.4 as etcd's compatibility promise says).
pub fn client_line() -> &'static str {
    client_line_for(&etcd_version())
}

fn client_line_for(version: &str) -> &'static str {
    let v = version.rsplit(' ').next().unwrap_or("");
    if v.starts_with("3.7.") {
        "3.7"
    } else if v.starts_with("3.6.") {
        "3.6"
    } else {
        "3.5"
    }
}

/// The modfile of a client line, relative to the module's folder.
fn modfile(line: &str) -> String {
    if line == "3.6" {
        "go.mod".into()
    } else {
        format!("go.{line}.mod")
    }
}

/// The built `etcdactor` for the etcd under test (built at most once per
/// test binary and client line).
pub fn etcdactor_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build(client_line())).clone()
}

fn build(line: &str) -> PathBuf {
    let out = target_dir().join(format!("go-etcdactor-{line}"));
    let sources = ["main.go".to_owned(), modfile(line)].map(|f| mtime(&source_dir().join(f)));
    if let Some(bin) = mtime(&out) {
        if sources.iter().all(|s| s.is_some_and(|s| bin > s)) {
            return out;
        }
    }
    // Build beside the final name, then rename: another test binary that
    // builds at the same time never runs a half-written file.
    let tmp = target_dir().join(format!("go-etcdactor-{line}.{}.tmp", std::process::id()));
    let built = std::process::Command::new("go")
        .args(["build", "-mod=readonly", "-modfile"])
        .arg(modfile(line))
        .arg("-o")
        .arg(&tmp)
        .arg(".")
        .current_dir(source_dir())
        .env("GO111MODULE", "on")
        .env("GOFLAGS", "-buildvcs=false")
        .output()
        .unwrap_or_else(|e| panic!("run go build: {e}; {INSTALL}"));
    assert!(
        built.status.success(),
        "go build of tests/go/etcdactor ({}) failed ({INSTALL}):\n{}",
        modfile(line),
        String::from_utf8_lossy(&built.stderr)
    );
    std::fs::rename(&tmp, &out).expect("rename the built etcdactor");
    out
}

/// One Go service: a `concurrency.Session` with TTL `ttl` and whatever
/// elections and mutexes the test asks it to run on it.
pub struct GoActor {
    pub name: String,
    /// The session's lease id, as Go prints it (`%x`).
    pub lease_hex: String,
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<String>,
    /// Lines read but not yet matched by an `expect`.
    pending: VecDeque<String>,
    /// Every stdout line so far, for failure messages.
    seen: Vec<String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl GoActor {
    /// Starts the actor and waits for its session (`ready <lease-hex>`).
    pub async fn spawn(name: &str, endpoint: &str, ttl: u64) -> GoActor {
        let mut cmd = Command::new(etcdactor_bin());
        cmd.arg(format!("--endpoints={endpoint}"))
            .arg(format!("--ttl={ttl}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: only calls prctl(2), which is async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let mut child = cmd.spawn().expect("spawn the Go etcdactor");
        let stdin = child.stdin.take().expect("stdin");
        let mut out = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut err = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = out.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = err.next_line().await {
                if let Ok(mut s) = sink.lock() {
                    s.push(line);
                }
            }
        });
        let mut actor = GoActor {
            name: name.to_owned(),
            lease_hex: String::new(),
            child,
            stdin,
            lines,
            pending: VecDeque::new(),
            seen: Vec::new(),
            stderr,
        };
        let ready = actor.expect("ready ", Duration::from_secs(20)).await;
        actor.lease_hex = ready["ready ".len()..].to_owned();
        actor
    }

    /// The session's lease id.
    pub fn lease_id(&self) -> i64 {
        i64::from_str_radix(&self.lease_hex, 16).expect("lease hex")
    }

    /// Sends one command line.
    pub async fn send(&mut self, cmd: &str) {
        let line = format!("{cmd}\n");
        if let Err(e) = self.stdin.write_all(line.as_bytes()).await {
            panic!("{}: send {cmd:?}: {e}; {}", self.name, self.transcript());
        }
        self.stdin.flush().await.expect("flush stdin");
    }

    /// The first line (pending or new) that starts with `prefix`; other
    /// lines stay pending. Panics after `within`, with the transcript.
    pub async fn expect(&mut self, prefix: &str, within: Duration) -> String {
        if let Some(i) = self.pending.iter().position(|l| l.starts_with(prefix)) {
            return self.pending.remove(i).expect("index");
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(line)) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                    self.pending.push_back(line);
                }
                Ok(None) => panic!(
                    "{}: exited before printing {prefix:?}; {}",
                    self.name,
                    self.transcript()
                ),
                Err(_) => panic!(
                    "{}: no line {prefix:?} within {within:?}; {}",
                    self.name,
                    self.transcript()
                ),
            }
        }
    }

    /// Sends `cmd` and returns its answer (the first line with `prefix`).
    pub async fn ask(&mut self, cmd: &str, prefix: &str) -> String {
        self.send(cmd).await;
        self.expect(prefix, ANSWER).await
    }

    /// Asserts that no line starting with `prefix` arrives during `during`
    /// (nor is pending). A negative check: the only place to wait a fixed time.
    pub async fn expect_none(&mut self, prefix: &str, during: Duration) {
        let deadline = Instant::now() + during;
        loop {
            if let Some(l) = self.pending.iter().find(|l| l.starts_with(prefix)) {
                panic!("{}: unexpected {l:?}; {}", self.name, self.transcript());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(line)) => {
                    self.seen.push(line.clone());
                    self.pending.push_back(line);
                }
                Ok(None) => panic!("{}: exited; {}", self.name, self.transcript()),
                Err(_) => return,
            }
        }
    }

    /// Campaigns for `election` with `value` (in the background, in Go).
    pub async fn campaign(&mut self, election: &str, value: &str) {
        self.send(&format!("campaign {election} {value}")).await;
    }

    /// Waits for `elected <election> REV KEY`; returns (REV, KEY).
    pub async fn elected(&mut self, election: &str, within: Duration) -> (i64, String) {
        let line = self.expect(&format!("elected {election} "), within).await;
        let mut f = line.split_whitespace().skip(2);
        let rev = f.next().and_then(|r| r.parse().ok()).expect("REV");
        let key = f.next().expect("KEY").to_owned();
        (rev, key)
    }

    /// Takes the mutex `key` and waits for it; returns the lock's revision.
    pub async fn lock(&mut self, key: &str) -> i64 {
        self.send(&format!("lock {key}")).await;
        let line = self.expect(&format!("locked {key} "), ANSWER).await;
        line.rsplit(' ')
            .next()
            .and_then(|r| r.parse().ok())
            .expect("REV")
    }

    /// `Mutex.IsOwner()` checked in a txn.
    pub async fn owns(&mut self, key: &str) -> bool {
        let line = self
            .ask(&format!("owner {key}"), &format!("owner {key} "))
            .await;
        match line.rsplit(' ').next() {
            Some("true") => true,
            Some("false") => false,
            _ => panic!("{}: {line}; {}", self.name, self.transcript()),
        }
    }

    /// The session lease's remaining TTL as etcd reports it (`TimeToLive`).
    pub async fn lease_ttl(&mut self) -> i64 {
        let line = self.ask("lease", "lease ").await;
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.get(1), Some(&self.lease_hex.as_str()), "{line}");
        f.get(2).and_then(|t| t.parse().ok()).expect("TTL")
    }

    /// Everything it printed, and the tail of its stderr.
    pub fn transcript(&self) -> String {
        let err = self.stderr.lock().map(|e| e.clone()).unwrap_or_default();
        let tail = &err[err.len().saturating_sub(20)..];
        format!("stdout: {:?}; stderr: {tail:?}", self.seen)
    }

    /// Kills it (SIGKILL) and reaps it: the lease is left to expire.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}
