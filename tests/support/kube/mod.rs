//! Kubernetes' real parts on the harness etcd: [`KubeApiserver`] (a real
//! kube-apiserver started by `scripts/kube/start-apiserver.sh` on loopback,
//! its admin token and CA), [`Candidate`] (client-go's `leaderelection` with
//! a LeaseLock, `tests/go/leasecandidate`, its started/stopped-leading lines
//! on the host's clock) and [`LeaseLog`] (every write of one Lease key from
//! the test's own etcd watch, decoded by a wire walk of its own: not
//! tenure's decoder). Every process is SIGKILLed by PID when dropped, and on
//! the test's death through PR_SET_PDEATHSIG (the script execs
//! kube-apiserver, so the PID is kube-apiserver's).
//!
//! The files, by job: `apiserver.rs` (the process, its admin's requests),
//! `accounts.rs` (tenure's ServiceAccount, an exec plugin), `candidate.rs`
//! (client-go's candidates), `lease_log.rs` (the test's own record of a
//! Lease key), `terms.rs` (the terms that record says), `recorded.rs` (what
//! serve recorded), `renewer.rs` (a Lease the test renews itself).

mod accounts;
mod apiserver;
mod candidate;
mod lease_log;
mod recorded;
mod renewer;
mod terms;

#[allow(unused_imports)]
pub use accounts::{exec_runs, EXEC_PLUGIN};
#[allow(unused_imports)]
pub use apiserver::take_over;
#[allow(unused_imports)]
pub use candidate::{by_id, candidate_bin, candidates, Candidate, Said, LEASE};
#[allow(unused_imports)]
pub use lease_log::{LeaseLog, Write};
#[allow(unused_imports)]
pub use recorded::{events, lapsed, page, recorded, recorded_handovers, Recorded};
#[allow(unused_imports)]
pub use renewer::{renewing_read, JsonRenewer, RENEWED, RENEWER, RENEWER_TRANSITIONS};
#[allow(unused_imports)]
pub use terms::{handovers, terms_of, wanted, Term};

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::{Etcd, Serve};

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

impl Drop for KubeApiserver {
    fn drop(&mut self) {
        kill9(&self.child);
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
pub async fn head(etcd: &Etcd) -> i64 {
    let mut c = etcd.client().await;
    c.get("x", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}
