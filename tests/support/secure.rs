//! TLS and authentication for the harness's etcd: certificates made by the
//! `openssl` command (Debian's `openssl` package, no Rust dependency), the
//! etcd flags that use them, and `etcdctl` to set up users and roles.
//!
//! Certificates (EC P-256) in a temp dir, see [`Pki::path`]:
//! `ca.crt` signs `server.crt` (subjectAltName IP 127.0.0.1), `client.crt`
//! (CN `tenure-client`), `wrong-name.crt` (DNS `elsewhere.invalid` only) and
//! `expired.crt` (notAfter = the second it was made, so it is expired only
//! from the next second on: [`Pki::until_expired`]); `other-ca.crt` signs
//! nothing etcd knows.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

use super::fixtures::text;
use super::{EtcdFlags, Serve};

pub struct Pki {
    dir: TempDir,
    /// When the certificates were signed (after `expired.crt` was).
    made: Instant,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (Debian package openssl; scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    pub fn generate() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("tenure-pki-")
            .tempdir()
            .expect("temp dir for certificates");
        let d = dir.path();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            let (key, crt, subj) = (
                format!("{ca}.key"),
                format!("{ca}.crt"),
                format!("/CN=tenure test {ca}"),
            );
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &crt, "-days", "2", "-subj", &subj]);
            openssl(d, &args);
        }
        let leaf = |name: &str, cn: &str, ext: &str, days: &str| {
            std::fs::write(d.join(format!("{name}.ext")), ext).expect("write ext");
            let (key, csr, crt, extf, subj) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("{name}.ext"),
                format!("/CN={cn}"),
            );
            let mut args = vec!["req"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
            openssl(d, &args);
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-out",
                    &crt,
                    "-days",
                    days,
                    "-extfile",
                    &extf,
                ],
            );
        };
        let server = "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
        leaf("server", "etcd", server, "2");
        leaf("expired", "etcd", server, "0");
        leaf(
            "wrong-name",
            "etcd",
            "subjectAltName=DNS:elsewhere.invalid\nextendedKeyUsage=serverAuth\n",
            "2",
        );
        leaf(
            "client",
            "tenure-client",
            "extendedKeyUsage=clientAuth\n",
            "2",
        );
        Pki {
            dir,
            made: Instant::now(),
        }
    }

    /// Waits until `expired.crt` has expired. Its notAfter is the second it
    /// was signed in, and a certificate is valid through its notAfter: a
    /// handshake in that same second accepts it (seen in CI when the test's
    /// earlier cases ran fast).
    pub async fn until_expired(&self) {
        let expired_at = self.made + Duration::from_millis(1100);
        tokio::time::sleep_until(expired_at.into()).await;
    }

    /// e.g. `path("ca.crt")`, `path("client.key")`.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    pub fn arg(&self, file: &str) -> String {
        self.path(file).display().to_string()
    }

    /// Flags for an etcd serving clients over TLS with the certificate
    /// `server` (`"server"`, `"expired"`, `"wrong-name"`) and requiring
    /// client certificates signed by `ca.crt`.
    pub fn etcd_flags(&self, server: &str) -> EtcdFlags {
        let mut args: Vec<OsString> = Vec::new();
        for (k, v) in [
            ("--cert-file", self.path(&format!("{server}.crt"))),
            ("--key-file", self.path(&format!("{server}.key"))),
            ("--trusted-ca-file", self.path("ca.crt")),
        ] {
            args.push(k.into());
            args.push(v.into());
        }
        args.push("--client-cert-auth".into());
        EtcdFlags {
            https: true,
            args,
            bin: None,
        }
    }

    /// `--cacert ca.crt --cert client.crt --key client.key`, for etcdctl and tenure.
    pub fn client_args(&self) -> Vec<String> {
        vec![
            "--cacert".into(),
            self.arg("ca.crt"),
            "--cert".into(),
            self.arg("client.crt"),
            "--key".into(),
            self.arg("client.key"),
        ]
    }
}

