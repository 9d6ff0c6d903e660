//! One etcd member process: its flags, spawn with PR_SET_PDEATHSIG, readiness
//! from its own log line, a ring of its last stderr lines, stop/cont/kill.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_client::{Client, ConnectOptions};
use nix::sys::signal::{kill as send_signal, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;
use tokio::process::{Child, Command};
use tokio::sync::watch;

use super::procfs::proc_state;

/// How long one start (or restart) may take before it counts as failed.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How many of the most recent stderr lines of a member are kept.
pub const LOG_RING: usize = 50;
const ETCD_DEFAULT_BIN: &str = "/usr/bin/etcd";

/// `$TENURE_TEST_ETCD_BIN` (tests), `$TENURE_BENCH_ETCD_BIN` (benches),
/// else `/usr/bin/etcd`, else `etcd` on PATH.
pub fn etcd_bin() -> PathBuf {
    for var in ["TENURE_TEST_ETCD_BIN", "TENURE_BENCH_ETCD_BIN"] {
        if let Some(p) = std::env::var_os(var) {
            return PathBuf::from(p);
        }
    }
    if Path::new(ETCD_DEFAULT_BIN).exists() {
        PathBuf::from(ETCD_DEFAULT_BIN)
    } else {
        PathBuf::from("etcd")
    }
}

/// The first line of `etcd --version`.
pub fn etcd_version() -> String {
    std::process::Command::new(etcd_bin())
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

pub(super) fn unique_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "tenure-test-{}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

/// Data dirs (`kind`: etcd, patroni) go under `$TENURE_TEST_ETCD_TMPDIR` if
/// set, else `/dev/shm` if it exists, else the system temp dir. Note etcd 3.4
/// preallocates a 64 MB WAL segment plus a 64 MB spare (`0.tmp`), so each
/// member costs ~125 MB of RAM on tmpfs while it exists (a Patroni cluster of
/// three: about 200 MB). The pid in the name tells whose dir it is if a
/// SIGKILLed test binary leaves one behind.
pub(super) fn new_temp_dir(kind: &str) -> TempDir {
    let prefix = format!("tenure-{kind}-{}-", std::process::id());
    let mut parents: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("TENURE_TEST_ETCD_TMPDIR") {
        parents.push(PathBuf::from(p));
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        parents.push(shm.to_path_buf());
    }
    for parent in parents {
        if let Ok(dir) = tempfile::Builder::new().prefix(&prefix).tempdir_in(&parent) {
            return dir;
        }
    }
    tempfile::Builder::new()
        .prefix(&prefix)
        .tempdir()
        .unwrap_or_else(|e| panic!("create a temp dir for {kind} data: {e}"))
}

pub(super) fn connect_options() -> ConnectOptions {
    ConnectOptions::new().with_connect_timeout(Duration::from_secs(5))
}

pub(super) async fn connect(endpoints: &[String]) -> Client {
    Client::connect(endpoints, Some(connect_options()))
        .await
        .unwrap_or_else(|e| panic!("etcd client for {endpoints:?}: {e}"))
}

/// Extra flags for the members (TLS, authentication): see [`secure`].
#[derive(Clone, Debug, Default)]
pub struct EtcdFlags {
    /// Clients connect with https:// (the args carry `--cert-file` etc.).
    pub https: bool,
    pub args: Vec<OsString>,
    /// Another etcd binary than [`etcd_bin`]'s (a test of two versions).
    pub bin: Option<PathBuf>,
}

// ---------------------------------------------------------------------------
// One member process.
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Starting,
    Ready,
    Exited,
}

#[derive(Debug)]
pub(super) enum NotReady {
    /// The process exited (stderr closed) before it reported readiness.
    Exited,
    /// No readiness within [`READY_TIMEOUT`].
    Timeout,
}

pub(super) type LogRing = Arc<Mutex<VecDeque<String>>>;

pub(super) fn push_log(logs: &LogRing, line: String) {
    let mut ring = logs.lock().unwrap_or_else(|e| e.into_inner());
    if ring.len() >= LOG_RING {
        ring.pop_front();
    }
    ring.push_back(line);
}

pub(super) fn fmt_status(status: Option<ExitStatus>) -> String {
    status.map_or_else(|| "exit status unknown".to_owned(), |s| s.to_string())
}

pub(super) fn is_ready_line(line: &str, client_addr: &str) -> bool {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
        let msg = v.get("msg").and_then(|m| m.as_str()).unwrap_or("");
        let addr = v.get("address").and_then(|a| a.as_str()).unwrap_or("");
        return msg.starts_with("serving client traffic") && addr == client_addr;
    }
    // capnslog wording, in case someone switches the logger.
    line.contains("ready to serve client requests")
}

