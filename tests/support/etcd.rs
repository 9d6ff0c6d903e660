//! The handles tests hold: [`Etcd`] (one member) and [`EtcdCluster`] (three),
//! both a [`Group`] of [`Member`]s started concurrently and killed on drop.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};
use tokio::task::JoinSet;

use super::free_ports;
use super::member::*;

/// How many times a fresh start is attempted (with new ports each time).
pub const START_ATTEMPTS: usize = 3;
/// How long [`EtcdCluster::leader_index`] waits for an agreed leader.
pub const LEADER_TIMEOUT: Duration = Duration::from_secs(20);

const CLUSTER_SIZE: usize = 3;

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
        Self::launch_with(n, &EtcdFlags::default()).await
    }

    async fn launch_with(n: usize, flags: &EtcdFlags) -> Group {
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            let ports = free_ports(2 * n);
            let token = unique_token();
            let initial_cluster = (0..n)
                .map(|i| format!("m{i}=http://127.0.0.1:{}", ports[2 * i + 1]))
                .collect::<Vec<_>>()
                .join(",");
            let members = (0..n)
                .map(|i| {
                    Member::new(
                        i,
                        ports[2 * i],
                        ports[2 * i + 1],
                        &initial_cluster,
                        &token,
                        flags,
                    )
                })
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

    /// Starts etcd with extra flags (TLS, authentication; see [`secure`]).
    /// [`Etcd::client`] is plain: over TLS, use etcdctl or `tenure`.
    pub async fn start_with(flags: EtcdFlags) -> Etcd {
        Etcd {
            group: Group::launch_with(1, &flags).await,
        }
    }

    fn m(&self) -> &Member {
        &self.group.members[0]
    }

    /// `etcdctl elect KEY VALUE` against this etcd (Go's
    /// `concurrency.Election`, etcd's own queue layout), its stdout piped:
    /// it prints the leader key and value once elected; SIGINT resigns.
    pub fn etcdctl_elect(&self, key: &str, value: &str) -> tokio::process::Child {
        tokio::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint()))
            .args(["elect", key, value])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("etcdctl is installed (apt-get install etcd-client)")
    }

    /// e.g. `http://127.0.0.1:PORT`; stays the same across restarts.
    pub fn endpoint(&self) -> String {
        self.m().endpoint()
    }

    pub fn client_port(&self) -> u16 {
        self.m().client_port
    }

    /// `127.0.0.1:PORT` of its client port (what a proxy forwards to).
    pub fn client_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.client_port()))
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

    /// The `--initial-cluster-token` it was started with (an `etcdctl
    /// snapshot restore` with it keeps the cluster id).
    pub fn cluster_token(&self) -> &str {
        &self.m().token
    }

    /// The last [`LOG_RING`] stderr lines (JSON, zap format) plus harness markers.
    pub fn recent_logs(&self) -> Vec<String> {
        self.m().recent_logs()
    }

    /// `etcdctl snapshot save PATH`; returns the revision the snapshot
    /// holds (etcd's revision right after it was taken, when nothing
    /// writes meanwhile).
    pub async fn snapshot_save(&self, path: &Path) -> i64 {
        let out = tokio::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint()))
            .args(["snapshot", "save"])
            .arg(path)
            .output()
            .await
            .expect("run etcdctl snapshot save");
        assert!(
            out.status.success(),
            "etcdctl snapshot save: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut c = self.client().await;
        c.get("any", None)
            .await
            .expect("get")
            .header()
            .map(|h| h.revision())
            .unwrap_or_default()
    }

    /// Restores `snapshot` the way an operator does after losing etcd:
    /// stops the member, restores into a new data dir with the same
    /// `--name`, peer URL and cluster token (so the same member and cluster
    /// ids), and starts it again on the same ports. `bump`: the documented
    /// procedure, `etcdutl snapshot restore --bump-revision N
    /// --mark-compacted`; `None`: a plain `etcdutl snapshot restore`, which
    /// puts etcd's revision back to the snapshot's. The tool is
    /// [`etcdutl_bin`] (etcd 3.4 has none: 3.5's restores its snapshots).
    pub async fn restore(&mut self, snapshot: &Path, bump: Option<u64>) {
        self.kill().await;
        let m = &mut self.group.members[0];
        m.restores += 1;
        let data = m.tmp.path().join(format!("data-restored-{}", m.restores));
        let peer = m.peer_url();
        let mut cmd = tokio::process::Command::new(etcdutl_bin());
        cmd.args(["snapshot", "restore"])
            .arg(snapshot)
            .arg("--data-dir")
            .arg(&data)
            .args(["--name", &m.name])
            .args(["--initial-cluster", &m.initial_cluster])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster-token", &m.token]);
        if let Some(n) = bump {
            cmd.args(["--bump-revision", &n.to_string(), "--mark-compacted"]);
        }
        let out = cmd
            .output()
            .await
            .unwrap_or_else(|e| panic!("run {} snapshot restore: {e}", etcdutl_bin().display()));
        assert!(
            out.status.success(),
            "{} snapshot restore: {}",
            etcdutl_bin().display(),
            String::from_utf8_lossy(&out.stderr)
        );
        m.data_dir = data;
        self.restart().await;
    }

    /// How long the last (re)start took from spawn to readiness.
    pub fn last_ready_after(&self) -> Option<Duration> {
        self.m().last_ready_after
    }
}

/// `etcdutl`: `$TENURE_TEST_ETCDUTL`, else the one beside the etcd under
/// test, else etcd 3.5.30's from `scripts/setup.sh`, else `etcdutl` on
/// PATH. etcd 3.4 ships none; 3.5's restores a 3.4 snapshot for a 3.4
/// server (the revision bump included: measured with 3.4.23).
pub fn etcdutl_bin() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("TENURE_TEST_ETCDUTL") {
        return p.into();
    }
    let beside = etcd_bin().with_file_name("etcdutl");
    if beside.exists() {
        return beside;
    }
    let setup = Path::new("/opt/tenure-etcd-3.5.30/bin/etcdutl");
    if setup.exists() {
        return setup.to_owned();
    }
    "etcdutl".into()
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
