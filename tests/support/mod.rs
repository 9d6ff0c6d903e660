#![allow(dead_code)]
//! Test harness: real `etcd` processes on loopback, no mocks.
//!
//! * [`Etcd`] — one etcd member (internally a 1-member [`EtcdCluster`]-style group).
//! * [`EtcdCluster`] — three members started concurrently.
//!
//! Every process is started by this module, bound to 127.0.0.1 only, has its
//! data dir in a `TempDir` (under `/dev/shm` when available) and is SIGKILLed
//! (after a SIGCONT, if it was stopped) when its owner is dropped.
//!
//! Readiness is an event, not a sleep: etcd runs with `--logger zap
//! --log-level info`, its stderr is read line by line on a dedicated thread
//! and a member counts as ready when it logs
//! `"msg":"serving client traffic insecurely; this is strongly discouraged!"`
//! with `"address":"127.0.0.1:<client port>"`. etcd 3.4 with the zap logger
//! never prints "ready to serve client requests" (that is the capnslog
//! wording) and the zap line above is at *info* level, so `--log-level warn`
//! would hide it. The line is logged after etcd's `ReadyNotify()` fired (the
//! member published itself through raft, i.e. a quorum exists) and the gRPC
//! server was handed the already-bound listener.
//!
//! The stderr reader keeps draining after readiness (so the pipe never fills,
//! even if a test blocks its runtime) and keeps the last [`LOG_RING`] lines,
//! which are put into panic messages and available via `recent_logs()`.
//!
//! Note: each etcd child gets `PR_SET_PDEATHSIG(SIGKILL)`, so it also dies if
//! the test binary is killed; the signal fires when the *thread* that spawned
//! it exits, so do not start an `Etcd` on a short-lived thread and share it.
//!
//! Environment overrides: `TENURE_TEST_ETCD_BIN` (default `/usr/bin/etcd`),
//! `TENURE_TEST_ETCD_TMPDIR` (parent of the data dirs; default `/dev/shm`).

pub mod netns;
pub mod proxy;
mod serve;
mod webdriver;
#[allow(unused_imports)]
pub use serve::{metric_value, Serve};
#[allow(unused_imports)]
pub use webdriver::Browser;

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
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
use tokio::task::JoinSet;

/// How long one start (or restart) may take before it counts as failed.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How many times a fresh start is attempted (with new ports each time).
pub const START_ATTEMPTS: usize = 3;
/// How many of the most recent stderr lines of a member are kept.
pub const LOG_RING: usize = 50;
/// How long [`EtcdCluster::leader_index`] waits for an agreed leader.
pub const LEADER_TIMEOUT: Duration = Duration::from_secs(20);

const CLUSTER_SIZE: usize = 3;
const ETCD_DEFAULT_BIN: &str = "/usr/bin/etcd";

/// The `tenure` binary built by cargo for this integration test.
pub fn tenure_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tenure"))
}

/// A loopback TCP port that was free a moment ago (bind 127.0.0.1:0, release).
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct loopback ports; all are held until all are picked.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| {
            TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
                .expect("bind 127.0.0.1:0 to pick a free port")
        })
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local_addr").port())
        .collect()
}

fn etcd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TENURE_TEST_ETCD_BIN") {
        return PathBuf::from(p);
    }
    if Path::new(ETCD_DEFAULT_BIN).exists() {
        PathBuf::from(ETCD_DEFAULT_BIN)
    } else {
        PathBuf::from("etcd")
    }
}

fn unique_token() -> String {
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

/// Data dirs go under `$TENURE_TEST_ETCD_TMPDIR` if set, else `/dev/shm` if it
/// exists, else the system temp dir. Note etcd 3.4 preallocates a 64 MB WAL
/// segment plus a 64 MB spare (`0.tmp`), so each member costs ~125 MB of RAM
/// on tmpfs while it exists. The pid in the name tells whose dir it is if a
/// SIGKILLed test binary leaves one behind.
fn new_temp_dir() -> TempDir {
    let prefix = format!("tenure-etcd-{}-", std::process::id());
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
        .expect("create temp dir for etcd data")
}

fn connect_options() -> ConnectOptions {
    ConnectOptions::new().with_connect_timeout(Duration::from_secs(5))
}

async fn connect(endpoints: &[String]) -> Client {
    Client::connect(endpoints, Some(connect_options()))
        .await
        .unwrap_or_else(|e| panic!("etcd client for {endpoints:?}: {e}"))
}

// ---------------------------------------------------------------------------
// One member process.
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Starting,
    Ready,
    Exited,
}

#[derive(Debug)]
enum NotReady {
    /// The process exited (stderr closed) before it reported readiness.
    Exited,
    /// No readiness within [`READY_TIMEOUT`].
    Timeout,
}

type LogRing = Arc<Mutex<VecDeque<String>>>;

