//! Real Patroni (issue 21: tenure watching Patroni's leader election):
//! a [`PatroniCluster`] of N members on loopback, each a `patroni` process
//! (PyPI 4.1.x from the venv `scripts/setup.sh --test` builds in
//! `/opt/tenure-patroni`, or `$TENURE_TEST_PATRONI_VENV`) with its own
//! PostgreSQL (Debian's, [`super::postgres::pg_bin_dir`]), its DCS a harness
//! etcd through Patroni's `etcd3` module. What Patroni writes there, and when,
//! is in docs/patroni-facts.md (measured by tests/patroni.rs).
//!
//! As root every member runs as the `postgres` user (`setpriv --reuid
//! postgres --regid postgres --init-groups --pdeathsig=KILL`), its data dir
//! in a temp dir handed to that user; the config is generated here (JSON,
//! which YAML reads): `ttl` 20, `loop_wait` 1 and `retry_timeout` 3 (the
//! least Patroni accepts; `loop_wait + 2 × retry_timeout ≤ ttl`), bootstrap
//! by initdb, a replication user, `trust` for loopback in pg_hba.
//!
//! Patroni starts PostgreSQL detached (the postmaster is not its child), so
//! a member's Patroni can be SIGKILLed ([`PatroniCluster::kill9`]) while its
//! PostgreSQL runs on, still a primary. Cleanup therefore goes by the temp
//! dir: on drop every Patroni is SIGKILLed by its PID, each postmaster (its
//! PID from `postmaster.pid`) gets SIGQUIT, and then every process whose
//! working directory lies in the temp dir (Patroni, the postgres processes,
//! pg_basebackup) is SIGKILLed by its PID until none is left. A guard shell
//! does that same sweep if the test binary dies without dropping the cluster
//! (SIGKILL, abort): its stdin is a pipe only the harness holds, and it
//! sweeps when that closes without the harness's `done` (checked: a SIGKILLed
//! test binary leaves no process and no dir).
//!
//! Spawn from a thread that outlives the cluster (a `#[tokio::test]`'s own
//! thread): the parent-death signal fires when the spawning thread exits.

pub mod dcs;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::procfs::{proc_state, processes_in_dir};

/// Patroni's `ttl` (its lease's TTL, seconds); 20 is the least it accepts.
pub const TTL: u64 = 20;
/// `loop_wait`, `retry_timeout`: the least Patroni accepts.
pub const LOOP_WAIT: u64 = 1;
pub const RETRY_TIMEOUT: u64 = 3;
/// How long a start may take until a leader runs and every replica streams.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Patroni's default namespace.
pub const DEFAULT_NAMESPACE: &str = "/service/";
/// Lines of each member's output kept for panic messages.
const LOG_RING: usize = 400;
const DEFAULT_VENV: &str = "/opt/tenure-patroni";

/// The venv with `bin/patroni` and `bin/patronictl`.
pub fn patroni_venv() -> PathBuf {
    let venv = std::env::var_os("TENURE_TEST_PATRONI_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_VENV));
    assert!(
        venv.join("bin/patroni").exists(),
        "Patroni is not installed in {}: run `scripts/setup.sh --test`",
        venv.display()
    );
    venv
}

/// `Some((uid, gid))` of the `postgres` user when we are root (members run
/// as it), `None` when not root (members run as we do).
fn run_as() -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    let ids = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&"postgres") && f.len() > 3)
            .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
            .flatten()
    });
    Some(ids.expect("no postgres user: run `scripts/setup.sh --test` (apt package postgresql)"))
}

/// What to start: member count, Patroni's `namespace`, the `scope`.
#[derive(Clone, Debug)]
pub struct PatroniOptions {
    pub members: usize,
    pub scope: String,
    /// Patroni's `namespace` (default `/service/`).
    pub namespace: String,
}

impl PatroniOptions {
    pub fn new(members: usize, scope: &str) -> PatroniOptions {
        PatroniOptions {
            members,
            scope: scope.to_owned(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
        }
    }
}

struct Member {
    name: String,
    api_port: u16,
    pg_port: u16,
    dir: PathBuf,
    config: PathBuf,
    child: Option<Child>,
    logs: Arc<Mutex<VecDeque<String>>>,
}

impl Member {
    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }
}

