//! Network faults that need a private network namespace: an etcd cluster
//! whose members listen on 127.0.0.{1,2,3} inside a namespace of the test's
//! own, and iptables rules that exist only there.
//!
//! * [`in_netns`] runs an async test body on a dedicated OS thread that first
//!   calls `unshare(CLONE_NEWNET)` (what `unshare -n` does) and brings `lo`
//!   up. Sockets opened by that thread, and processes it spawns (etcd,
//!   `tenure serve`, iptables), live in the new namespace; the rest of the
//!   test binary is unaffected. The namespace disappears with its last
//!   process: nothing to clean up on the host, nothing but 127.0.0.x used.
//! * [`NsCluster`] starts etcd members on 127.0.0.{1..n}:2379 (peers :2380),
//!   each as its own uid (`setpriv`), so that iptables can tell their
//!   traffic apart: every connection a member's sockets touch is connmarked
//!   (`-m owner --uid-owner`), and [`NsCluster::partition`] drops every packet
//!   of every connection of one member, both directions, old and new.
//!   (All loopback traffic leaves from 127.0.0.1 whatever address the
//!   destination has, so addresses alone cannot isolate a member.)
//! * [`drop_connections_of`] makes the TCP connections a process holds to a
//!   port half-open (iptables DROP on exactly those 4-tuples), while new
//!   connections to the same port still work.
//!
//! Needs root and the `iptables` (Debian package `iptables`), `ip`
//! (`iproute2`) and `setpriv` (`util-linux`) commands; [`require`] fails the
//! test with a message naming the package when one is missing.

use std::future::Future;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Commands the namespace tests run, and the Debian package of each.
pub const TOOLS: &[(&str, &str)] = &[
    ("iptables", "iptables"),
    ("ip", "iproute2"),
    ("setpriv", "util-linux"),
];

/// The first uid the members run as (member `i` runs as `MEMBER_UID + i`).
/// Plain numbers: no passwd entry is needed.
pub const MEMBER_UID: u32 = 47_001;