/// Runs on its own OS thread so draining never depends on the test's runtime
/// being polled.
pub(super) fn drain_stderr(
    stderr: std::fs::File,
    logs: LogRing,
    phase: watch::Sender<Phase>,
    client_addr: String,
) {
    let mut reader = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf).trim_end().to_owned();
                let ready =
                    *phase.borrow() == Phase::Starting && is_ready_line(&line, &client_addr);
                push_log(&logs, line);
                if ready {
                    phase.send_replace(Phase::Ready);
                }
            }
        }
    }
    phase.send_replace(Phase::Exited);
}

pub(super) async fn wait_ready(mut rx: watch::Receiver<Phase>) -> Result<Duration, NotReady> {
    let t0 = Instant::now();
    match tokio::time::timeout(READY_TIMEOUT, rx.wait_for(|p| *p != Phase::Starting)).await {
        Err(_) => Err(NotReady::Timeout),
        Ok(Err(_)) => Err(NotReady::Exited),
        Ok(Ok(p)) if *p == Phase::Ready => Ok(t0.elapsed()),
        Ok(Ok(_)) => Err(NotReady::Exited),
    }
}

pub(super) struct Member {
    pub(super) name: String,
    pub(super) client_port: u16,
    pub(super) peer_port: u16,
    pub(super) initial_cluster: String,
    pub(super) token: String,
    pub(super) data_dir: PathBuf,
    pub(super) child: Option<Child>,
    pub(super) stopped: AtomicBool,
    pub(super) logs: LogRing,
    pub(super) spawns: u32,
    pub(super) last_ready_after: Option<Duration>,
    pub(super) flags: EtcdFlags,
    /// Snapshot restores so far (each into a new data dir).
    pub(super) restores: u32,
    // Last field: removed only after Drop killed the process.
    pub(super) tmp: TempDir,
}

impl Member {
    pub(super) fn new(
        index: usize,
        client_port: u16,
        peer_port: u16,
        initial_cluster: &str,
        token: &str,
        flags: &EtcdFlags,
    ) -> Self {
        let tmp = new_temp_dir("etcd");
        Member {
            name: format!("m{index}"),
            client_port,
            peer_port,
            initial_cluster: initial_cluster.to_owned(),
            token: token.to_owned(),
            data_dir: tmp.path().join("data"),
            child: None,
            stopped: AtomicBool::new(false),
            logs: Arc::new(Mutex::new(VecDeque::with_capacity(LOG_RING))),
            spawns: 0,
            last_ready_after: None,
            flags: flags.clone(),
            restores: 0,
            tmp,
        }
    }