fn push_log(logs: &LogRing, line: String) {
    let mut ring = logs.lock().unwrap_or_else(|e| e.into_inner());
    if ring.len() >= LOG_RING {
        ring.pop_front();
    }
    ring.push_back(line);
}

/// Single-letter state from /proc/<pid>/stat ('T' = stopped, 'Z' = zombie).
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the parenthesised command name, which may contain ')'.
    stat.get(stat.rfind(')')? + 2..)?.chars().next()
}

fn fmt_status(status: Option<ExitStatus>) -> String {
    status.map_or_else(|| "exit status unknown".to_owned(), |s| s.to_string())
}

fn is_ready_line(line: &str, client_addr: &str) -> bool {
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
fn drain_stderr(
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

async fn wait_ready(mut rx: watch::Receiver<Phase>) -> Result<Duration, NotReady> {
    let t0 = Instant::now();
    match tokio::time::timeout(READY_TIMEOUT, rx.wait_for(|p| *p != Phase::Starting)).await {
        Err(_) => Err(NotReady::Timeout),
        Ok(Err(_)) => Err(NotReady::Exited),
        Ok(Ok(p)) if *p == Phase::Ready => Ok(t0.elapsed()),
        Ok(Ok(_)) => Err(NotReady::Exited),
    }
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    initial_cluster: String,
    token: String,
    data_dir: PathBuf,
    child: Option<Child>,
    stopped: AtomicBool,
    logs: LogRing,
    spawns: u32,
    last_ready_after: Option<Duration>,
    // Last field: removed only after Drop killed the process.
    tmp: TempDir,
}

impl Member {
    fn new(
        index: usize,
        client_port: u16,
        peer_port: u16,
        initial_cluster: &str,
        token: &str,
    ) -> Self {
        let tmp = new_temp_dir();
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
            tmp,
        }
    }

    fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    fn args(&self) -> Vec<OsString> {
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
        args
    }

    fn describe(&self) -> String {
        format!(
            "{} (client {}, peer {}, data {})",
            self.name,
            self.endpoint(),
            self.peer_url(),
            self.data_dir.display()
        )
    }

    fn recent_logs(&self) -> Vec<String> {
        let ring = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        ring.iter().cloned().collect()
    }

    fn logs_for_panic(&self) -> String {
        let lines = self.recent_logs();
        format!(
            "--- last {} stderr lines of {} ---\n{}",
            lines.len(),
            self.describe(),
            lines.join("\n")
        )
    }

    /// Spawns the process (must not be running) and returns the readiness receiver.
    fn spawn(&mut self) -> Result<watch::Receiver<Phase>, String> {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let mut cmd = Command::new(etcd_bin());
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
            .map_err(|e| format!("spawn {} for {}: {e}", etcd_bin().display(), self.name))?;
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

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    fn signal(&self, sig: Signal) {
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
    fn stop(&self) {
        self.signal(Signal::SIGSTOP);
        self.stopped.store(true, Ordering::SeqCst);
        self.await_proc_state(|s| s == 'T', "stopped");
    }

    /// SIGCONT, then wait (bounded) until it is no longer stopped.
    fn cont(&self) {
        self.signal(Signal::SIGCONT);
        self.stopped.store(false, Ordering::SeqCst);
        self.await_proc_state(|s| s != 'T', "continued");
    }

    /// Signal delivery is asynchronous: poll /proc/<pid>/stat for up to 2 s.
    fn await_proc_state(&self, want: impl Fn(char) -> bool, what: &str) {
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

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// SIGCONT (if stopped), SIGKILL and reap. No-op if not running.
    async fn kill(&mut self) -> Option<ExitStatus> {
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

// ---------------------------------------------------------------------------
// A group of members: shared by Etcd (n = 1) and EtcdCluster (n = 3).
// ---------------------------------------------------------------------------

struct Group {
    members: Vec<Member>,
}

struct StartFailure {
    /// Worth retrying on the same ports (every failure was an early exit).
    retryable: bool,
    message: String,
}

impl Group {
    /// Fresh members on fresh ports; up to [`START_ATTEMPTS`] tries.
    async fn launch(n: usize) -> Group {
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            let ports = free_ports(2 * n);
            let token = unique_token();
            let initial_cluster = (0..n)
                .map(|i| format!("m{i}=http://127.0.0.1:{}", ports[2 * i + 1]))
                .collect::<Vec<_>>()
                .join(",");
            let members = (0..n)
                .map(|i| Member::new(i, ports[2 * i], ports[2 * i + 1], &initial_cluster, &token))
                .collect();
            let mut group = Group { members };
            let all: Vec<usize> = (0..n).collect();
            match group.start(&all).await {
                Ok(()) => return group,
                Err(f) => {
                    failures.push(format!("attempt {attempt}/{START_ATTEMPTS}: {}", f.message))
                }
            }
        }
        panic!(
            "etcd ({n} member(s)) failed to start {START_ATTEMPTS} times:\n{}",
            failures.join("\n\n")
        );
    }

    /// Spawns the given members concurrently and awaits all of them ready.
    /// On failure the spawned members are killed again.
    async fn start(&mut self, which: &[usize]) -> Result<(), StartFailure> {
        let mut waits = JoinSet::new();
        let mut spawn_error = None;
        for &i in which {
            match self.members[i].spawn() {
                Ok(rx) => {
                    waits.spawn(async move { (i, wait_ready(rx).await) });
                }
                Err(e) => {
                    spawn_error = Some(e);
                    break;
                }
            }
        }
        let mut failed: Vec<(usize, NotReady)> = Vec::new();
        if spawn_error.is_none() {
            while let Some(joined) = waits.join_next().await {
                let (i, res) = joined.expect("readiness waiter panicked");
                match res {
                    Ok(took) => self.members[i].last_ready_after = Some(took),
                    Err(why) => {
                        failed.push((i, why));
                        break; // fail fast; the others are killed below
                    }
                }
            }
        }
        waits.abort_all();
        if spawn_error.is_none() && failed.is_empty() {
            return Ok(());
        }
        let mut message = String::new();
        if let Some(e) = &spawn_error {
            message.push_str(e);
            message.push('\n');
        }
        let mut retryable = spawn_error.is_none();
        for &i in which {
            let status = self.members[i].kill().await;
            if let Some((_, why)) = failed.iter().find(|(j, _)| *j == i) {
                retryable &= matches!(why, NotReady::Exited);
                let what = match why {
                    NotReady::Exited => format!("exited before ready ({})", fmt_status(status)),
                    NotReady::Timeout => format!("not ready within {READY_TIMEOUT:?}"),
                };
                message.push_str(&format!("{}: {what}\n", self.members[i].describe()));
            }
        }
        for &i in which {
            message.push_str(&self.members[i].logs_for_panic());
            message.push('\n');
        }
        Err(StartFailure { retryable, message })
    }

    /// Kill (if running) and start again on the same data dirs and ports.
    async fn restart(&mut self, which: &[usize]) {
        for &i in which {
            self.members[i].kill().await;
        }
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            match self.start(which).await {
                Ok(()) => return,
                Err(f) => {
                    failures.push(format!("attempt {attempt}/{START_ATTEMPTS}: {}", f.message));
                    if !f.retryable {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
        panic!(
            "restart of etcd member(s) {which:?} failed (in a cluster a member is ready only \
             once a quorum is up):\n{}",
            failures.join("\n\n")
        );
    }

    fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }
}

// ---------------------------------------------------------------------------
// Public API.
// ---------------------------------------------------------------------------

/// One real etcd process on loopback.
pub struct Etcd {
    group: Group,
}

impl Etcd {
    /// Starts etcd and waits until it serves clients (panics after
    /// [`START_ATTEMPTS`] tries of [`READY_TIMEOUT`] each, with its logs).
    pub async fn start() -> Etcd {
        Etcd {
            group: Group::launch(1).await,
        }
    }

    fn m(&self) -> &Member {
        &self.group.members[0]
    }

    /// e.g. `http://127.0.0.1:PORT`; stays the same across restarts.
    pub fn endpoint(&self) -> String {
        self.m().endpoint()
    }

    pub fn client_port(&self) -> u16 {
        self.m().client_port
    }

    pub fn peer_port(&self) -> u16 {
        self.m().peer_port
    }

    /// A new client connected to this etcd.
    pub async fn client(&self) -> Client {
        connect(&[self.endpoint()]).await
    }

    /// Pid of the running process; `None` after `kill()`.
    pub fn pid(&self) -> Option<u32> {
        self.m().pid()
    }

    /// SIGSTOP (freeze). Panics if not running.
    pub fn stop(&self) {
        self.m().stop()
    }

    /// SIGCONT (thaw). Panics if not running.
    pub fn cont(&self) {
        self.m().cont()
    }

    pub fn is_stopped(&self) -> bool {
        self.m().is_stopped()
    }

    /// SIGKILL and reap. No-op if not running.
    pub async fn kill(&mut self) {
        self.group.members[0].kill().await;
    }

    /// Start again on the same data dir and ports (kills first if running)
    /// and wait until ready.
    pub async fn restart(&mut self) {
        self.group.restart(&[0]).await
    }

    pub fn data_dir(&self) -> &Path {
        &self.m().data_dir
    }

    /// The last [`LOG_RING`] stderr lines (JSON, zap format) plus harness markers.
    pub fn recent_logs(&self) -> Vec<String> {
        self.m().recent_logs()
    }

    /// How long the last (re)start took from spawn to readiness.
    pub fn last_ready_after(&self) -> Option<Duration> {
        self.m().last_ready_after
    }
}

/// Three real etcd members on loopback forming one cluster.
pub struct EtcdCluster {
    group: Group,
    /// etcd member id of member `i` (stable across restarts).
    member_ids: Vec<u64>,
}

impl EtcdCluster {
    /// Starts three members concurrently and waits until all serve clients.
    pub async fn start() -> EtcdCluster {
        let group = Group::launch(CLUSTER_SIZE).await;
        let mut client = connect(&group.endpoints()).await;
        let list = tokio::time::timeout(Duration::from_secs(10), client.member_list())
            .await
            .expect("member_list timed out")
            .expect("member_list");
        let member_ids = group
            .members
            .iter()
            .map(|m| {
                list.members()
                    .iter()
                    .find(|x| x.name() == m.name)
                    .unwrap_or_else(|| panic!("{} missing from member list", m.name))
                    .id()
            })
            .collect();
        EtcdCluster { group, member_ids }
    }

    pub fn len(&self) -> usize {
        self.group.members.len()
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.group.endpoints()
    }

    pub fn endpoint(&self, i: usize) -> String {
        self.group.members[i].endpoint()
    }

    /// All endpoints except member `i`'s.
    pub fn endpoints_except(&self, i: usize) -> Vec<String> {
        (0..self.len())
            .filter(|&j| j != i)
            .map(|j| self.endpoint(j))
            .collect()
    }

    /// A client over all endpoints.
    pub async fn client(&self) -> Client {
        connect(&self.endpoints()).await
    }

    /// A client over the endpoints of the given members only.
    pub async fn client_for(&self, members: &[usize]) -> Client {
        let eps: Vec<String> = members.iter().map(|&i| self.endpoint(i)).collect();
        connect(&eps).await
    }

    pub fn pid(&self, i: usize) -> Option<u32> {
        self.group.members[i].pid()
    }

    /// etcd's member id of member `i`.
    pub fn member_id(&self, i: usize) -> u64 {
        self.member_ids[i]
    }

    /// SIGSTOP member `i`. Panics if not running.
    pub fn stop(&self, i: usize) {
        self.group.members[i].stop()
    }

    /// SIGCONT member `i`. Panics if not running.
    pub fn cont(&self, i: usize) {
        self.group.members[i].cont()
    }

    pub fn is_stopped(&self, i: usize) -> bool {
        self.group.members[i].is_stopped()
    }

    /// SIGKILL and reap member `i`. No-op if not running.
    pub async fn kill(&mut self, i: usize) {
        self.group.members[i].kill().await;
    }

    /// Start member `i` again (same data dir and ports; kills first if
    /// running) and wait until it is ready. Readiness needs a quorum, so to
    /// bring back a majority use [`EtcdCluster::restart_many`].
    pub async fn restart(&mut self, i: usize) {
        self.group.restart(&[i]).await
    }

    /// Restart several members concurrently.
    pub async fn restart_many(&mut self, which: &[usize]) {
        self.group.restart(which).await
    }

    pub fn data_dir(&self, i: usize) -> &Path {
        &self.group.members[i].data_dir
    }

    pub fn recent_logs(&self, i: usize) -> Vec<String> {
        self.group.members[i].recent_logs()
    }

    /// Index of the current leader: polls every running, not-stopped member's
    /// `status()` until all that answer agree on one leader that is itself
    /// among them. Panics after [`LEADER_TIMEOUT`].
    pub async fn leader_index(&self) -> usize {
        let deadline = Instant::now() + LEADER_TIMEOUT;
        loop {
            let mut views: Vec<(usize, u64)> = Vec::new();
            let mut errors: Vec<String> = Vec::new();
            for (i, m) in self.group.members.iter().enumerate() {
                if m.pid().is_none() || m.is_stopped() {
                    continue;
                }
                match member_status(&m.endpoint()).await {
                    Ok(leader) => views.push((i, leader)),
                    Err(e) => errors.push(format!("m{i}: {e}")),
                }
            }
            if let Some((_, leader)) = views.first() {
                let agreed = *leader != 0 && views.iter().all(|(_, l)| l == leader);
                if agreed {
                    if let Some(j) = self.member_ids.iter().position(|id| id == leader) {
                        if views.iter().any(|(i, _)| *i == j) {
                            return j;
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                panic!(
                    "no agreed etcd leader within {LEADER_TIMEOUT:?}; member ids {:x?}, \
                     views (member, leader) {views:x?}, errors {errors:?}",
                    self.member_ids
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn member_status(endpoint: &str) -> Result<u64, String> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(1));
    let mut client = Client::connect([endpoint], Some(opts))
        .await
        .map_err(|e| e.to_string())?;
    let status = tokio::time::timeout(Duration::from_secs(2), client.status())
        .await
        .map_err(|_| "status timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    Ok(status.leader())
}
