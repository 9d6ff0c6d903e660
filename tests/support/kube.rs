//! Kubernetes' real parts on the harness etcd: [`KubeApiserver`] (a real
//! kube-apiserver started by `scripts/kube/start-apiserver.sh` on loopback,
//! its admin token and CA), [`Candidate`] (client-go's `leaderelection` with
//! a LeaseLock, `tests/go/leasecandidate`, its started/stopped-leading lines
//! on the host's clock) and [`LeaseLog`] (every write of one Lease key from
//! the test's own etcd watch, decoded by a wire walk of its own: not
//! tenure's decoder). Every process is SIGKILLed by PID when dropped, and on
//! the test's death through PR_SET_PDEATHSIG (the script execs
//! kube-apiserver, so the PID is kube-apiserver's).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_client::{EventType, WatchOptions};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The kube-apiserver binary: `$KUBE_APISERVER`, else the one
/// scripts/kube/build.sh builds for the version scripts/kube/go.mod pins.
pub fn apiserver_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("KUBE_APISERVER") {
        return PathBuf::from(p);
    }
    let gomod = std::fs::read_to_string(repo().join("scripts/kube/go.mod")).expect("go.mod");
    let version = gomod
        .lines()
        .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes v"))
        .map(|v| v.split_whitespace().next().unwrap_or(v).to_owned())
        .expect("scripts/kube/go.mod requires k8s.io/kubernetes");
    PathBuf::from(format!(
        "/opt/tenure-kube-apiserver-{version}/bin/kube-apiserver"
    ))
}

/// Whether the real parts can run here. Outside CI a missing kube-apiserver
/// skips the test with a loud message; in CI (`CI=true`) it fails.
pub fn available() -> bool {
    let bin = apiserver_bin();
    if bin.exists() {
        return true;
    }
    let why = format!(
        "{} is missing: scripts/setup.sh --test builds it (scripts/kube/build.sh)",
        bin.display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
    eprintln!("\n!!!! SKIPPED: {why} !!!!\n");
    false
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Microseconds since the epoch on the host's clock: the clock the
/// candidates print, so their lines and the watch's arrivals compare.
pub fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn spawn(cmd: &mut Command) -> Child {
    cmd.kill_on_drop(true);
    // SAFETY: only calls prctl(2), which is async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    cmd.spawn().expect("spawn")
}

fn kill9(child: &Child) {
    if let Some(pid) = child.id() {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
}

pub struct KubeApiserver {
    child: Child,
    pub port: u16,
    pub token: String,
    pub dir: tempfile::TempDir,
    logs: Arc<Mutex<Vec<String>>>,
}

impl KubeApiserver {
    /// Starts one on loopback over `etcd_url` and waits for /readyz.
    pub async fn start(etcd_url: &str) -> KubeApiserver {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("scripts/kube/start-apiserver.sh"))
            .arg(etcd_url)
            .arg(dir.path())
            .env("KUBE_APISERVER", apiserver_bin())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = spawn(&mut cmd);
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let port = loop {
            let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                .await
                .expect("kube-apiserver: port")
                .expect("stderr")
                .unwrap_or_else(|| panic!("the script exited: {:?}", logs.lock().unwrap()));
            logs.lock().unwrap().push(line.clone());
            if let Some(p) = line.strip_prefix("kube-apiserver: port ") {
                break p.trim().parse().expect("port");
            }
        };
        let sink = logs.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut l = sink.lock().unwrap();
                if l.len() > 400 {
                    l.remove(0);
                }
                l.push(line);
            }
        });
        let token = std::fs::read_to_string(dir.path().join("token"))
            .expect("token")
            .trim()
            .to_owned();
        let api = KubeApiserver {
            child,
            port,
            token,
            dir,
            logs,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = api.curl("GET", "/readyz", None).await;
            if status == 200 && body.trim() == "ok" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready: {status} {body}\n{}",
                api.logs().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        api
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// One request with the admin token, through the machine's curl (the
    /// test crate's reqwest has no TLS); (status, body).
    pub async fn curl(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        self.curl_as(method, path, "application/json", body).await
    }

    /// [`curl`](Self::curl) with a body of `content_type` (kube-apiserver
    /// also takes `application/yaml`).
    pub async fn curl_as(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method])
            .arg("--cacert")
            .arg(self.dir.path().join("certs/ca.crt"))
            .arg("-H")
            .arg(format!("Authorization: Bearer {}", self.token))
            .arg("-H")
            .arg(format!("Content-Type: {content_type}"))
            .args(["--max-time", "10"])
            .arg(format!("https://127.0.0.1:{}{path}", self.port));
        if let Some(b) = body {
            cmd.args(["--data-binary", b]);
        }
        let out = cmd.output().await.expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (code.trim().parse().unwrap_or(0), body.to_owned())
    }
}