/// One entry of Patroni's `history` key: `[timeline, lsn, reason, time, new leader]`
/// (the last two are missing in entries written by older Patroni versions).
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    pub timeline: i64,
    pub lsn: u64,
    pub reason: String,
    pub at: Option<String>,
    pub leader: Option<String>,
}

/// A key as etcd holds it now.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyNow {
    pub value: String,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
}

pub struct PatroniCluster {
    opts: PatroniOptions,
    etcd_hosts: String,
    etcd: etcd_client::Client,
    members: Vec<Member>,
    ctl_config: PathBuf,
    guard: Option<(Child, ChildStdin)>,
    dir: TempDir,
}

impl PatroniCluster {
    /// `n` members of `scope` under `/service/` on `etcd`; returns once a
    /// leader runs and every replica streams from it.
    pub async fn start(n: usize, etcd: &super::Etcd, scope: &str) -> PatroniCluster {
        Self::start_with(PatroniOptions::new(n, scope), &[etcd.endpoint()]).await
    }

    /// As [`PatroniCluster::start`], with options and etcd endpoints
    /// (`http://127.0.0.1:PORT`).
    pub async fn start_with(opts: PatroniOptions, endpoints: &[String]) -> PatroniCluster {
        let cluster = Self::spawn(opts, endpoints).await;
        cluster.wait_ready(READY_TIMEOUT).await;
        cluster
    }

    /// Spawns every member and returns at once (see [`PatroniCluster::wait_ready`]).
    pub async fn spawn(mut opts: PatroniOptions, endpoints: &[String]) -> PatroniCluster {
        assert!(opts.members >= 1, "a cluster has at least one member");
        opts.namespace = format!("/{}/", opts.namespace.trim_matches('/'));
        let venv = patroni_venv();
        let pg_bin = super::postgres::pg_bin_dir();
        let dir = super::member::new_temp_dir("patroni");
        let etcd_hosts = endpoints
            .iter()
            .map(|e| e.trim_start_matches("http://").to_owned())
            .collect::<Vec<_>>()
            .join(",");
        let etcd = etcd_client::Client::connect(endpoints, None)
            .await
            .expect("etcd client for the Patroni harness");
        let guard = spawn_guard(dir.path());
        let ports = super::free_ports(2 * opts.members);
        let members = (0..opts.members)
            .map(|i| {
                let member_dir = dir.path().join(format!("m{i}"));
                std::fs::create_dir(&member_dir).expect("member dir");
                Member {
                    name: format!("m{i}"),
                    api_port: ports[2 * i],
                    pg_port: ports[2 * i + 1],
                    config: dir.path().join(format!("m{i}.yml")),
                    dir: member_dir,
                    child: None,
                    logs: Arc::new(Mutex::new(VecDeque::new())),
                }
            })
            .collect();
        let ctl_config = dir.path().join("ctl.yml");
        let mut cluster = PatroniCluster {
            opts,
            etcd_hosts,
            etcd,
            members,
            ctl_config,
            guard: Some(guard),
            dir,
        };
        cluster.write_configs(&pg_bin);
        for i in 0..cluster.members.len() {
            cluster.spawn_member(i, &venv);
        }
        cluster
    }

    fn write_configs(&self, pg_bin: &Path) {
        let dcs = json!({
            "scope": self.opts.scope,
            "namespace": self.opts.namespace,
            "etcd3": { "hosts": self.etcd_hosts },
        });
        write_file(&self.ctl_config, &dcs.to_string());
        for m in &self.members {
            let api = format!("127.0.0.1:{}", m.api_port);
            let pg = format!("127.0.0.1:{}", m.pg_port);
            let config = json!({
                "scope": self.opts.scope,
                "namespace": self.opts.namespace,
                "name": m.name,
                "log": { "level": "INFO" },
                "restapi": { "listen": api, "connect_address": api },
                "etcd3": { "hosts": self.etcd_hosts },
                "bootstrap": {
                    "dcs": {
                        "ttl": TTL,
                        "loop_wait": LOOP_WAIT,
                        "retry_timeout": RETRY_TIMEOUT,
                        "maximum_lag_on_failover": 1048576,
                        "postgresql": { "use_pg_rewind": false },
                    },
                    "initdb": [{ "encoding": "UTF8" }, { "locale": "C" }, "no-sync"],
                },
                "postgresql": {
                    "listen": pg,
                    "connect_address": pg,
                    "data_dir": m.data_dir(),
                    "bin_dir": pg_bin,
                    "pgpass": m.dir.join("pgpass"),
                    "authentication": {
                        "superuser": { "username": "postgres", "password": "tenure-test" },
                        "replication": { "username": "replicator", "password": "tenure-test" },
                    },
                    "parameters": {
                        "unix_socket_directories": m.dir,
                        "fsync": "off",
                        "synchronous_commit": "off",
                        "max_connections": 50,
                        "shared_buffers": "16MB",
                    },
                    "pg_hba": [
                        "local all all trust",
                        "host all all 127.0.0.1/32 trust",
                        "host replication replicator 127.0.0.1/32 trust",
                    ],
                },
            });
            write_file(&m.config, &config.to_string());
        }
        if let Some((uid, gid)) = run_as() {
            chown_tree(self.dir.path(), uid, gid);
        }
    }

