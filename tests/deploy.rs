//! deploy/: the files an operator installs, checked by the tools that read
//! them. The systemd unit by `systemd-analyze verify` (which exits 0 on an
//! unknown key or a bad value, so its output is the verdict: none at all)
//! and `systemd-analyze security --offline` (exposure at most 2.0, "OK");
//! a copy with a misspelt directive, and one without its hardening, are
//! caught. Every Kubernetes manifest goes to a real kube-apiserver with
//! `?dryRun=All&fieldValidation=Strict` (decoded, validated, admitted, not
//! stored; an unknown field is an error) and what the server made of it is
//! read back; the ServiceMonitor is skipped, saying so, where its CRD is
//! not installed (the test's kube-apiserver has none).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use support::kube::{self, KubeApiserver};
use support::Etcd;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `systemd-analyze ARGS… FILE`: exit status and everything it printed.
fn analyze(args: &[&str], unit: &Path) -> (bool, String) {
    let out = Command::new("systemd-analyze")
        .args(args)
        .arg(unit)
        .output()
        .expect("systemd-analyze (scripts/setup.sh --test installs systemd)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The unit as shipped, or edited by `edit`, in a directory of its own.
fn unit_copy(dir: &Path, edit: impl Fn(&str) -> String) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("deploy/systemd/tenure.service")).unwrap();
    let path = dir.join("tenure.service");
    std::fs::write(&path, edit(&text)).unwrap();
    path
}

#[test]
fn the_systemd_unit_is_valid_and_hardened() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_copy(dir.path(), str::to_owned);
    let (ok, said) = analyze(&["verify", "--man=no"], &unit);
    assert!(
        ok && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
    let (ok, said) = analyze(&["security", "--offline=true", "--threshold=20"], &unit);
    assert!(ok, "exposure above 2.0:\n{said}");
    let score = said
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for tenure.service: ")
                .nth(1)
        })
        .expect("an overall exposure level");
    println!("systemd-analyze security: {score}");
    let text = std::fs::read_to_string(&unit).unwrap();
    for line in [
        "User=tenure",
        "StateDirectory=tenure",
        "ProtectSystem=strict",
        "LoadCredential=api-token:/etc/tenure/api-token",
        "Restart=on-failure",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} is not in the unit");
    }

    // The checks can fail: a misspelt directive and a bad value are said…
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    let misspelt = unit_copy(&bad, |t| {
        t.replace("Restart=on-failure", "Restrat=on-failure")
            .replace("ProtectSystem=strict", "ProtectSystem=strcit")
    });
    let (_, said) = analyze(&["verify", "--man=no"], &misspelt);
    assert!(
        said.contains("Restrat") && said.contains("strcit"),
        "{said}"
    );
    // …and a unit without its hardening is over the threshold.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    let unhardened = unit_copy(&open, |t| {
        t.lines()
            .take_while(|l| !l.starts_with("# Hardening"))
            .chain(["[Install]", "WantedBy=multi-user.target"])
            .collect::<Vec<_>>()
            .join("\n")
    });
    let (ok, said) = analyze(
        &["security", "--offline=true", "--threshold=20"],
        &unhardened,
    );
    assert!(!ok, "an unhardened unit passed:\n{said}");
}

/// One YAML document of a manifest: what the API needs to route it.
#[derive(Debug, Clone)]
struct Doc {
    file: String,
    api_version: String,
    kind: String,
    name: String,
    namespace: Option<String>,
    text: String,
}

/// A top-level `key: value` of a document, or one of its `metadata`.
fn field(text: &str, indent: &str, key: &str) -> Option<String> {
    let mut in_metadata = indent.is_empty();
    for line in text.lines() {
        if !indent.is_empty() {
            if line == "metadata:" {
                in_metadata = true;
                continue;
            }
            if in_metadata && !line.starts_with(' ') && !line.is_empty() {
                in_metadata = false;
            }
        }
        if !in_metadata {
            continue;
        }
        if let Some(v) = line.strip_prefix(&format!("{indent}{key}: ")) {
            return Some(v.trim().trim_matches('"').to_owned());
        }
    }
    None
}

fn manifests() -> Vec<Doc> {
    let dir = repo().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for part in text.split("\n---\n") {
            let Some(kind) = field(part, "", "kind") else {
                continue;
            };
            docs.push(Doc {
                file: path.file_name().unwrap().to_string_lossy().into_owned(),
                api_version: field(part, "", "apiVersion").expect("apiVersion"),
                kind,
                name: field(part, "  ", "name").expect("metadata.name"),
                namespace: field(part, "  ", "namespace"),
                text: part.to_owned(),
            });
        }
    }
    docs
}

