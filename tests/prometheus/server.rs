//! A real Prometheus on loopback, and what the live test asks it.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;
use crate::{bin, ALERT_TIMEOUT, PROMETHEUS_BIN, READY_TIMEOUT, SCRAPE_SECS, STEP_SECS};

/// A Prometheus process on loopback with its data and config in a temp dir;
/// SIGKILLed and reaped on drop.
pub(crate) struct Prometheus {
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
    pub(crate) async fn start(targets: &[&str], rules: &str) -> Prometheus {
        let targets = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
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
                     - job_name: tenure\n    static_configs:\n      - targets: [{targets}]\n",
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

    pub(crate) async fn await_ready(&mut self) -> Result<(), String> {
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

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn logs(&self) -> String {
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
    pub(crate) async fn api(&self, path: &str, params: &[(&str, &str)]) -> Value {
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
    pub(crate) async fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api("/api/v1/query", &[("query", expr)]).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    pub(crate) async fn query_range(&self, expr: &str, start: f64, end: f64) -> Vec<Value> {
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
    pub(crate) async fn await_series(&self, expr: &str) {
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
pub(crate) fn has_number(result: &[Value]) -> bool {
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
pub(crate) struct Expected {
    pub alert: &'static str,
    labels: Vec<(&'static str, String)>,
    pub states: Vec<String>,
}

impl Expected {
    pub(crate) fn new(alert: &'static str, labels: &[(&'static str, &str)]) -> Self {
        Expected {
            alert,
            labels: labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
            states: Vec::new(),
        }
    }

    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        labels.get("alertname").map(String::as_str) == Some(self.alert)
            && self
                .labels
                .iter()
                .all(|(k, v)| labels.get(*k).is_some_and(|x| x == v))
    }

    pub(crate) fn fired(&self) -> bool {
        self.states.iter().any(|s| s == "firing")
    }
}

/// Polls `/api/v1/alerts` until every expected alert has fired (pending
/// first, then firing once its `for:` has passed), checking the rendered
/// annotations; fails if a forbidden alert is ever active.
pub(crate) async fn await_alerts(
    p: &Prometheus,
    expected: &mut [Expected],
    forbidden: &[Expected],
) {
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