    fn spawn_member(&mut self, i: usize, venv: &Path) {
        let m = &mut self.members[i];
        assert!(m.child.is_none(), "{}: Patroni already runs", m.name);
        let mut cmd = Command::new("setpriv");
        if let Some((uid, gid)) = run_as() {
            cmd.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--init-groups");
        }
        cmd.arg("--pdeathsig=KILL")
            .arg(venv.join("bin/patroni"))
            .arg(&m.config)
            .current_dir(&m.dir)
            .env("HOME", &m.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("PATRONI_") {
                cmd.env_remove(k);
            }
        }
        let mut child = cmd.spawn().expect("spawn patroni (setpriv)");
        push_log(&m.logs, format!("[harness] patroni pid {}", child.id()));
        drain(
            child.stdout.take().map(|s| Box::new(s) as _),
            m.logs.clone(),
        );
        drain(
            child.stderr.take().map(|s| Box::new(s) as _),
            m.logs.clone(),
        );
        m.child = Some(child);
    }

    fn member(&self, name: &str) -> &Member {
        self.members
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no member {name:?}"))
    }

    fn index(&self, name: &str) -> usize {
        self.members
            .iter()
            .position(|m| m.name == name)
            .unwrap_or_else(|| panic!("no member {name:?}"))
    }