    pub(super) fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    pub(super) fn endpoint(&self) -> String {
        let scheme = if self.flags.https { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    pub(super) fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    pub(super) fn args(&self) -> Vec<OsString> {
        let client = self.endpoint();
        let peer = self.peer_url();
        let mut args: Vec<OsString> = Vec::new();
        let mut flag = |k: &str, v: OsString| {
            args.push(k.into());
            args.push(v);
        };
        flag("--name", self.name.clone().into());
        flag("--data-dir", self.data_dir.clone().into());
        flag("--listen-client-urls", client.clone().into());
        flag("--advertise-client-urls", client.into());
        flag("--listen-peer-urls", peer.clone().into());
        flag("--initial-advertise-peer-urls", peer.into());
        flag("--initial-cluster", self.initial_cluster.clone().into());
        // Ignored by etcd once the data dir holds a member (i.e. on restart).
        flag("--initial-cluster-state", "new".into());
        flag("--initial-cluster-token", self.token.clone().into());
        flag("--logger", "zap".into());
        // The readiness line is info level; lines are kept in memory only.
        flag("--log-level", "info".into());
        flag("--log-outputs", "stderr".into());
        args.extend(self.flags.args.iter().cloned());
        args
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "{} (client {}, peer {}, data {})",
            self.name,
            self.endpoint(),
            self.peer_url(),
            self.data_dir.display()
        )
    }

    pub(super) fn recent_logs(&self) -> Vec<String> {
        let ring = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        ring.iter().cloned().collect()
    }

    pub(super) fn logs_for_panic(&self) -> String {
        let lines = self.recent_logs();
        format!(
            "--- last {} stderr lines of {} ---\n{}",
            lines.len(),
            self.describe(),
            lines.join("\n")
        )
    }

    /// Spawns the process (must not be running) and returns the readiness receiver.
    pub(super) fn spawn(&mut self) -> Result<watch::Receiver<Phase>, String> {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let bin = self.flags.bin.clone().unwrap_or_else(etcd_bin);
        let mut cmd = Command::new(&bin);
        cmd.args(self.args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // etcd reads ETCD_* variables as flags; do not let the caller's leak in.
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("ETCD_") && k != "ETCD_UNSUPPORTED_ARCH" {
                cmd.env_remove(&key);
            }
        }
        // SAFETY: only calls prctl(2), which is async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("spawn {} for {}: {e}", bin.display(), self.name))?;
        self.spawns += 1;
        push_log(
            &self.logs,
            format!(
                "--- harness: spawn #{} of {} as pid {:?} ---",
                self.spawns,
                self.name,
                child.id()
            ),
        );
        let stderr = child
            .stderr
            .take()
            .expect("piped stderr")
            .into_owned_fd()
            .map_err(|e| format!("stderr of {}: {e}", self.name))?;
        let (tx, rx) = watch::channel(Phase::Starting);
        let logs = Arc::clone(&self.logs);
        let addr = self.client_addr();
        std::thread::Builder::new()
            .name(format!("etcd-{}-stderr", self.name))
            .spawn(move || drain_stderr(std::fs::File::from(stderr), logs, tx, addr))
            .map_err(|e| format!("stderr thread for {}: {e}", self.name))?;
        self.child = Some(child);
        self.stopped.store(false, Ordering::SeqCst);
        Ok(rx)
    }

    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    pub(super) fn signal(&self, sig: Signal) {
        // `Child::id()` is None once reaped, and an unreaped child's pid cannot
        // be reused, so this only ever signals our own process.
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("{} is not running; cannot send {sig}", self.name));
        send_signal(Pid::from_raw(pid as i32), sig)
            .unwrap_or_else(|e| panic!("send {sig} to {} (pid {pid}): {e}", self.name));
    }

    /// SIGSTOP, then wait (bounded) until the kernel reports it stopped, so
    /// callers can rely on it being frozen when this returns.
    pub(super) fn stop(&self) {
        self.signal(Signal::SIGSTOP);
        self.stopped.store(true, Ordering::SeqCst);
        self.await_proc_state(|s| s == 'T', "stopped");
    }

    /// SIGCONT, then wait (bounded) until it is no longer stopped.
    pub(super) fn cont(&self) {
        self.signal(Signal::SIGCONT);
        self.stopped.store(false, Ordering::SeqCst);
        self.await_proc_state(|s| s != 'T', "continued");
    }

    /// Signal delivery is asynchronous: poll /proc/<pid>/stat for up to 2 s.
    pub(super) fn await_proc_state(&self, want: impl Fn(char) -> bool, what: &str) {
        let Some(pid) = self.pid() else { return };
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match proc_state(pid) {
                Some(s) if !want(s) => {}
                _ => return, // reached, or /proc unreadable (nothing to wait for)
            }
            if Instant::now() >= deadline {
                panic!("{} (pid {pid}) not {what} within 2s", self.name);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub(super) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// SIGCONT (if stopped), SIGKILL and reap. No-op if not running.
    pub(super) async fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Some(pid) = child.id() {
            if self.stopped.swap(false, Ordering::SeqCst) {
                let _ = send_signal(Pid::from_raw(pid as i32), Signal::SIGCONT);
            }
        }
        let _ = child.start_kill();
        let status = child.wait().await.ok();
        push_log(
            &self.logs,
            format!(
                "--- harness: {} reaped: {} ---",
                self.name,
                fmt_status(status)
            ),
        );
        status
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id() {
            let pid = Pid::from_raw(pid as i32);
            if self.stopped.load(Ordering::SeqCst) {
                let _ = send_signal(pid, Signal::SIGCONT);
            }
            let _ = send_signal(pid, Signal::SIGKILL);
            // Reap (bounded) so the process is gone before its TempDir is removed.
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                match child.try_wait() {
                    Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                    _ => break,
                }
            }
        }
        // `child` drops here: kill_on_drop + tokio's orphan reaping as backstop.
    }
}