impl KubeApiserver {
    /// Creates `n` Leases `big-0`… in `namespace` through the API, each
    /// held by a holderIdentity of `holder_bytes` bytes (what anyone who
    /// may create Leases in that one namespace may write; etcd's default
    /// request limit, 1.5 MiB, bounds it). The body goes through a file:
    /// one argument may not pass 128 KiB.
    pub async fn create_big_leases(&self, namespace: &str, n: usize, holder_bytes: usize) {
        let body = self.dir.path().join("big-lease.json");
        let path = format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases");
        for i in 0..n {
            let lease = serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": format!("big-{i}"), "namespace": namespace},
                "spec": {"holderIdentity": "h".repeat(holder_bytes), "leaseDurationSeconds": 3600}
            });
            std::fs::write(&body, lease.to_string()).expect("the Lease's body");
            let (status, answer) = self
                .curl_as(
                    "POST",
                    &path,
                    "application/json",
                    Some(&format!("@{}", body.display())),
                )
                .await;
            let head: String = answer.chars().take(300).collect();
            assert_eq!(status, 201, "Lease big-{i}: {head}");
        }
    }
}

impl Drop for KubeApiserver {
    fn drop(&mut self) {
        kill9(&self.child);
    }
}

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

/// One write of the Lease key as the test's watch saw it.
#[derive(Clone, Debug)]
pub struct Write {
    pub revision: i64,
    /// When the watch delivered it (unix µs, the candidates' clock).
    pub seen_us: i64,
    pub deleted: bool,
    /// `holderIdentity` (empty: nobody).
    pub holder: String,
    pub acquire_us: Option<i64>,
    pub renew_us: Option<i64>,
    pub transitions: Option<i64>,
}

