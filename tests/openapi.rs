//! The HTTP API's contract, `GET /api/v1/openapi.json`, against a real
//! `tenure serve` on a real etcd: the document is OpenAPI 3.1 as
//! openapi-spec-validator reads it (and a broken copy is refused), it lists
//! every route under `/api/v1` and no route there is registered beside it,
//! and schemathesis with its default checks (every check: no 5xx, statuses,
//! content types, headers and bodies as documented, valid data accepted,
//! invalid data refused, credentials enforced, unsupported methods 405)
//! finds nothing, with `--api-token` (its bearer sent) and without (the
//! mutating calls disabled, and documented so); against a document that
//! describes a body the server does not send, it fails. Both tools come from the
//! venv `scripts/setup.sh --test` builds (`$TENURE_SCHEMATHESIS_VENV` picks
//! another).
//!
//! What schemathesis is told beyond the document, and why:
//! - `cursor` is a cursor the server gave (a page's `next_cursor`): it is
//!   opaque and checked (a cursor it did not give is a 400, which
//!   `tests/api/` checks), so no schema can say which strings are valid;
//! - 410 counts as a refusal of valid data like 404: a term renewed after it
//!   ended is gone (`term_gone`, as documented);
//! - not fuzzed: the live feed (it never ends), `/api/v1/report` (its
//!   window is at most 31 days with `from` before `to`) and `/metrics`
//!   (`scope=fleet` excludes `match`): constraints between parameters, which
//!   OpenAPI cannot state, so a schema-valid pair is refused. Their
//!   documents are still validated above.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::fixtures::{lead, tenure_client};
use support::{Etcd, Serve};
use tokio::process::Command;

const TOKEN: &str = "openapi-test-token";

/// Examples per operation and phase: bounded, so both runs take about a
/// minute each on two shared cores.
const MAX_EXAMPLES: &str = "40";

fn venv() -> PathBuf {
    std::env::var_os("TENURE_SCHEMATHESIS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/tenure-schemathesis/bin"))
}

async fn serve(etcd: &Etcd, dir: &Path, args: &[&str]) -> Serve {
    let s = Serve::start(&[etcd.endpoint()], &dir.join("h.db"), args, &[]).await;
    s.ready().await;
    s
}

