//! Users of kube-apiserver other than its admin: tenure's ServiceAccount as
//! deploy/kubernetes ships it, its token and kubeconfig, and a kubeconfig
//! whose user is an exec credential plugin.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use super::{repo, KubeApiserver};

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