pub fn which(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// Fails the test, naming the package to install, unless every tool is
/// there and the test runs as root.
pub fn require(scenario: &str, tools: &[(&str, &str)]) {
    let missing: Vec<String> = tools
        .iter()
        .filter(|(cmd, _)| which(cmd).is_none())
        .map(|(cmd, pkg)| format!("`{cmd}` (Debian package `{pkg}`)"))
        .collect();
    assert!(
        missing.is_empty(),
        "{scenario} needs {}: install with `apt-get install {}` (scripts/setup.sh lists them)",
        missing.join(", "),
        tools
            .iter()
            .filter(|(cmd, _)| which(cmd).is_none())
            .map(|(_, pkg)| *pkg)
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(
        // SAFETY: geteuid(2) cannot fail and touches no memory.
        unsafe { nix::libc::geteuid() } == 0,
        "{scenario} needs root (a private network namespace and iptables rules inside it)"
    );
}

/// Runs `body` on a new OS thread inside a new network namespace, on a
/// current-thread runtime, and returns its output (a panic is re-raised).
pub fn in_netns<F, Fut, T>(body: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
    T: Send + 'static,
{
    let handle = std::thread::Builder::new()
        .name("tenure-netns".into())
        .spawn(move || {
            // SAFETY: unshare(2) with CLONE_NEWNET only changes this thread's
            // network namespace; no memory is touched.
            let rc = unsafe { nix::libc::unshare(nix::libc::CLONE_NEWNET) };
            assert_eq!(
                rc,
                0,
                "unshare(CLONE_NEWNET): {} (needs root)",
                std::io::Error::last_os_error()
            );
            run(&["ip", "link", "set", "lo", "up"]);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(body())
        })
        .expect("spawn the namespace thread");
    match handle.join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Runs a command (in the calling thread's namespace) and panics on failure.
pub fn run(argv: &[&str]) -> String {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(
        out.status.success(),
        "{argv:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn iptables(args: &[&str]) {
    let mut argv = vec!["iptables", "-w"];
    argv.extend_from_slice(args);
    run(&argv);
}

/// The local ports of `pid`'s established TCP connections to `remote_port`
/// (read from /proc, in the process's namespace).
pub fn tcp_connections(pid: u32, remote_port: u16) -> Vec<u16> {
    let mut inodes = std::collections::HashSet::new();
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let t = target.to_string_lossy();
                if let Some(inode) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                    inodes.insert(inode.to_owned());
                }
            }
        }
    }
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    let mut ports = Vec::new();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != "01" || !inodes.contains(f[9]) {
            continue;
        }
        let port = |a: &str| {
            a.rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
        };
        if port(f[2]) == Some(remote_port) {
            if let Some(local) = port(f[1]) {
                ports.push(local);
            }
        }
    }
    ports
}

/// iptables DROP, both directions, on each established connection `pid`
/// holds to `remote_port`: those connections become half-open (no RST, no
/// FIN: packets vanish) while new ones pass. Returns the local ports cut.
pub fn drop_connections_of(pid: u32, remote_port: u16) -> Vec<u16> {
    let ports = tcp_connections(pid, remote_port);
    let remote = remote_port.to_string();
    for p in &ports {
        let local = p.to_string();
        iptables(&[
            "-A", "OUTPUT", "-p", "tcp", "--sport", &local, "--dport", &remote, "-j", "DROP",
        ]);
        iptables(&[
            "-A", "OUTPUT", "-p", "tcp", "--sport", &remote, "--dport", &local, "-j", "DROP",
        ]);
    }
    ports
}

struct NsMember {
    ip: String,
    uid: u32,
    data: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    stopped: bool,
}

impl NsMember {
    fn endpoint(&self) -> String {
        format!("http://{}:2379", self.ip)
    }
}

/// etcd members on 127.0.0.{1..n} inside the current thread's namespace.
pub struct NsCluster {
    members: Vec<NsMember>,
    initial: String,
    token: String,
    _dir: tempfile::TempDir,
}

impl NsCluster {
    /// Starts `n` members and waits until they agree on a leader. Call from
    /// inside [`in_netns`].
    pub async fn start(n: usize) -> NsCluster {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tenure-netns-{}-", std::process::id()))
            .tempdir_in(if Path::new("/dev/shm").is_dir() {
                "/dev/shm"
            } else {
                "/tmp"
            })
            .expect("tempdir");
        // The members run as other uids: they must be able to enter it.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod namespace dir");
        let members: Vec<NsMember> = (0..n)
            .map(|i| {
                let uid = MEMBER_UID + i as u32;
                let home = dir.path().join(format!("m{i}"));
                std::fs::create_dir(&home).expect("member dir");
                std::os::unix::fs::chown(&home, Some(uid), Some(uid)).expect("chown member dir");
                NsMember {
                    ip: format!("127.0.0.{}", i + 1),
                    uid,
                    data: home.join("data"),
                    log: dir.path().join(format!("m{i}.log")),
                    child: None,
                    stopped: false,
                }
            })
            .collect();
        let initial = members
            .iter()
            .enumerate()
            .map(|(i, m)| format!("m{i}=http://{}:2380", m.ip))
            .collect::<Vec<_>>()
            .join(",");
        for (i, m) in members.iter().enumerate() {
            // Mark every connection this member's sockets send on.
            iptables(&[
                "-t",
                "mangle",
                "-A",
                "OUTPUT",
                "-m",
                "owner",
                "--uid-owner",
                &m.uid.to_string(),
                "-j",
                "CONNMARK",
                "--set-mark",
                &(i + 1).to_string(),
            ]);
        }
        let mut c = NsCluster {
            members,
            initial,
            token: format!("tenure-netns-{}", std::process::id()),
            _dir: dir,
        };
        for i in 0..n {
            c.spawn(i);
        }
        c.wait_ready().await;
        c
    }

    fn spawn(&mut self, i: usize) {
        let m = &mut self.members[i];
        assert!(m.child.is_none());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .expect("member log");
        let client = m.endpoint();
        let peer = format!("http://{}:2380", m.ip);
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid",
            &m.uid.to_string(),
            "--regid",
            &m.uid.to_string(),
            "--clear-groups",
            "--",
            "etcd",
            "--name",
            &format!("m{i}"),
            "--data-dir",
        ])
        .arg(&m.data)
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &self.initial,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            &self.token,
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(&key);
            }
        }
        // SAFETY: only prctl(2) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        m.child = Some(cmd.spawn().expect("spawn etcd under setpriv"));
        m.stopped = false;
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut ok = 0;
            for m in self
                .members
                .iter()
                .filter(|m| m.child.is_some() && !m.stopped)
            {
                if status_leader(&m.endpoint()).await.is_some_and(|l| l != 0) {
                    ok += 1;
                }
            }
            if ok
                == self
                    .members
                    .iter()
                    .filter(|m| m.child.is_some() && !m.stopped)
                    .count()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd in the namespace not ready: {}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let text = std::fs::read_to_string(&m.log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!(
                    "--- {} ---\n{}",
                    m.ip,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].endpoint()
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(NsMember::endpoint).collect()
    }

    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(Child::id)
    }

    /// The member every answering member names as leader.
    pub async fn leader_index(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut ids = Vec::new();
            for (i, m) in self.members.iter().enumerate() {
                if let Some((id, leader)) = status_ids(&m.endpoint()).await {
                    ids.push((i, id, leader));
                }
            }
            if let Some((_, _, leader)) = ids.first() {
                if *leader != 0 && ids.iter().all(|(_, _, l)| l == leader) {
                    if let Some((i, _, _)) = ids.iter().find(|(_, id, _)| id == leader) {
                        return *i;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no agreed leader: {ids:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every packet of every connection of member `i` is dropped, in both
    /// directions, until [`NsCluster::heal`].
    pub fn partition(&self, i: usize) {
        iptables(&[
            "-A",
            "OUTPUT",
            "-m",
            "connmark",
            "--mark",
            &(i + 1).to_string(),
            "-j",
            "DROP",
        ]);
    }

    pub fn heal(&self, i: usize) {
        iptables(&[
            "-D",
            "OUTPUT",
            "-m",
            "connmark",
            "--mark",
            &(i + 1).to_string(),
            "-j",
            "DROP",
        ]);
    }

    pub fn stop(&mut self, i: usize) {
        let pid = self.pid(i).expect("running");
        kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).expect("SIGSTOP");
        self.members[i].stopped = true;
    }

    pub fn cont(&mut self, i: usize) {
        let pid = self.pid(i).expect("running");
        kill(Pid::from_raw(pid as i32), Signal::SIGCONT).expect("SIGCONT");
        self.members[i].stopped = false;
    }
}

impl Drop for NsCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                let pid = Pid::from_raw(child.id() as i32);
                let _ = kill(pid, Signal::SIGCONT);
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

async fn status_ids(endpoint: &str) -> Option<(u64, u64)> {
    let opts = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_secs(1));
    let mut c = etcd_client::Client::connect([endpoint], Some(opts))
        .await
        .ok()?;
    let s = tokio::time::timeout(Duration::from_secs(2), c.status())
        .await
        .ok()?
        .ok()?;
    Some((s.header().map(|h| h.member_id()).unwrap_or(0), s.leader()))
}

async fn status_leader(endpoint: &str) -> Option<u64> {
    status_ids(endpoint).await.map(|(_, l)| l)
}
