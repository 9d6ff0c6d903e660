use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::s02_holder_pause::*;

// ---------------------------------------------------------------------------
// 11. Clock skew: holders under libfaketime (wall clock ±30 s, and every
//     clock at 2x rate). No decision depends on the holder's clock: renewals
//     keep it leader, a freeze still deposes it, the fence refuses it.
// ---------------------------------------------------------------------------

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// (real seconds, the process's own seconds) for `sleep 1` under FAKETIME.
fn skew_check(faketime: &str) -> (f64, f64, i64) {
    let t0 = Instant::now();
    let out = std::process::Command::new("sh")
        .args(["-c", "date +%s.%N; sleep 1; date +%s.%N"])
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME", faketime)
        .output()
        .expect("sh under faketime");
    let real = t0.elapsed().as_secs_f64();
    let lines: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    (real, lines[1] - lines[0], (lines[1] - now).round() as i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs libfaketime (Debian package faketime): cargo test --test faults -- --ignored --nocapture"]
async fn s11_full_clock_skew_faketime_fencing_holds() {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "scenario 11 needs {LIBFAKETIME}: install the Debian package `faketime` (apt-get install faketime)"
    );
    // The cases (wall clock +-30 s, every clock twice as fast), and
    // a clock at half speed, the direction no local deadline can survive:
    // the fence must hold anyway.
    for faketime in ["+30s", "-30s", "+0 x2", "-30s x2", "+0 x0.5"] {
        let (real, felt, offset) = skew_check(faketime);
        let scenario = format!("11 clock skew FAKETIME={faketime:?}");
        figure(
            &scenario,
            format!("the holder's clock: `sleep 1` took {real:.2} s real, {felt:.2} s by its clock; wall clock off by {offset} s"),
        );
        let env = [("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", faketime)];
        let (stale, refused) = holder_pause(&scenario, 3, &env, Duration::from_secs(10)).await;
        assert_eq!(stale, 0);
        assert!(refused >= 3);
    }
}
