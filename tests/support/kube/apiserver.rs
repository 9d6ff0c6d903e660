//! kube-apiserver as the tests run it: started by
//! `scripts/kube/start-apiserver.sh` on the harness etcd, its admin's
//! requests (curl with the admin token and CA), Leases written through it.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::{apiserver_bin, micro_time, repo, spawn, unix_us, KubeApiserver};

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
