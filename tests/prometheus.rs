//! The Grafana dashboard and the Prometheus rules in `grafana/`, checked by
//! the real tools: `promtool check rules` and `promtool test rules`, and a
//! real Prometheus (Debian's `prometheus` package, installed by
//! `scripts/setup.sh`) on loopback scraping a real `tenure serve` while a
//! scripted scenario runs against a real etcd. Through Prometheus' HTTP API
//! the test asserts that every query of the dashboard returns data and that
//! the alerts become active for the scenario that should fire them.
//!
//! Environment overrides: `TENURE_TEST_PROMETHEUS_BIN` (default
//! `/usr/bin/prometheus`), `TENURE_TEST_PROMTOOL_BIN` (default
//! `/usr/bin/promtool`).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_client::PutOptions;
use serde_json::Value;
use support::{Etcd, Serve};
use tenure::election::{CampaignOptions, Campaigned, Client, ElectionName, Leadership, Ttl};

const PROMETHEUS_BIN: &str = "/usr/bin/prometheus";
const PROMTOOL_BIN: &str = "/usr/bin/promtool";
/// How long Prometheus may take to answer `/-/ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an alert may take to become active once its condition holds.
const ALERT_TIMEOUT: Duration = Duration::from_secs(30);
/// Scrape and rule evaluation interval of the test's Prometheus, in seconds.
const SCRAPE_SECS: u64 = 1;
/// What Grafana makes of `$__rate_interval` with this scrape interval and a
/// 1 s step: max($__interval + scrape interval, 4 × scrape interval).
const RATE_INTERVAL: &str = "4s";
/// `$__interval`: the step of the range queries.
const STEP_SECS: u64 = 1;

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_file(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn bin(env: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup.sh (it installs Debian's prometheus package, \
         which provides prometheus and promtool), or set {env}",
        path.display()
    );
    path
}

fn promtool(args: &[&Path]) -> String {
    let out = Command::new(bin("TENURE_TEST_PROMTOOL_BIN", PROMTOOL_BIN))
        .args(args)
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {args:?} failed ({}):\n{text}",
        out.status
    );
    text
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------------------
// The rules file, and its fast variant for the live test.
// ---------------------------------------------------------------------------

/// `alerts.yaml` with every minute read as a second: `for: 5m` becomes
/// `for: 5s` and `[15m]` becomes `[15s]` (comment lines are left alone).
///
/// Why: the real rules wait minutes (churn is 4 changes in 15 minutes, for 5
/// minutes), and a test that waits that long would not be run. Scaling every
/// duration by the same factor keeps each rule's shape (the window against
/// `for`, against the 1 s scrape interval) while the expressions, labels and
/// annotations stay exactly those of the shipped file. The shipped file
/// itself is checked unchanged by `promtool check rules` and its own unit
/// tests (`alerts.test.yaml`).
fn fast_rules(yaml: &str) -> String {
    let mut out = String::with_capacity(yaml.len());
    for line in yaml.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let line = if trimmed.starts_with('#') {
            line.to_owned()
        } else if let Some(d) = trimmed.strip_prefix("for: ") {
            let minutes = d
                .strip_suffix('m')
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .unwrap_or_else(|| panic!("`for:` not in whole minutes: {line:?}"));
            format!("{indent}for: {minutes}s")
        } else {
            minutes_windows_to_seconds(line)
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Every `[<digits>m]` in `line` as `[<digits>s]`; any other range or
/// subquery window is refused (the scaling would not cover it).
fn minutes_windows_to_seconds(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..=open]);
        rest = &rest[open + 1..];
        let close = rest
            .find(']')
            .unwrap_or_else(|| panic!("unclosed [ in {line:?}"));
        let window = &rest[..close];
        let minutes = window
            .strip_suffix('m')
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .unwrap_or_else(|| panic!("window [{window}] is not whole minutes in {line:?}"));
        out.push_str(minutes);
        out.push('s');
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

#[test]
fn promtool_checks_and_unit_tests_the_rules() {
    let rules = repo_file("grafana/alerts.yaml");
    let out = promtool(&[Path::new("check"), Path::new("rules"), &rules]);
    assert!(out.contains("SUCCESS"), "{out}");
    let out = promtool(&[
        Path::new("test"),
        Path::new("rules"),
        &repo_file("grafana/alerts.test.yaml"),
    ]);
    assert!(out.contains("SUCCESS"), "{out}");

    // The fast variant the live test loads is valid too, and really fast.
    let fast = fast_rules(&read("grafana/alerts.yaml"));
    assert!(!fast.contains("m]") && !fast.contains("for: 2m"), "{fast}");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("alerts.fast.yaml");
    std::fs::write(&path, fast).expect("write fast rules");
    promtool(&[Path::new("check"), Path::new("rules"), &path]);
}

#[test]
fn every_alert_has_for_severity_summary_description_and_dashboard() {
    let rules = read("grafana/alerts.yaml");
    let mut alerts = Vec::new();
    for block in rules.split("- alert: ").skip(1) {
        let name = block.lines().next().unwrap_or("").trim().to_owned();
        for needle in [
            "\n        for: ",
            "\n          severity: ",
            "\n          summary: ",
            "\n          description: ",
            "\n          dashboard: 'https://grafana.example.com/d/tenure-elections/",
        ] {
            assert!(block.contains(needle), "{name} lacks {needle:?}");
        }
        alerts.push(name);
    }
    for want in [
        "TenureElectionNoLeader",
        "TenureLeaderChurn",
        "TenureFencingRefusal",
        "TenureLeaseNearExpiry",
        "TenureWatcherDown",
    ] {
        assert!(
            alerts.iter().any(|a| a == want),
            "{want} missing: {alerts:?}"
        );
        assert!(
            read("grafana/README.md").contains(&format!("### {want}")),
            "grafana/README.md does not explain {want}"
        );
    }
    let tests = read("grafana/alerts.test.yaml");
    for a in &alerts {
        assert!(
            tests.contains(&format!("alertname: {a}\n        exp_alerts:\n          -")),
            "alerts.test.yaml never shows {a} firing"
        );
        assert!(
            tests.contains(&format!("alertname: {a}\n        exp_alerts: []")),
            "alerts.test.yaml never shows {a} not firing"
        );
    }
}

// ---------------------------------------------------------------------------
// The dashboard.
// ---------------------------------------------------------------------------

struct Query {
    panel: String,
    expr: String,
    instant: bool,
}

fn dashboard() -> Value {
    serde_json::from_str(&read("grafana/tenure-dashboard.json")).expect("dashboard is JSON")
}

/// Every query of the dashboard: panel targets (rows' nested panels too) and
/// annotation queries.
fn dashboard_queries(d: &Value) -> Vec<Query> {
    fn panels<'a>(list: &'a [Value], out: &mut Vec<&'a Value>) {
        for p in list {
            out.push(p);
            if let Some(nested) = p["panels"].as_array() {
                panels(nested, out);
            }
        }
    }
    let mut all = Vec::new();
    panels(d["panels"].as_array().expect("panels"), &mut all);
    let mut queries = Vec::new();
    for p in all {
        for t in p["targets"].as_array().into_iter().flatten() {
            queries.push(Query {
                panel: p["title"].as_str().unwrap_or("?").to_owned(),
                expr: t["expr"]
                    .as_str()
                    .expect("every target has an expr")
                    .to_owned(),
                instant: t["instant"].as_bool() == Some(true),
            });
        }
    }
    for a in d["annotations"]["list"].as_array().into_iter().flatten() {
        if let Some(expr) = a["expr"].as_str() {
            queries.push(Query {
                panel: format!("annotation {}", a["name"].as_str().unwrap_or("?")),
                expr: expr.to_owned(),
                instant: false,
            });
        }
    }
    queries
}

/// Metric names (and recorded series) that carry an `election` label.
fn has_election_label(name: &str) -> bool {
    [
        "tenure_election_",
        "tenure_fencing_",
        "tenure:election_",
        "tenure:fencing_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// Each metric selector in `expr`: (name, the text between its braces).
fn selectors(expr: &str) -> Vec<(String, Option<String>)> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = expr.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (start, c) = chars[i];
        let prev_ident = i > 0 && is_ident(chars[i - 1].1);
        if c == 't' && !prev_ident && expr[start..].starts_with("tenure") {
            let mut j = i;
            while j < chars.len() && is_ident(chars[j].1) {
                j += 1;
            }
            let end = chars.get(j).map_or(expr.len(), |c| c.0);
            let name = expr[start..end].to_owned();
            let labels = expr[end..]
                .strip_prefix('{')
                .and_then(|r| r.find('}').map(|close| r[..close].to_owned()));
            out.push((name, labels));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn dashboard_is_importable_and_filters_by_election() {
    let d = dashboard();
    assert_eq!(d["uid"], "tenure-elections");
    assert!(
        d["schemaVersion"].as_i64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );
    assert!(d["id"].is_null(), "an importable dashboard has no id");
    let vars = d["templating"]["list"].as_array().expect("templating");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no ${name} variable"))
    };
    let ds = var("datasource");
    assert_eq!(
        (&ds["type"], &ds["query"]),
        (&"datasource".into(), &"prometheus".into())
    );
    let el = var("election");
    assert_eq!(el["type"], "query");
    assert_eq!(
        el["query"]["query"],
        "label_values(tenure_election_has_leader, election)"
    );
    assert_eq!(
        (&el["multi"], &el["includeAll"]),
        (&true.into(), &true.into())
    );
    assert_eq!(el["allValue"], ".*");

    // Every panel and query uses the datasource variable.
    let text = d.to_string();
    let mut uids = BTreeSet::new();
    fn walk(v: &Value, uids: &mut BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                if let Some(ds) = m.get("datasource") {
                    if ds["type"] == "prometheus" {
                        uids.insert(ds["uid"].as_str().unwrap_or("").to_owned());
                    }
                }
                m.values().for_each(|x| walk(x, uids));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, uids)),
            _ => {}
        }
    }
    walk(&d, &mut uids);
    assert_eq!(uids, BTreeSet::from(["${datasource}".to_owned()]));

    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().expect("panels") {
        assert!(
            ids.insert(p["id"].as_i64().expect("panel id")),
            "duplicate panel id"
        );
        assert!(p["gridPos"]["w"].as_i64().is_some(), "gridPos");
    }

    let queries = dashboard_queries(&d);
    assert!(queries.len() >= 20, "{} queries", queries.len());
    for q in &queries {
        for (name, labels) in selectors(&q.expr) {
            if has_election_label(&name) {
                assert!(
                    labels
                        .as_deref()
                        .is_some_and(|l| l.contains(r#"election=~"$election""#)),
                    "{}: {name} is not filtered by election=~\"$election\" in {}",
                    q.panel,
                    q.expr
                );
            }
        }
        // Rates and increases take $__rate_interval (or the whole range).
        let mut rest = q.expr.as_str();
        while let Some(open) = rest.find('[') {
            let close = rest[open..].find(']').expect("closed window") + open;
            let window = &rest[open + 1..close];
            assert!(
                window == "$__rate_interval" || window == "$__range",
                "{}: window [{window}] in {}",
                q.panel,
                q.expr
            );
            rest = &rest[close..];
        }
    }
    // Every metric tenure exposes is on the dashboard.
    for name in tenure::telemetry::METRIC_NAMES {
        assert!(text.contains(name), "{name} is on no panel");
    }
    // The recorded series it uses exist in the rules file.
    let rules = read("grafana/alerts.yaml");
    for q in &queries {
        for (name, _) in selectors(&q.expr) {
            if name.contains(':') {
                assert!(
                    rules.contains(&format!("record: {name}\n")),
                    "{name} is not recorded"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// A real Prometheus.
// ---------------------------------------------------------------------------

/// A Prometheus process on loopback with its data and config in a temp dir;
/// SIGKILLed and reaped on drop.
struct Prometheus {
    child: Child,
    addr: String,
    log: PathBuf,
    http: reqwest::Client,
    // Last: removed after the process is gone.
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second with `rules`
    /// loaded, and waits for `/-/ready` (a new port on each of 3 attempts).
    async fn start(target: &str, rules: &str) -> Prometheus {
        let mut failures = Vec::new();
        for attempt in 1..=3 {
            let dir = tempfile::Builder::new()
                .prefix("tenure-prometheus-")
                .tempdir()
                .expect("tempdir");
            let rules_path = dir.path().join("alerts.fast.yaml");
            std::fs::write(&rules_path, rules).expect("write rules");
            let config = dir.path().join("prometheus.yml");
            std::fs::write(
                &config,
                format!(
                    "global:\n  scrape_interval: {SCRAPE_SECS}s\n  scrape_timeout: {SCRAPE_SECS}s\n  \
                     evaluation_interval: {SCRAPE_SECS}s\nrule_files:\n  - {}\nscrape_configs:\n  \
                     - job_name: tenure\n    static_configs:\n      - targets: ['{target}']\n",
                    rules_path.display()
                ),
            )
            .expect("write prometheus.yml");
            let addr = format!("127.0.0.1:{}", support::free_port());
            let log = dir.path().join("prometheus.log");
            let log_file = File::create(&log).expect("log file");
            let mut cmd = Command::new(bin("TENURE_TEST_PROMETHEUS_BIN", PROMETHEUS_BIN));
            cmd.arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .stdin(Stdio::null())
                .stdout(log_file.try_clone().expect("log file"))
                .stderr(log_file);
            // SAFETY: only prctl(2), async-signal-safe, between fork and exec:
            // Prometheus dies with the test binary even if it is SIGKILLed.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                        .map_err(std::io::Error::from)
                });
            }
            let child = cmd.spawn().expect("spawn prometheus");
            let mut p = Prometheus {
                child,
                addr,
                log,
                http: reqwest::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .build()
                    .expect("http client"),
                _dir: dir,
            };
            match p.await_ready().await {
                Ok(()) => return p,
                Err(why) => failures.push(format!("attempt {attempt}: {why}\n{}", p.logs())),
            }
        }
        panic!("Prometheus did not start:\n{}", failures.join("\n"));
    }

    async fn await_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited: {status}"));
            }
            if let Ok(r) = self.http.get(self.url("/-/ready")).send().await {
                if r.status().is_success() {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("not ready within {READY_TIMEOUT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn logs(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(40)..];
        format!(
            "--- last lines of {} ---\n{}",
            self.log.display(),
            tail.join("\n")
        )
    }

    /// GET an API path with query parameters; returns `data`.
    async fn api(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let url = reqwest::Url::parse_with_params(&self.url(path), params).expect("url");
        let resp = self
            .http
            .get(url.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}\n{}", self.logs()));
        let body: Value = resp
            .json()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"));
        assert_eq!(body["status"], "success", "GET {url}: {body}");
        body["data"].clone()
    }

    /// An instant query's result vector.
    async fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api("/api/v1/query", &[("query", expr)]).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    async fn query_range(&self, expr: &str, start: f64, end: f64) -> Vec<Value> {
        let (start, end, step) = (
            format!("{start:.3}"),
            format!("{end:.3}"),
            format!("{STEP_SECS}"),
        );
        let data = self
            .api(
                "/api/v1/query_range",
                &[
                    ("query", expr),
                    ("start", &start),
                    ("end", &end),
                    ("step", &step),
                ],
            )
            .await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// Active alerts (pending and firing).
    async fn alerts(&self) -> Vec<Alert> {
        let data = self.api("/api/v1/alerts", &[]).await;
        let strings = |v: &Value| -> BTreeMap<String, String> {
            v.as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect()
        };
        data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| Alert {
                labels: strings(&a["labels"]),
                annotations: strings(&a["annotations"]),
                state: a["state"].as_str().unwrap_or("").to_owned(),
            })
            .collect()
    }

    /// Polls an instant query until it returns a sample (bounded).
    async fn await_series(&self, expr: &str) {
        let deadline = Instant::now() + ALERT_TIMEOUT;
        while self.query(expr).await.is_empty() {
            assert!(
                Instant::now() < deadline,
                "Prometheus never had {expr}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Whether a query result holds at least one sample that is a number.
fn has_number(result: &[Value]) -> bool {
    let is_number = |v: &Value| {
        v[1].as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .is_some_and(|x| !x.is_nan())
    };
    result.iter().any(|series| {
        is_number(&series["value"])
            || series["values"]
                .as_array()
                .is_some_and(|vs| vs.iter().any(is_number))
    })
}

#[derive(Debug)]
struct Alert {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    state: String,
}

/// An alert (by name and some labels) that must fire, with the states seen.
struct Expected {
    alert: &'static str,
    labels: Vec<(&'static str, String)>,
    states: Vec<String>,
}

impl Expected {
    fn new(alert: &'static str, labels: &[(&'static str, &str)]) -> Self {
        Expected {
            alert,
            labels: labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
            states: Vec::new(),
        }
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        labels.get("alertname").map(String::as_str) == Some(self.alert)
            && self
                .labels
                .iter()
                .all(|(k, v)| labels.get(*k).is_some_and(|x| x == v))
    }

    fn fired(&self) -> bool {
        self.states.iter().any(|s| s == "firing")
    }
}

/// Polls `/api/v1/alerts` until every expected alert has fired (pending
/// first, then firing once its `for:` has passed), checking the rendered
/// annotations; fails if a forbidden alert is ever active.
async fn await_alerts(p: &Prometheus, expected: &mut [Expected], forbidden: &[Expected]) {
    let deadline = Instant::now() + ALERT_TIMEOUT;
    loop {
        let active = p.alerts().await;
        for a in &active {
            for e in expected.iter_mut() {
                if e.matches(&a.labels) {
                    if e.states.last() != Some(&a.state) {
                        e.states.push(a.state.clone());
                    }
                    check_annotations(a);
                }
            }
            for f in forbidden {
                assert!(!f.matches(&a.labels), "{a:?} must not be active");
            }
        }
        if expected.iter().all(Expected::fired) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not firing within {ALERT_TIMEOUT:?}: {:?}\nactive: {active:#?}\n{}",
            expected
                .iter()
                .filter(|e| !e.fired())
                .map(|e| (e.alert, &e.labels, &e.states))
                .collect::<Vec<_>>(),
            p.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The annotations on-call gets: rendered, with the dashboard link.
fn check_annotations(a: &Alert) {
    for key in ["summary", "description", "dashboard"] {
        let text = a.annotations.get(key).map_or("", String::as_str);
        assert!(
            !text.is_empty() && !text.contains("<no value>") && !text.contains("{{"),
            "{key} of {a:?}"
        );
    }
    let link = &a.annotations["dashboard"];
    assert!(
        link.starts_with("https://grafana.example.com/d/tenure-elections/"),
        "{a:?}"
    );
    if let Some(election) = a.labels.get("election") {
        assert!(link.ends_with(&format!("var-election={election}")), "{a:?}");
        assert!(
            a.annotations["summary"].contains(election.as_str()),
            "{a:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// The live test.
// ---------------------------------------------------------------------------

fn name(s: &str) -> ElectionName {
    ElectionName::new(s).expect("name")
}

async fn lead(c: &Client, n: &str, id: &str) -> Leadership {
    let opts = CampaignOptions::new(Ttl::from_secs(10).expect("ttl"));
    match c.campaign(&name(n), id, &opts).await.expect("campaign") {
        Campaigned::Leader(l) => l,
        Campaigned::Held(h) => panic!("{n} held by {h:?}"),
    }
}

// The scenario, and what it should fire, in two phases:
// 1. `stale`: a leader key put by hand on an 8 s lease that nobody renews
//    (TenureLeaseNearExpiry as it runs down; then it expires).
//    `reports`: r leads and resigns, nobody follows (TenureElectionNoLeader).
//    `orders`: a leads and fences `db`.
// 2. Once Prometheus has the counters' base values: in `orders` a resigns,
//    b leads and fences `db`, a's stale token is refused
//    (TenureFencingRefusal, stale_token), then c, d, e each lead and resign
//    and f leads: 5 new terms at once (TenureLeaderChurn).
// 3. etcd is killed (TenureWatcherDown for the serve instance).
// Healthy `orders` leases (renewed every TTL/3) must never look near expiry.
//
// Phase 1 is over before `orders` churns because the watcher's lease
// sampler currently samples other elections' leases far less often while one
// election churns (each new term queues that election again), so `stale`
// would not be sampled while it runs down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_prometheus_scrapes_serve_runs_every_dashboard_query_and_fires_alerts() {
    let t0 = Instant::now();
    let rules = fast_rules(&read("grafana/alerts.yaml"));
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = Serve::start(&[etcd.endpoint()], &dir.path().join("history.db"), &[], &[]).await;
    let prom = Prometheus::start(&serve.addr, &rules).await;
    let range_start = unix_now();
    // Prometheus applies new scrape targets up to 5 s after it is ready.
    prom.await_series(r#"tenure_etcd_up{job="tenure"} == 1"#)
        .await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let instance = serve.addr.clone();
    let never = [
        Expected::new("TenureLeaseNearExpiry", &[("election", "orders")]),
        Expected::new("TenureLeaderChurn", &[("election", "reports")]),
        Expected::new("TenureFencingRefusal", &[("reason", "term_ended")]),
        Expected::new("TenureFencingRefusal", &[("reason", "no_leader")]),
        Expected::new("TenureWatcherDown", &[("instance", &instance)]),
    ];

    // Phase 1.
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(8, None).await.expect("lease grant").id();
    raw.put(
        "election/stale",
        "ghost",
        Some(PutOptions::new().with_lease(lease)),
    )
    .await
    .expect("put stale leader");
    let r = lead(&c, "reports", "r").await;
    r.resign().await.expect("resign r");
    let a = lead(&c, "orders", "a").await;
    let t_a = a.token();
    assert!(a.fence("db").await.expect("fence").accepted);
    let mut phase1 = [
        Expected::new("TenureLeaseNearExpiry", &[("election", "stale")]),
        Expected::new("TenureElectionNoLeader", &[("election", "reports")]),
    ];
    await_alerts(&prom, &mut phase1, &never).await;
    let phase1_done = t0.elapsed();

    // Phase 2. Counters must be seen before they move, or increase() has
    // no base (a series' first sample is not an increase).
    prom.await_series(
        r#"tenure_election_leader_changes_total{job="tenure",election="orders"} == 1"#,
    )
    .await;
    prom.await_series(
        r#"tenure_fencing_refusals_total{election="orders",reason="stale_token"} == 0"#,
    )
    .await;
    a.resign().await.expect("resign a");
    let b = lead(&c, "orders", "b").await;
    assert!(b.fence("db").await.expect("fence").accepted);
    let refused = c.fence(&name("orders"), "db", t_a).await.expect("fence");
    assert!(!refused.accepted, "a's token is stale: {refused:?}");
    b.resign().await.expect("resign b");
    for id in ["c", "d", "e"] {
        lead(&c, "orders", id).await.resign().await.expect("resign");
    }
    let _f = lead(&c, "orders", "f").await;
    let mut phase2 = [
        Expected::new("TenureLeaderChurn", &[("election", "orders")]),
        Expected::new(
            "TenureFencingRefusal",
            &[("election", "orders"), ("reason", "stale_token")],
        ),
    ];
    await_alerts(&prom, &mut phase2, &never).await;
    let alerts_done = t0.elapsed();

    // The election variable's query.
    let data = prom
        .api(
            "/api/v1/label/election/values",
            &[("match[]", "tenure_election_has_leader")],
        )
        .await;
    let elections: BTreeSet<&str> = data
        .as_array()
        .expect("values")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(elections, BTreeSet::from(["orders", "reports", "stale"]));

    // Data the scenario produced last: the lease of f (sampled about every
    // second) and the recorded quantiles of the terms ended in phase 2.
    prom.await_series(r#"tenure_election_lease_remaining_seconds{election="orders"}"#)
        .await;
    prom.await_series(r#"tenure:election_term_duration_seconds:p90_1h{election="orders"} >= 0"#)
        .await;

    // Every dashboard query returns data, as Grafana would send it.
    let end = unix_now();
    let range = format!("{}s", (end - range_start).ceil() as u64);
    let mut empty = Vec::new();
    let queries = dashboard_queries(&dashboard());
    for q in &queries {
        let expr = q
            .expr
            .replace("$__rate_interval", RATE_INTERVAL)
            .replace("$__interval", &format!("{STEP_SECS}s"))
            .replace("$__range", &range)
            .replace("${election}", ".*")
            .replace("$election", ".*");
        assert!(!expr.contains('$'), "unsubstituted variable in {expr}");
        let result = if q.instant {
            prom.query(&expr).await
        } else {
            prom.query_range(&expr, range_start, end).await
        };
        if !has_number(&result) {
            empty.push(format!(
                "{} ({}): {expr} -> {result:?}",
                q.panel,
                if q.instant { "instant" } else { "range" }
            ));
        }
    }
    assert!(
        empty.is_empty(),
        "{} of {} dashboard queries returned no data:\n{}",
        empty.len(),
        queries.len(),
        empty.join("\n")
    );

    // tenure loses etcd.
    etcd.kill().await;
    let mut down = [Expected::new(
        "TenureWatcherDown",
        &[("instance", &instance)],
    )];
    await_alerts(&prom, &mut down, &[]).await;

    eprintln!(
        "prometheus test: phase 1 alerts fired by {phase1_done:?}, phase 2 by {alerts_done:?} \
         ({}), {} dashboard queries with data, watcher down fired by {:?}",
        phase1
            .iter()
            .chain(phase2.iter())
            .chain(down.iter())
            .map(|e| format!("{} {:?}", e.alert, e.states))
            .collect::<Vec<_>>()
            .join(", "),
        queries.len(),
        t0.elapsed()
    );
    drop(prom);
    let _ = serve.stop().await;
}