/// Flags for JWT auth tokens (RS256, keys made by openssl in `pki`'s dir)
/// that expire `ttl_seconds` after they were issued, used or not.
pub fn jwt_tokens(pki: &Pki, ttl_seconds: u32) -> EtcdFlags {
    let d = pki.dir.path();
    openssl(d, &["genrsa", "-out", "jwt.key", "2048"]);
    openssl(d, &["rsa", "-in", "jwt.key", "-pubout", "-out", "jwt.pub"]);
    let spec = format!(
        "jwt,pub-key={},priv-key={},sign-method=RS256,ttl={ttl_seconds}s",
        pki.arg("jwt.pub"),
        pki.arg("jwt.key")
    );
    EtcdFlags {
        https: false,
        args: vec!["--auth-token".into(), spec.into()],
        bin: None,
    }
}

/// Adds `--auth-token-ttl SECONDS` (simple tokens) to `flags`.
pub fn with_token_ttl(mut flags: EtcdFlags, seconds: u32) -> EtcdFlags {
    flags.args.push("--auth-token-ttl".into());
    flags.args.push(seconds.to_string().into());
    flags
}

/// Runs etcdctl (v3 API) against `endpoint` with `extra` flags (TLS, user);
/// panics with its output when it fails.
pub fn etcdctl(endpoint: &str, extra: &[String], args: &[&str]) -> Output {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(endpoint)
        .args(extra)
        .args(args)
        .output()
        .expect("run etcdctl");
    assert!(
        out.status.success(),
        "etcdctl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Enables authentication with a root user (password `root-pw`) and, for
/// each `(user, password, role, permission)`, a user with one role:
/// `readwrite` on the prefixes `election/` and `fence/` (what campaign and
/// the fence need), or `read` on the range `election/`..`fence0` (what
/// serve needs: it watches that one range). A `permission` of `""` makes a
/// user without a role.
pub fn enable_auth(endpoint: &str, extra: &[String], users: &[(&str, &str, &str, &str)]) {
    etcdctl(
        endpoint,
        extra,
        &["user", "add", "root", "--new-user-password", "root-pw"],
    );
    etcdctl(endpoint, extra, &["user", "grant-role", "root", "root"]);
    for (user, password, role, permission) in users {
        etcdctl(
            endpoint,
            extra,
            &["user", "add", user, "--new-user-password", password],
        );
        if permission.is_empty() {
            continue;
        }
        etcdctl(endpoint, extra, &["role", "add", role]);
        let grants: Vec<Vec<&str>> = match *permission {
            "read" => vec![vec!["read", "election/", "fence0"]],
            _ => vec![
                vec!["--prefix=true", permission, "election/"],
                vec!["--prefix=true", permission, "fence/"],
            ],
        };
        for grant in grants {
            let mut args = vec!["role", "grant-permission", role];
            args.extend(grant);
            etcdctl(endpoint, extra, &args);
        }
        etcdctl(endpoint, extra, &["user", "grant-role", user, role]);
    }
    etcdctl(endpoint, extra, &["auth", "enable"]);
}

// ---------------------------------------------------------------------------
// Running `tenure` against a secured etcd.
// ---------------------------------------------------------------------------

/// Runs tenure; returns its output and how long it took.
pub async fn timed(mut cmd: tokio::process::Command) -> (Output, Duration) {
    let t0 = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("tenure finished within 30 s")
        .expect("run tenure");
    (out, t0.elapsed())
}

/// Asserts exit 1 within 10 s with one stderr line containing `want`.
pub async fn fails_fast(what: &str, cmd: tokio::process::Command, want: &str) {
    let (out, took) = timed(cmd).await;
    let err = text(&out.stderr);
    eprintln!("{what}: {took:?}: {}", err.trim_end());
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: exit code; stderr: {err}"
    );
    assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: one line: {err}");
    assert!(err.contains(want), "{what}: {want:?} not in {err:?}");
}

pub async fn api(s: &Serve, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let http = reqwest::Client::new();
    let req = match method {
        "POST" => http.post(s.url(path)).json(&body.unwrap_or(json!({}))),
        _ => http.get(s.url(path)),
    };
    let resp = req.send().await.expect("HTTP request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Waits until serve's history (GET /api/v1/elections) has `name` led with `token`.
pub async fn recorded(s: &Serve, name: &str, token: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, list) = api(s, "GET", "/api/v1/elections", None).await;
        let found = list["elections"].as_array().is_some_and(|rows| {
            rows.iter()
                .any(|r| r["name"] == name && r["token"].as_i64() == Some(token))
        });
        if found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "serve never recorded {name} with token {token}: {list} {:?}",
            s.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