async fn document(s: &Serve) -> Value {
    let r = reqwest::get(s.url("/api/v1/openapi.json")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    r.json().await.unwrap()
}

/// Runs a tool of the venv in `dir` (schemathesis keeps a cache of past
/// failures in its working directory: each run starts with none, and
/// leaves it in the test's temp dir); its exit status and output.
async fn run(dir: &Path, tool: &str, args: &[&str]) -> (bool, String) {
    let bin = venv().join(tool);
    assert!(
        bin.exists(),
        "{} is missing: scripts/setup.sh --test installs it",
        bin.display()
    );
    let out = Command::new(&bin)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Every operation the API serves, as `METHOD PATH`.
const OPERATIONS: &[&str] = &[
    "get /api/v1/elections",
    "get /api/v1/elections/{name}",
    "post /api/v1/elections/{name}/campaign",
    "post /api/v1/elections/{name}/renew",
    "post /api/v1/elections/{name}/resign",
    "post /api/v1/elections/{name}/fence",
    "get /api/v1/elections/{name}/terms",
    "get /api/v1/elections/{name}/events",
    "get /api/v1/elections/{name}/export",
    "get /api/v1/events",
    "get /api/v1/cluster/events",
    "get /api/v1/report",
    "get /api/v1/openapi.json",
    "get /healthz",
    "get /readyz",
    "get /metrics",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_openapi_3_1_and_lists_every_route() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = serve(
        &etcd,
        dir.path(),
        &["--api-token", TOKEN, "--max-ttl", "60"],
    )
    .await;
    let doc = document(&s).await;
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1."),
        "{}",
        doc["openapi"]
    );

    let mut listed: Vec<String> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                listed.push(format!("{method} {path}"));
            }
        }
    }
    listed.sort();
    let mut expected: Vec<String> = OPERATIONS.iter().map(|o| o.to_string()).collect();
    expected.sort();
    assert_eq!(listed, expected);
    no_route_is_registered_beside_the_document();

    // Credentials: the mutating calls take the API token, reads optionally
    // the read token, the probes none.
    let security = |op: &str| {
        let (method, path) = op.split_once(' ').unwrap();
        doc["paths"][path][method]["security"].clone()
    };
    assert_eq!(
        security("post /api/v1/elections/{name}/campaign"),
        serde_json::json!([{"api_token": []}])
    );
    assert_eq!(
        security("get /api/v1/elections")[0],
        serde_json::json!({}),
        "reads are open without --read-token"
    );
    assert_eq!(security("get /readyz"), serde_json::json!([{}]));
    // This server's limit is the document's.
    assert_eq!(
        doc["components"]["schemas"]["CampaignBody"]["properties"]["ttl_seconds"]["maximum"],
        60
    );

    let file = dir.path().join("openapi.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let (ok, said) = run(
        dir.path(),
        "openapi-spec-validator",
        &[file.to_str().unwrap()],
    )
    .await;
    assert!(ok, "openapi-spec-validator: {said}");
    println!("openapi-spec-validator: {}", said.trim());
    // The validator can fail: a response without its description is refused.
    let mut broken = doc.clone();
    broken["paths"]["/api/v1/elections"]["get"]["responses"]["200"]
        .as_object_mut()
        .unwrap()
        .remove("description");
    std::fs::write(&file, broken.to_string()).unwrap();
    let (ok, said) = run(
        dir.path(),
        "openapi-spec-validator",
        &[file.to_str().unwrap()],
    )
    .await;
    assert!(!ok, "a broken document passed: {said}");
}

/// Routes under `/api/v1` are registered through the documented router
/// only (`routes!`): an axum `.route("/api/v1…")` anywhere in src/web would
/// serve what the document does not say. The two allowed: the document
/// itself and the 404 for anything else.
fn no_route_is_registered_beside_the_document() {
    let mut files = vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/web")];
    let mut found = Vec::new();
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            if line.contains(".route(\"/api/v1") && !line.contains("/api/v1/{*rest}") {
                found.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "routes outside the document: {found:#?}");
}