    /// Waits until one running Patroni's PostgreSQL is a running primary,
    /// the `leader` key names it, and every other running Patroni's
    /// PostgreSQL streams (all by `GET /patroni` of each member); returns
    /// the leader's name. Panics with every member's output after `within`.
    pub async fn wait_ready(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let last = match self.ready_now().await {
                Ok(leader) => return leader,
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                panic!(
                    "Patroni cluster {:?} not ready within {within:?}: {last}\n{}",
                    self.opts.scope,
                    self.all_logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn ready_now(&self) -> Result<String, String> {
        let mut leader = None;
        let mut replicas = Vec::new();
        for m in self.members.iter().filter(|m| m.child.is_some()) {
            let s = self
                .status(&m.name)
                .await
                .ok_or_else(|| format!("{}: no answer from GET /patroni", m.name))?;
            let field = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            match (field("role").as_str(), field("state").as_str()) {
                ("primary", "running") if leader.is_none() => leader = Some(m.name.clone()),
                ("replica", "running") if field("replication_state") == "streaming" => {
                    replicas.push(m.name.clone())
                }
                _ => return Err(format!("{}: {s}", m.name)),
            }
        }
        let leader = leader.ok_or("no running primary")?;
        match self.leader().await {
            Some(key) if key == leader => Ok(leader),
            other => Err(format!(
                "{leader} is primary, the leader key says {other:?}"
            )),
        }
    }

    /// `GET /patroni` of `member`, `None` when it does not answer.
    pub async fn status(&self, member: &str) -> Option<Value> {
        let url = format!("{}/patroni", self.member_api_url(member));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        client.get(url).send().await.ok()?.json().await.ok()
    }

    /// The member's REST API, `http://127.0.0.1:PORT`.
    pub fn member_api_url(&self, member: &str) -> String {
        format!("http://127.0.0.1:{}", self.member(member).api_port)
    }

    /// The member's PostgreSQL port on 127.0.0.1 (user `postgres`, `trust`).
    pub fn pg_port(&self, member: &str) -> u16 {
        self.member(member).pg_port
    }

    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    pub fn scope(&self) -> &str {
        &self.opts.scope
    }

    /// Where Patroni keeps the cluster's keys: `NAMESPACE + SCOPE + "/"`.
    pub fn prefix(&self) -> String {
        format!("{}{}/", self.opts.namespace, self.opts.scope)
    }

    /// A key under [`PatroniCluster::prefix`] as etcd holds it now.
    pub async fn key(&self, rel: &str) -> Option<KeyNow> {
        let key = format!("{}{rel}", self.prefix());
        let resp = self.etcd.clone().get(key, None).await.ok()?;
        let kv = resp.kvs().first()?;
        Some(KeyNow {
            value: String::from_utf8_lossy(kv.value()).into_owned(),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            lease: kv.lease(),
        })
    }

    /// The leader's name: the value of Patroni's `leader` key.
    pub async fn leader(&self) -> Option<String> {
        self.key("leader").await.map(|k| k.value)
    }

    /// Patroni's `history` key, parsed (empty while there is none).
    pub async fn history(&self) -> Vec<HistoryEntry> {
        let Some(k) = self.key("history").await else {
            return Vec::new();
        };
        parse_history(&k.value).unwrap_or_else(|| panic!("history key: {:?}", k.value))
    }

    /// `patronictl switchover SCOPE --leader FROM --candidate TO --force`;
    /// returns its output once it says it switched over.
    pub async fn switchover(&self, from: &str, to: &str) -> String {
        let out = tokio::process::Command::new(patroni_venv().join("bin/patronictl"))
            .arg("-c")
            .arg(&self.ctl_config)
            .args(["switchover", &self.opts.scope, "--leader", from])
            .args(["--candidate", to, "--force"])
            .env("HOME", self.dir.path())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(60), out)
            .await
            .expect("patronictl switchover within 60 s")
            .expect("run patronictl");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success()
                && text.contains(&format!("Successfully switched over to \"{to}\"")),
            "patronictl switchover {from} → {to} failed ({}):\n{text}\n{}",
            out.status,
            self.all_logs()
        );
        text
    }

    /// SIGKILLs `member`'s Patroni (by its PID) and reaps it; its PostgreSQL
    /// runs on. Returns the postmaster's PID, which must still be running.
    pub fn kill9(&mut self, member: &str) -> i32 {
        let i = self.index(member);
        let m = &mut self.members[i];
        let mut child = m
            .child
            .take()
            .unwrap_or_else(|| panic!("{member}: no Patroni runs"));
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        let _ = child.wait();
        push_log(
            &m.logs,
            format!("[harness] patroni pid {} SIGKILLed", child.id()),
        );
        let pid = self
            .postmaster_pid(member)
            .unwrap_or_else(|| panic!("{member}: no PostgreSQL runs after its Patroni died"));
        assert!(
            proc_state(pid as u32).is_some_and(|s| s != 'Z'),
            "{member}: postmaster {pid} gone with its Patroni"
        );
        pid
    }

    /// Starts `member`'s Patroni again (after [`PatroniCluster::kill9`]).
    pub fn restart(&mut self, member: &str) {
        let i = self.index(member);
        self.spawn_member(i, &patroni_venv());
    }

    /// Whether `member`'s Patroni runs (was not killed by the harness).
    pub fn is_running(&self, member: &str) -> bool {
        self.member(member).child.is_some()
    }

    /// The PID in `member`'s `postmaster.pid` when that process runs in its
    /// data dir.
    pub fn postmaster_pid(&self, member: &str) -> Option<i32> {
        postmaster_pid(&self.member(member).data_dir())
    }

    /// `psql -c SQL` as `postgres` on `member`'s PostgreSQL over TCP: its
    /// unaligned, tuples-only output, or what went wrong.
    pub fn psql(&self, member: &str, sql: &str) -> Result<String, String> {
        let out = Command::new("psql")
            .args([
                "-X",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
            ])
            .arg(self.pg_port(member).to_string())
            .args(["-U", "postgres", "-d", "postgres", "-c", sql])
            .env("PGCONNECT_TIMEOUT", "5")
            .output()
            .map_err(|e| format!("run psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }

    /// `select pg_is_in_recovery()` on `member`'s PostgreSQL (false: a primary).
    pub fn pg_is_in_recovery(&self, member: &str) -> bool {
        match self.psql(member, "select pg_is_in_recovery()").as_deref() {
            Ok("t") => true,
            Ok("f") => false,
            other => panic!("{member}: pg_is_in_recovery(): {other:?}"),
        }
    }

    /// The last lines of `member`'s Patroni (and PostgreSQL) output.
    pub fn logs(&self, member: &str) -> Vec<String> {
        let m = self.member(member);
        m.logs
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every member's recent output, for a panic message.
    pub fn all_logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                format!(
                    "--- {} (last lines)\n{}",
                    m.name,
                    self.logs(&m.name).join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Kills every process the cluster started (see the module docs); what
    /// still runs afterwards (nothing, unless the kernel is slow).
    fn kill_all(&mut self) -> Vec<i32> {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                let _ = child.wait();
            }
        }
        for m in &self.members {
            if let Some(pid) = postmaster_pid(&m.data_dir()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGQUIT);
            }
        }
        let dir = std::fs::canonicalize(self.dir.path()).unwrap_or_else(|_| self.dir.path().into());
        let dir = dir.as_path();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut quit_until = Instant::now() + Duration::from_secs(3);
        loop {
            let left = processes_in_dir(dir);
            if left.is_empty() || Instant::now() >= deadline {
                return left;
            }
            if Instant::now() >= quit_until {
                for pid in &left {
                    let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
                }
                quit_until = Instant::now() + Duration::from_millis(500);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        let left = self.kill_all();
        if !left.is_empty() {
            eprintln!(
                "patroni harness: processes still running in {:?}: {left:?}",
                self.dir.path()
            );
        }
        if let Some((mut guard, mut stdin)) = self.guard.take() {
            // Only when nothing is left: otherwise let the guard sweep too.
            if left.is_empty() {
                let _ = stdin.write_all(b"done\n");
            }
            drop(stdin);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(guard.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = guard.kill();
            let _ = guard.wait();
        }
    }
}

/// The sweep of the module docs, as a shell: `done` on its stdin says the
/// harness cleaned up itself; end of file without it (the test binary died)
/// makes it sweep. `$1` is the temp dir.
const GUARD: &str = r#"
trap '' INT TERM HUP
read -r msg && [ "$msg" = done ] && exit 0
n=0
while [ $n -lt 100 ]; do
  pids=$(find /proc -mindepth 2 -maxdepth 2 -name cwd \( -lname "$1" -o -lname "$1/*" \) 2>/dev/null |
    cut -d/ -f3)
  [ -z "$pids" ] && break
  kill -9 $pids 2>/dev/null
  sleep 0.1
  n=$((n + 1))
done
rm -rf "$1"
"#;

fn spawn_guard(dir: &Path) -> (Child, ChildStdin) {
    let mut child = Command::new("sh")
        .args(["-c", GUARD, "tenure-patroni-guard"])
        .arg(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.into()))
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the Patroni harness's guard shell");
    let stdin = child.stdin.take().expect("guard stdin");
    (child, stdin)
}

/// The PID in `data/postmaster.pid`, if that process runs in `data`.
fn postmaster_pid(data: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    (cwd == data || std::fs::canonicalize(data).is_ok_and(|d| d == cwd)).then_some(pid)
}

/// `[[timeline, lsn, reason, time?, leader?], …]`.
pub fn parse_history(text: &str) -> Option<Vec<HistoryEntry>> {
    let v: Value = serde_json::from_str(text).ok()?;
    v.as_array()?
        .iter()
        .map(|e| {
            let e = e.as_array()?;
            Some(HistoryEntry {
                timeline: e.first()?.as_i64()?,
                lsn: e.get(1)?.as_u64()?,
                reason: e.get(2)?.as_str()?.to_owned(),
                at: e.get(3).and_then(Value::as_str).map(str::to_owned),
                leader: e.get(4).and_then(Value::as_str).map(str::to_owned),
            })
        })
        .collect()
}

fn write_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn chown_tree(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown for the postgres user");
    if path.is_dir() {
        for e in std::fs::read_dir(path).expect("read dir").flatten() {
            chown_tree(&e.path(), uid, gid);
        }
    }
}

fn push_log(logs: &Mutex<VecDeque<String>>, line: String) {
    if let Ok(mut l) = logs.lock() {
        if l.len() >= LOG_RING {
            l.pop_front();
        }
        l.push_back(line);
    }
}

fn drain(from: Option<Box<dyn Read + Send>>, logs: Arc<Mutex<VecDeque<String>>>) {
    let Some(from) = from else { return };
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            push_log(&logs, line);
        }
    });
}