/// Every write of one key from revision 1 (nothing before the watch is
/// missed), until dropped.
pub struct LeaseLog {
    writes: Arc<Mutex<Vec<Write>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseLog {
    pub async fn start(mut client: etcd_client::Client, key: &str) -> LeaseLog {
        let opts = WatchOptions::new().with_start_revision(1);
        let mut stream = client.watch(key, Some(opts)).await.expect("watch");
        let writes = Arc::new(Mutex::new(Vec::new()));
        let sink = writes.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(resp)) = stream.message().await {
                let seen_us = unix_us();
                for e in resp.events() {
                    let Some(kv) = e.kv() else { continue };
                    let deleted = e.event_type() == EventType::Delete;
                    let spec = if deleted {
                        Spec::default()
                    } else {
                        spec_of(kv.value())
                            .unwrap_or_else(|| panic!("not a Lease: {:?}", kv.value()))
                    };
                    sink.lock().unwrap().push(Write {
                        revision: kv.mod_revision(),
                        seen_us,
                        deleted,
                        holder: spec.holder,
                        acquire_us: spec.acquire_us,
                        renew_us: spec.renew_us,
                        transitions: spec.transitions,
                    });
                }
            }
        });
        LeaseLog { writes, task }
    }

    pub fn writes(&self) -> Vec<Write> {
        self.writes.lock().unwrap().clone()
    }

    /// Waits until a write satisfies `f`; returns it.
    pub async fn wait_for(
        &self,
        what: &str,
        within: Duration,
        f: impl Fn(&Write) -> bool,
    ) -> Write {
        let deadline = Instant::now() + within;
        loop {
            if let Some(w) = self.writes().into_iter().find(|w| f(w)) {
                return w;
            }
            assert!(
                Instant::now() < deadline,
                "never saw {what}: {}",
                self.timeline()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The holder now (empty: nobody; `None`: no write yet or deleted).
    pub fn holder(&self) -> Option<String> {
        self.writes()
            .last()
            .filter(|w| !w.deleted)
            .map(|w| w.holder.clone())
    }

    /// One line per change of holder, for messages.
    pub fn timeline(&self) -> String {
        let mut out = String::new();
        let mut last: Option<(String, Option<i64>, bool)> = None;
        for w in self.writes() {
            let now = (w.holder.clone(), w.acquire_us, w.deleted);
            if last.as_ref() != Some(&now) {
                out.push_str(&format!(
                    "\n  rev {} {} holder {:?} acquire {:?} transitions {:?}",
                    w.revision,
                    if w.deleted { "DELETE" } else { "put" },
                    w.holder,
                    w.acquire_us,
                    w.transitions
                ));
                last = Some(now);
            }
        }
        out
    }
}

impl Drop for LeaseLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct Spec {
    holder: String,
    acquire_us: Option<i64>,
    renew_us: Option<i64>,
    transitions: Option<i64>,
}

/// The test's own reading of a stored Lease: `k8s\0`, then runtime.Unknown
/// field 2 (raw) = the Lease, its field 2 = the spec (holderIdentity 1,
/// acquireTime 3, renewTime 4, leaseTransitions 5; MicroTime seconds 1,
/// nanos 2), by a walk over protobuf's wire format.
fn spec_of(value: &[u8]) -> Option<Spec> {
    let body = value.strip_prefix(b"k8s\0")?;
    let raw = field(body, 2)?.bytes()?;
    let spec = field(raw, 2)?.bytes()?;
    let micro = |f: Option<Wire<'_>>| {
        let t = f?.bytes()?;
        let s = field(t, 1).and_then(|w| w.int()).unwrap_or(0);
        let n = field(t, 2).and_then(|w| w.int()).unwrap_or(0);
        Some(s * 1_000_000 + n / 1000)
    };
    Some(Spec {
        holder: field(spec, 1)
            .and_then(|w| w.bytes())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default(),
        acquire_us: micro(field(spec, 3)),
        renew_us: micro(field(spec, 4)),
        transitions: field(spec, 5).and_then(|w| w.int()),
    })
}

enum Wire<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

impl<'a> Wire<'a> {
    fn bytes(self) -> Option<&'a [u8]> {
        match self {
            Wire::Bytes(b) => Some(b),
            Wire::Int(_) => None,
        }
    }
    fn int(self) -> Option<i64> {
        match self {
            Wire::Int(i) => Some(i),
            Wire::Bytes(_) => None,
        }
    }
}

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let c = *b.get(*i)?;
        *i += 1;
        v |= u64::from(c & 0x7f) << shift;
        if c < 0x80 {
            return Some(v);
        }
    }
    None
}

/// The last occurrence of field `n` in message `b`.
fn field(b: &[u8], n: u64) -> Option<Wire<'_>> {
    let mut i = 0;
    let mut found = None;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let value = match key & 7 {
            0 => Wire::Int(varint(b, &mut i)? as i64),
            2 => {
                let len = varint(b, &mut i)? as usize;
                let v = b.get(i..i + len)?;
                i += len;
                Wire::Bytes(v)
            }
            _ => return None,
        };
        if key >> 3 == n {
            found = Some(value);
        }
    }
    found
}

/// One term as the test's own record groups the writes: a run of one
/// holder and one acquisition; the token is its first write's revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub holder: String,
    pub token: i64,
    pub ended: Option<i64>,
    pub started_seen_us: i64,
    pub ended_seen_us: Option<i64>,
    /// How the write that ended it shows the end: an empty holder
    /// (`resigned`), the object deleted (`deleted`), `intruder` written
    /// over a live holder (`taken_over`), a candidate taking it
    /// (`expired`: client-go takes a Lease only once it ran out).
    pub ended_as: Option<&'static str>,
}

/// The terms of `writes` (a [`LeaseLog`]'s), `intruder` being the holder
/// a test writes over a live one.
pub fn terms_of(writes: &[Write], intruder: &str) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    let mut open: Option<(String, Option<i64>)> = None;
    for w in writes {
        let now = (!w.deleted && !w.holder.is_empty()).then(|| (w.holder.clone(), w.acquire_us));
        if now == open {
            continue;
        }
        if open.is_some() {
            let last = out.last_mut().expect("open term");
            last.ended = Some(w.revision);
            last.ended_seen_us = Some(w.seen_us);
            last.ended_as = Some(if w.deleted {
                "deleted"
            } else if w.holder.is_empty() {
                "resigned"
            } else if w.holder == intruder {
                "taken_over"
            } else {
                "expired"
            });
        }
        if let Some((holder, _)) = &now {
            out.push(Term {
                holder: holder.clone(),
                token: w.revision,
                ended: None,
                started_seen_us: w.seen_us,
                ended_seen_us: None,
                ended_as: None,
            });
        }
        open = now;
    }
    out
}

