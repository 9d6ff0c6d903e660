#![allow(dead_code)]
//! Test harness: real `etcd` processes on loopback, no mocks.
//!
//! * [`Etcd`] — one etcd member (internally a 1-member [`EtcdCluster`]-style group).
//! * [`EtcdCluster`] — three members started concurrently.
//!
//! The same kit serves the benches (`benches/bench.rs` includes it by path):
//! `Serve` (a `tenure serve` child), `prom` (the Prometheus text format),
//! `rng` (a seeded generator), `wait` (polls with a deadline), `procfs`.
//! `postgres` (a PostgreSQL server), `patroni` (a `PatroniCluster` of real
//! Patroni members on the harness etcd, and `patroni::dcs::DcsLog`, a record
//! of every put and delete under a prefix).
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
//! Environment overrides: `TENURE_TEST_ETCD_BIN` (default `/usr/bin/etcd`; the
//! benches read `TENURE_BENCH_ETCD_BIN`),
//! `TENURE_TEST_ETCD_TMPDIR` (parent of the data dirs; default `/dev/shm`).

mod etcd;
pub mod fixtures;
pub mod go;
pub mod holder;
pub mod kube;
mod member;
pub mod netns;
pub mod procfs;
pub mod prom;
pub mod proxy;
pub mod rng;
pub mod secure;
mod serve;
pub mod wait;
mod webdriver;
#[allow(unused_imports)]
pub use etcd::{etcdutl_bin, Etcd, EtcdCluster, LEADER_TIMEOUT, START_ATTEMPTS};
#[allow(unused_imports)]
pub use member::{etcd_bin, etcd_version, EtcdFlags, LOG_RING, READY_TIMEOUT};
#[allow(unused_imports)]
pub use procfs::proc_state;
#[allow(unused_imports)]
pub use prom::metric_value;
#[allow(unused_imports)]
pub use serve::Serve;
#[allow(unused_imports)]
pub use webdriver::Browser;

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::PathBuf;

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
pub mod patroni;
pub mod postgres;