/// A cursor `s` gives: elections to page through first.
async fn a_cursor(etcd: &Etcd, s: &Serve) -> String {
    let c = tenure_client(&[etcd.endpoint()]).await;
    let held = [lead(&c, "a", "x", 30).await, lead(&c, "b", "y", 30).await];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let page: Value = reqwest::get(s.url("/api/v1/elections?limit=1"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(cursor) = page["next_cursor"].as_str() {
            drop(held);
            return cursor.to_owned();
        }
        assert!(Instant::now() < deadline, "no second page: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// schemathesis against `s` with every default check; `extra` adds flags.
async fn schemathesis(etcd: &Etcd, s: &Serve, dir: &Path, extra: &[&str]) {
    let config = dir.join("schemathesis.toml");
    let cursor = a_cursor(etcd, s).await;
    std::fs::write(
        &config,
        format!(
            "[checks.positive_data_acceptance]\n\
             expected-statuses = [\"2xx\", \"3xx\", \"401\", \"403\", \"404\", \"409\", \"410\", \"429\", \"5xx\"]\n\
             [parameters]\n\
             \"query.cursor\" = \"{cursor}\"\n"
        ),
    )
    .unwrap();
    let doc_url = s.url("/api/v1/openapi.json");
    let base = s.url("");
    let mut args = vec![
        "--config-file",
        config.to_str().unwrap(),
        "run",
        doc_url.as_str(),
        "--url",
        base.as_str(),
        "--max-examples",
        MAX_EXAMPLES,
        "--seed",
        "34",
        "--request-timeout",
        "20",
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--no-color",
        // The module's documentation says why these three are not fuzzed.
        "--exclude-path",
        "/api/v1/events",
        "--exclude-path",
        "/api/v1/report",
        "--exclude-path",
        "/metrics",
    ];
    args.extend_from_slice(extra);
    let started = Instant::now();
    let (ok, said) = run(dir, "schemathesis", &args).await;
    let took = started.elapsed();
    let tail: Vec<&str> = said.lines().rev().take(12).collect();
    println!(
        "schemathesis {extra:?}: {:.0} s\n{}",
        took.as_secs_f64(),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    assert!(ok, "schemathesis found problems:\n{said}");
    assert!(took < Duration::from_secs(300), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_with_an_api_token() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = serve(
        &etcd,
        dir.path(),
        &["--api-token", TOKEN, "--max-ttl", "10"],
    )
    .await;
    let bearer = format!("Authorization: Bearer {TOKEN}");
    schemathesis(&etcd, &s, dir.path(), &["-H", bearer.as_str()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_without_an_api_token() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = serve(&etcd, dir.path(), &[]).await;
    // The document says what this server does: no credential helps.
    let doc = document(&s).await;
    let campaign = &doc["paths"]["/api/v1/elections/{name}/campaign"]["post"];
    assert_eq!(campaign["security"], serde_json::json!([{}]));
    assert!(campaign["description"]
        .as_str()
        .unwrap()
        .contains("api_disabled"));
    schemathesis(&etcd, &s, dir.path(), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_read_token_the_document_says_reads_need_it() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = serve(&etcd, dir.path(), &["--read-token", "r"]).await;
    let r = reqwest::Client::new()
        .get(s.url("/api/v1/openapi.json"))
        .bearer_auth("r")
        .send()
        .await
        .unwrap();
    let doc: Value = r.json().await.unwrap();
    assert_eq!(
        doc["paths"]["/api/v1/elections"]["get"]["security"],
        serde_json::json!([{"read_token": []}, {"read_basic": []}])
    );
    assert_eq!(
        doc["paths"]["/readyz"]["get"]["security"],
        serde_json::json!([{}])
    );
}

/// The run can fail: against a document whose list answer requires a field
/// the server does not send, schemathesis reports the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_catches_a_body_unlike_the_document() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = serve(&etcd, dir.path(), &[]).await;
    let mut doc = document(&s).await;
    doc["components"]["schemas"]["ElectionList"]["required"]
        .as_array_mut()
        .unwrap()
        .push("pages".into());
    let file = dir.path().join("wrong.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let base = s.url("");
    let (ok, said) = run(
        dir.path(),
        "schemathesis",
        &[
            "run",
            file.to_str().unwrap(),
            "--url",
            base.as_str(),
            "--include-path",
            "/api/v1/elections",
            "--include-method",
            "GET",
            "--max-examples",
            "5",
            "--max-failures",
            "1",
            "--no-shrink",
            "--generation-database",
            "none",
            "--no-color",
        ],
    )
    .await;
    assert!(!ok, "a body unlike the document passed:\n{said}");
    assert!(said.contains("pages"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_auth_the_document_says_which_hosts_a_mutating_call_may_name() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = serve(&etcd, dir.path(), &["--no-auth"]).await;
    let doc = document(&s).await;
    for call in ["campaign", "renew", "resign", "fence"] {
        let op = &doc["paths"][format!("/api/v1/elections/{{name}}/{call}")]["post"];
        assert!(
            op["description"]
                .as_str()
                .unwrap()
                .contains("host_not_allowed"),
            "{call}: {op}"
        );
        let forbidden = op["responses"]["403"]["description"].as_str().unwrap();
        for code in ["host_not_allowed", "origin_not_allowed", "--allowed-host"] {
            assert!(forbidden.contains(code), "{call}: {forbidden}");
        }
    }
}