/// A recorded term: (holder, token, ended revision, cause).
pub type Recorded = (String, i64, Option<i64>, Option<String>);

/// The terms serve recorded of election `name`, by token.
pub async fn recorded(serve: &super::Serve, name: &str) -> Vec<Recorded> {
    let url = serve.url(&format!(
        "/api/v1/elections/{}/terms?limit=1000",
        name.replace('/', "%2F")
    ));
    let v: serde_json::Value = reqwest::get(url)
        .await
        .expect("terms")
        .json()
        .await
        .expect("json");
    let mut got: Vec<_> = v["terms"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|t| {
            (
                t["holder"].as_str().expect("holder").to_owned(),
                t["token"].as_i64().expect("token"),
                t["ended_revision"].as_i64(),
                t["end_cause"].as_str().map(str::to_owned),
            )
        })
        .collect();
    got.sort_by_key(|t| t.1);
    got
}

/// What [`recorded`] should say of `truth`.
pub fn wanted(truth: &[Term]) -> Vec<Recorded> {
    truth
        .iter()
        .map(|t| {
            (
                t.holder.clone(),
                t.token,
                t.ended,
                t.ended_as.map(str::to_owned),
            )
        })
        .collect()
}

/// Writes `intruder` over the live holder `from` of the Lease at `path`
/// through the API (a forced takeover), retrying a conflict with the
/// holder's own renewal.
pub async fn take_over(api: &KubeApiserver, path: &str, from: &str, intruder: &str) {
    loop {
        let (status, body) = api.curl("GET", path, None).await;
        assert_eq!(status, 200, "{body}");
        let mut lease: serde_json::Value = serde_json::from_str(&body).expect("lease");
        let spec = &mut lease["spec"];
        assert_eq!(spec["holderIdentity"].as_str(), Some(from));
        let now = micro_time(unix_us());
        let transitions = spec["leaseTransitions"].as_i64().unwrap_or(0) + 1;
        spec["holderIdentity"] = intruder.into();
        spec["acquireTime"] = now.clone().into();
        spec["renewTime"] = now.into();
        spec["leaseTransitions"] = transitions.into();
        let (status, body) = api.curl("PUT", path, Some(&lease.to_string())).await;
        match status {
            200 => return,
            // The holder's renewal came first: read it again.
            409 => continue,
            s => panic!("PUT lease: {s} {body}"),
        }
    }
}
/// An RFC 3339 time with microseconds of unix µs `us`.
pub fn micro_time(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (H. Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        us.rem_euclid(1_000_000)
    )
}

/// etcd's revision now.
pub async fn head(etcd: &super::Etcd) -> i64 {
    let mut c = etcd.client().await;
    c.get("x", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

/// The candidate of `id` among `cs`.
pub fn by_id<'a>(cs: &'a mut [Candidate], id: &str) -> &'a mut Candidate {
    cs.iter_mut()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no candidate {id}"))
}

impl KubeApiserver {
    /// A GET with `token` instead of the admin's; its status.
    pub async fn status_as(&self, token: &str, path: &str) -> u16 {
        let out = Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg("--cacert")
            .arg(self.dir.path().join("certs/ca.crt"))
            .arg("-H")
            .arg(format!("Authorization: Bearer {token}"))
            .args(["--max-time", "10"])
            .arg(format!("https://127.0.0.1:{}{path}", self.port))
            .output()
            .await
            .expect("curl");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    }

    /// tenure's ServiceAccount and its ClusterRole as deploy/kubernetes
    /// ships them (namespace.yaml, rbac.yaml), created (or already there);
    /// a token of that account (a TokenRequest: an hour).
    pub async fn lease_reader_token(&self) -> String {
        for file in ["namespace.yaml", "rbac.yaml"] {
            let text = std::fs::read_to_string(repo().join("deploy/kubernetes").join(file))
                .expect("deploy/kubernetes");
            for doc in text.split("\n---\n") {
                let kind = doc.lines().find_map(|l| l.strip_prefix("kind: "));
                let path = match kind.map(str::trim) {
                    Some("Namespace") => "/api/v1/namespaces",
                    Some("ServiceAccount") => "/api/v1/namespaces/tenure/serviceaccounts",
                    Some("ClusterRole") => "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                    Some("ClusterRoleBinding") => {
                        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
                    }
                    _ => continue,
                };
                let (status, body) = self
                    .curl_as("POST", path, "application/yaml", Some(doc))
                    .await;
                assert!(status == 201 || status == 409, "{kind:?}: {status} {body}");
            }
        }
        let request = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":3600}}"#;
        let (status, body) = self
            .curl(
                "POST",
                "/api/v1/namespaces/tenure/serviceaccounts/tenure/token",
                Some(request),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("TokenRequest");
        v["status"]["token"].as_str().expect("token").to_owned()
    }