/// The collection a document is created in.
fn collection(d: &Doc) -> String {
    let group = if d.api_version == "v1" {
        "/api/v1".to_owned()
    } else {
        format!("/apis/{}", d.api_version)
    };
    let plural = format!("{}s", d.kind.to_lowercase());
    match &d.namespace {
        Some(ns) => format!("{group}/namespaces/{ns}/{plural}"),
        None => format!("{group}/{plural}"),
    }
}

const DRY: &str = "?dryRun=All&fieldValidation=Strict";

/// Sends `d` as a dry run: the object the server would have stored.
async fn dry_run(api: &KubeApiserver, d: &Doc) -> Value {
    let path = format!("{}{DRY}", collection(d));
    let (status, body) = api
        .curl_as("POST", &path, "application/yaml", Some(&d.text))
        .await;
    assert_eq!(status, 201, "{} {} ({}): {body}", d.kind, d.name, d.file);
    let made: Value = serde_json::from_str(&body).unwrap();
    // Not stored.
    let (status, _) = api
        .curl("GET", &format!("{}/{}", collection(d), d.name), None)
        .await;
    assert_eq!(status, 404, "{} {} was stored by a dry run", d.kind, d.name);
    made
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_manifest_passes_a_server_side_dry_run() {
    if !kube::available() {
        return;
    }
    let etcd = Etcd::start().await;
    let api = KubeApiserver::start(&etcd.endpoint()).await;
    let docs = manifests();
    let kinds: Vec<&str> = docs.iter().map(|d| d.kind.as_str()).collect();
    for k in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Secret",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
        "ServiceMonitor",
    ] {
        assert!(kinds.contains(&k), "no {k} in deploy/kubernetes: {kinds:?}");
    }
    // The namespace first (dry), then for real: the others are dry runs in it.
    let ns = docs.iter().find(|d| d.kind == "Namespace").unwrap();
    dry_run(&api, ns).await;
    let (status, body) = api
        .curl_as(
            "POST",
            "/api/v1/namespaces",
            "application/yaml",
            Some(&ns.text),
        )
        .await;
    assert_eq!(status, 201, "{body}");

    let mut made = Vec::new();
    for d in docs.iter().filter(|d| d.kind != "Namespace") {
        if d.api_version.starts_with("monitoring.coreos.com/") {
            let (status, _) = api
                .curl("GET", "/apis/monitoring.coreos.com/v1", None)
                .await;
            assert_eq!(
                status, 404,
                "the CRD is installed: dry-run the ServiceMonitor"
            );
            println!("skipped {} ({}): its CRD is not installed", d.kind, d.file);
            continue;
        }
        made.push((d.kind.clone(), dry_run(&api, d).await));
        println!("dry run: {} {} ({}) accepted", d.kind, d.name, d.file);
    }
    check_what_the_server_made(&made);

    // The dry run can fail: a misspelt field is refused (Strict), as is a bad value.
    let dep = docs.iter().find(|d| d.kind == "Deployment").unwrap();
    for (from, to) in [
        ("readinessProbe:", "readinesProbe:"),
        ("containerPort: 8080", "containerPort: 808080"),
    ] {
        let mut broken = dep.clone();
        broken.text = dep.text.replace(from, to);
        let (status, body) = api
            .curl_as(
                "POST",
                &format!("{}{DRY}", collection(dep)),
                "application/yaml",
                Some(&broken.text),
            )
            .await;
        assert!(status == 400 || status == 422, "{to}: {status} {body}");
    }
}

/// What the manifests promise, read from the objects the server decoded.
fn check_what_the_server_made(made: &[(String, Value)]) {
    let of = |kind: &str| {
        made.iter()
            .find(|(k, _)| k == kind)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let role = of("ClusterRole");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                "verbs": ["get", "list", "watch"]}]),
        "the role reads Leases and nothing else"
    );
    let pod = &of("Deployment")["spec"]["template"];
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(c["resources"]["requests"]["cpu"].is_string(), "{c}");
    assert!(c["resources"]["requests"]["memory"].is_string(), "{c}");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        c["env"][0]["valueFrom"]["secretKeyRef"]["name"],
        "tenure-api-token"
    );
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v["secret"]["secretName"] == "tenure-etcd-client"),
        "{volumes:?}"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
    assert_eq!(pod["spec"]["serviceAccountName"], "tenure");
}
