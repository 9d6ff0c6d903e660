//! The processes a measurement starts: one etcd member and `tenure serve`,
//! both on loopback, both killed (SIGKILL) and reaped when dropped. Ideas
//! from tests/support (readiness from etcd's own log line, data dir on
//! /dev/shm, PR_SET_PDEATHSIG), kept here so the benches do not depend on
//! the test harness as it changes.
//!
//! Only processes started here are ever signalled, by their own pid.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The `tenure` binary cargo built beside this bench (release for
/// `cargo bench`, debug for `cargo test`).
pub fn tenure_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tenure"))
}

pub fn etcd_bin() -> PathBuf {
    std::env::var_os("TENURE_BENCH_ETCD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"))
}

/// The first line of `etcd --version`.
pub fn etcd_version() -> String {
    Command::new(etcd_bin())
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| {
            TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0")
        })
        .collect();
    ls.iter()
        .map(|l| l.local_addr().expect("addr").port())
        .collect()
}

/// A child process that is SIGKILLed and reaped on drop.
struct Owned {
    child: Child,
}

impl Owned {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                _ => break,
            }
        }
    }
}

fn spawn_owned(cmd: &mut Command) -> std::io::Result<Owned> {
    use std::os::unix::process::CommandExt;
    // SAFETY: only prctl(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    cmd.spawn().map(|child| Owned { child })
}

/// Reads `stream` line by line on its own thread, keeping the last lines,
/// and reports the first line for which `pick` returns something.
fn drain<R: std::io::Read + Send + 'static>(
    stream: R,
    pick: impl Fn(&str) -> Option<String> + Send + 'static,
) -> (std::sync::mpsc::Receiver<String>, Arc<Mutex<Vec<String>>>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let logs = Arc::new(Mutex::new(Vec::new()));
    let sink = logs.clone();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if !sent {
                if let Some(v) = pick(&line) {
                    let _ = tx.send(v);
                    sent = true;
                }
            }
            let mut l = sink.lock().unwrap_or_else(|p| p.into_inner());
            if l.len() >= 200 {
                l.remove(0);
            }
            l.push(line);
        }
    });
    (rx, logs)
}

/// One etcd member on loopback, data on /dev/shm.
pub struct Etcd {
    proc: Owned,
    pub client_port: u16,
    _logs: Arc<Mutex<Vec<String>>>,
    // Last: removed after the process is gone.
    _dir: tempfile::TempDir,
}

impl Etcd {
    pub async fn start() -> Result<Etcd> {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start() {
                Ok(e) => return Ok(e),
                Err(e) => last = format!("{e:#}"),
            }
        }
        bail!("etcd did not start: {last}")
    }

    fn try_start() -> Result<Etcd> {
        let parent = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = tempfile::Builder::new()
            .prefix(&format!("tenure-bench-etcd-{}-", std::process::id()))
            .tempdir_in(parent)?;
        let ports = free_ports(2);
        let client = format!("http://127.0.0.1:{}", ports[0]);
        let peer = format!("http://127.0.0.1:{}", ports[1]);
        let mut cmd = Command::new(etcd_bin());
        cmd.args(["--name", "bench", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("bench={peer}")])
            .args(["--initial-cluster-state", "new"])
            .args([
                "--logger",
                "zap",
                "--log-level",
                "info",
                "--log-outputs",
                "stderr",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(&k);
            }
        }
        let mut proc = spawn_owned(&mut cmd).context("spawning etcd")?;
        let stderr = proc
            .child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("no stderr"))?;
        let addr = format!("127.0.0.1:{}", ports[0]);
        let (ready, logs) = drain(stderr, move |line| {
            (line.contains("serving client traffic") && line.contains(&format!("\"{addr}\"")))
                .then(String::new)
        });
        match ready.recv_timeout(Duration::from_secs(20)) {
            Ok(_) => Ok(Etcd {
                proc,
                client_port: ports[0],
                _logs: logs,
                _dir: dir,
            }),
            Err(_) => {
                let l = logs.lock().map(|l| l.join("\n")).unwrap_or_default();
                bail!("etcd not ready within 20 s:\n{l}")
            }
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

/// `tenure serve --listen 127.0.0.1:0 --db DB` against `endpoint`.
pub struct Serve {
    proc: Owned,
    pub addr: String,
    /// When the process was spawned.
    pub spawned: Instant,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Serve {
    pub fn start(endpoint: &str, db: &Path, extra: &[&str]) -> Result<Serve> {
        let mut cmd = Command::new(tenure_bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(extra)
            .env("TENURE_ENDPOINTS", endpoint)
            .env_remove("TENURE_PREFIX")
            .env_remove("TENURE_LOG")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let spawned = Instant::now();
        let mut proc = spawn_owned(&mut cmd).context("spawning tenure serve")?;
        let stderr = proc
            .child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("no stderr"))?;
        let (addr, logs) = drain(stderr, |line| {
            line.split("serving on http://")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .map(str::to_owned)
        });
        match addr.recv_timeout(Duration::from_secs(20)) {
            Ok(addr) => Ok(Serve {
                proc,
                addr,
                spawned,
                logs,
            }),
            Err(_) => {
                let l = logs.lock().map(|l| l.join("\n")).unwrap_or_default();
                bail!("tenure serve did not announce its address within 20 s:\n{l}")
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    pub fn logs(&self) -> String {
        self.logs.lock().map(|l| l.join("\n")).unwrap_or_default()
    }
}

/// The value of one sample line (`name{labels}` exactly as rendered, or a
/// bare name), if present.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}
