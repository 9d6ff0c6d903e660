//! Within the scenario: `tenure leader` on the Lease, from etcd and through
//! the API, against the Lease as kube-apiserver returns it and the test's
//! etcd watch.

use std::time::Duration;

use serde_json::Value;

use crate::support::kube::{self, KubeApiserver};
use crate::{LEASE_API, NAME};

/// `tenure leader NAME --json` with `args`; its exit code, the JSON it
/// printed (`Null` when none) and its stderr.
async fn leader(endpoint: &str, args: &[&str]) -> (Option<i32>, Value, String) {
    let out = tokio::process::Command::new(crate::support::tenure_bin())
        .args(["leader", NAME, "--json"])
        .args(args)
        .env("TENURE_ENDPOINTS", endpoint)
        .env_remove("TENURE_SOURCES")
        .env_remove("TENURE_PREFIX")
        .output()
        .await
        .expect("tenure leader");
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), json, err)
}

/// `tenure leader` from etcd and through the API, against the Lease as
/// kube-apiserver returns it (its holder frozen: nothing writes it) and
/// the test's own etcd watch (`token`: the revision of the write that gave
/// it to its holder). Whether it lapsed (`lapsed`: read once its renewTime
/// plus duration passed, else before), by its own clock fields.
pub(crate) async fn leader_agrees(
    api: &KubeApiserver,
    etcd: &str,
    kubeconfig: &str,
    token: i64,
    lapsed: bool,
) {
    let (status, body) = api.curl("GET", LEASE_API, None).await;
    assert_eq!(status, 200, "{body}");
    let lease: Value = serde_json::from_str(&body).unwrap();
    let spec = &lease["spec"];
    let rv: i64 = lease["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let from_etcd = ["--source", "kubernetes:/registry/"];
    let through_api = ["--kubeconfig", kubeconfig];
    for (args, token_is, want) in [
        (&from_etcd, "acquisition", token),
        (&through_api, "value_revision", rv),
    ] {
        let (got, before, after) = loop {
            let before = kube::unix_us();
            let (code, got, err) = leader(etcd, args).await;
            let after = kube::unix_us();
            assert_eq!(code, Some(0), "{args:?}: {err}");
            let out = got["runs_out_us"].as_i64().unwrap_or(i64::MAX);
            // Lapsed wanted: read again once its moment passed.
            if !lapsed || before > out {
                break (got, before, after);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(got["holder"], spec["holderIdentity"], "{got}");
        // A plain identity (`e`) names no pod.
        assert_eq!(got["pod"], Value::Null, "{got}");
        let token_got = (got["token"].as_i64(), got["token_is"].as_str());
        assert_eq!(token_got, (Some(want), Some(token_is)), "{got}");
        assert_eq!(got["revision"].as_i64(), Some(rv), "{got}");
        let time = |k: &str| got[k].as_i64().map(kube::micro_time);
        let renewed = spec["renewTime"].as_str();
        assert_eq!(time("renewed_us").as_deref(), renewed, "{got}");
        let acquired = spec["acquireTime"].as_str();
        assert_eq!(time("acquired_us").as_deref(), acquired, "{got}");
        assert_eq!(
            got["duration_seconds"], spec["leaseDurationSeconds"],
            "{got}"
        );
        assert_eq!(got["transitions"], spec["leaseTransitions"], "{got}");
        // renewTime (checked above) plus the duration, on the test's clock.
        let out = got["renewed_us"].as_i64().unwrap()
            + spec["leaseDurationSeconds"].as_i64().unwrap() * 1_000_000;
        assert_eq!(got["runs_out_us"].as_i64(), Some(out), "{got}");
        if lapsed {
            assert!(before > out);
        } else {
            assert!(
                after < out,
                "read {} µs after it ran out: too late",
                after - out
            );
        }
        assert_eq!(got["lapsed"], lapsed, "{got}");
    }
}

/// Nobody holds the Lease: `tenure leader` says so both ways, exit 1.
pub(crate) async fn leader_says_nobody(etcd: &str, kubeconfig: &str) {
    for args in [
        ["--source", "kubernetes:/registry/"],
        ["--kubeconfig", kubeconfig],
    ] {
        let (code, got, err) = leader(etcd, &args).await;
        assert_eq!(code, Some(1), "{args:?}: {got} {err}");
        assert!(err.contains("nobody leads"), "{err}");
    }
}