    /// A token of tenure's lease-reading account in `dir/token`, and a
    /// kubeconfig for it at `dir/kubeconfig` (returned).
    pub async fn reader_kubeconfig(&self, dir: &Path) -> PathBuf {
        let token = self.lease_reader_token().await;
        std::fs::write(dir.join("token"), &token).expect("token");
        let path = dir.join("kubeconfig");
        self.kubeconfig_for("token", &path);
        path
    }

    /// A kubeconfig at `dir/kubeconfig` whose user is an exec plugin
    /// ([`EXEC_PLUGIN`] at `dir/plugin.sh`, a relative command run from
    /// the kubeconfig's folder) handing out tenure's lease-reading token.
    pub async fn exec_kubeconfig(&self, dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.reader_kubeconfig(dir).await;
        let text = std::fs::read_to_string(&path).expect("kubeconfig");
        let exec = format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: \
             ./plugin.sh\n      env:\n      - name: DIR\n        value: {}\n",
            dir.display()
        );
        let text = text.replace("    tokenFile: token\n", &exec);
        assert!(text.contains("plugin.sh"), "{text}");
        std::fs::write(&path, text).expect("kubeconfig");
        let plugin = dir.join("plugin.sh");
        std::fs::write(&plugin, EXEC_PLUGIN).expect("plugin");
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    /// A kubeconfig at `out` for this server: its CA inline
    /// (certificate-authority-data) and the token in `token_file`
    /// (tokenFile, relative to the kubeconfig).
    pub fn kubeconfig_for(&self, token_file: &str, out: &Path) {
        let ca = std::fs::read(self.dir.path().join("certs/ca.crt")).expect("ca.crt");
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: reader\ncontexts:\n- name: reader\n  \
             context:\n    cluster: test\n    user: tenure\nclusters:\n- name: test\n  cluster:\n    \
             server: https://127.0.0.1:{}\n    certificate-authority-data: {}\nusers:\n- name: \
             tenure\n  user:\n    tokenFile: {token_file}\n",
            self.port,
            base64(&ca)
        );
        std::fs::write(out, text).expect("kubeconfig");
    }
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Waits until serve counts `n` lapsed Leases (counted at most once a
/// second, after a watch answer: an idle stream answers a probe every few
/// seconds).
pub async fn lapsed(serve: &super::Serve, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while serve.metric("tenure_leases_lapsed").await != Some(n) {
        assert!(Instant::now() < deadline, "tenure_leases_lapsed never {n}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Each change of hands from one holder straight to another (no release or
/// deletion between), as the test's own watch read the Lease: the old
/// holder, and the new holder's acquireTime minus the old holder's last
/// renewTime (µs, the writers' clocks).
pub fn handovers(writes: &[Write]) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for pair in writes.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        let held = |w: &Write| !w.deleted && !w.holder.is_empty();
        let new_term = new.holder != old.holder || new.acquire_us != old.acquire_us;
        if held(old) && held(new) && new_term {
            let last = old.renew_us.or(old.acquire_us).expect("renewed");
            let next = new.acquire_us.or(new.renew_us).expect("acquired");
            out.push((old.holder.clone(), next - last));
        }
    }
    out
}

/// Every event serve recorded of election `name` (the API, in recording
/// order; at most 1,000).
pub async fn events(serve: &super::Serve, name: &str) -> Vec<serde_json::Value> {
    let url = serve.url(&format!(
        "/api/v1/elections/{}/events?limit=1000",
        name.replace('/', "%2F")
    ));
    let mut v: serde_json::Value = reqwest::get(url)
        .await
        .expect("events")
        .json()
        .await
        .expect("json");
    match v["events"].take() {
        serde_json::Value::Array(events) => events,
        other => panic!("no events in {other}"),
    }
}

/// What tenure recorded of them: each `term_ended` event of `name` that
/// carries a handover, in order.
pub async fn recorded_handovers(serve: &super::Serve, name: &str) -> Vec<(String, i64)> {
    events(serve, name)
        .await
        .iter()
        .filter(|e| e["type"] == "term_ended")
        .filter_map(|e| {
            let us = e["renewals"]["handover_us"].as_i64()?;
            Some((e["holder"].as_str().expect("holder").to_owned(), us))
        })
        .collect()
}

/// The election page of `name`, as served.
pub async fn page(serve: &super::Serve, name: &str) -> String {
    let url = serve.url(&format!("/elections/{}", name.replace('/', "%2F")));
    reqwest::get(url)
        .await
        .expect("page")
        .text()
        .await
        .expect("text")
}

/// The election a [`JsonRenewer`]'s Lease is (kube-system's `kcm`).
pub const RENEWED: &str = "kube-system/kcm";

/// The holder a [`JsonRenewer`] writes: client-go's `hostname_uuid`, as
/// kube-controller-manager's pod `kcm-0` would.
pub const RENEWER: &str = "kcm-0_4e3a3c38-5d6a-4b8f-9f2a-0123456789ab";

/// The `leaseTransitions` a [`JsonRenewer`] writes.
pub const RENEWER_TRANSITIONS: i64 = 3;

/// A holder ([`RENEWER`]) renewing a Lease written straight into etcd as
/// JSON, with client-go's cadence: every 500 ms, a 2 s lease, until
/// stopped.
pub struct JsonRenewer {
    renewing: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl JsonRenewer {
    pub async fn start(etcd: &super::Etcd) -> Self {
        use std::sync::atomic::Ordering;
        let renewing = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (mut raw, on) = (etcd.client().await, renewing.clone());
        let task = tokio::spawn(async move {
            let t = |ms: i64| {
                let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).expect("time"));
                humantime::format_rfc3339_micros(at).to_string()
            };
            let acquired = tenure::events::now_ms();
            while on.load(Ordering::SeqCst) {
                let lease = serde_json::json!({
                    "kind": "Lease",
                    "apiVersion": "coordination.k8s.io/v1",
                    "metadata": {"name": "kcm", "namespace": "kube-system"},
                    "spec": {"holderIdentity": RENEWER, "leaseDurationSeconds": 2,
                             "acquireTime": t(acquired), "renewTime": t(tenure::events::now_ms()),
                             "leaseTransitions": RENEWER_TRANSITIONS}
                });
                raw.put("/registry/leases/kube-system/kcm", lease.to_string(), None)
                    .await
                    .expect("renew the Lease");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Self { renewing, task }
    }

    /// Stops renewing; returns once the last renewal was written.
    pub async fn stop(self) {
        self.renewing
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.task.await.expect("renewer");
    }
}

/// Waits until `serve`'s watcher gave its word on the renewed Lease: its
/// `tenure_election_lease_lapsed` series reads 0 (renewing, not lapsed).
pub async fn renewing_read(serve: &super::Serve) {
    let series = format!("tenure_election_lease_lapsed{{election=\"{RENEWED}\"}}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while serve.metric(&series).await != Some(0.0) {
        assert!(
            Instant::now() < deadline,
            "the Lease never read: {}",
            serve.metrics().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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

/// The exec plugin of [`KubeApiserver::exec_kubeconfig`]: its first answer
/// is a token the server refuses (401), every later one tenure's account
/// token valid for 20 s by its `expirationTimestamp`; each run is logged to
/// `$DIR/runs` ([`exec_runs`]) and its `KUBERNETES_EXEC_INFO` kept in
/// `$DIR/info`.
pub const EXEC_PLUGIN: &str = r#"#!/bin/sh
n=$(cat "$DIR/runs" 2>/dev/null | wc -l)
echo run >> "$DIR/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$DIR/info"
if [ "$n" -eq 0 ]; then tok=refused-by-the-server; else tok=$(cat "$DIR/token"); fi
exp=$(date -u -d '+20 seconds' +%Y-%m-%dT%H:%M:%SZ)
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"%s"}}\n' "$tok" "$exp"
"#;

/// How often the exec plugin of `dir` ran.
pub fn exec_runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runs"))
        .map(|r| r.lines().count())
        .unwrap_or(0)
}
