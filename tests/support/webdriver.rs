//! A minimal W3C WebDriver client for real headless Chromium (Debian's
//! `chromium` + `chromium-driver`): start chromedriver on a free loopback
//! port, open a session, navigate, run scripts, take screenshots.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::procfs::processes_with_arg;
use tokio::process::{Child, Command};

pub struct Browser {
    driver: Child,
    /// chromedriver's process group: Chromium and its helpers are started
    /// in it, and the whole group is killed on drop.
    group: i32,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

impl Browser {
    pub async fn start() -> Browser {
        for bin in [CHROMEDRIVER, CHROMIUM] {
            assert!(
                Path::new(bin).exists(),
                "{bin} is missing: install Debian's chromium and chromium-driver (scripts/setup.sh does)"
            );
        }
        let port = super::free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let group = driver.id().expect("chromedriver pid") as i32;
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("http client");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = http.get(format!("{base}/status")).send().await;
            if let Ok(r) = ready {
                let v: Value = r.json().await.unwrap_or(Value::Null);
                if v["value"]["ready"] == true {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--window-size=1280,1000",
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        }}});
        let resp: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session json");
        let session = resp["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {resp}"))
            .to_owned();
        Browser {
            driver,
            group,
            base,
            session,
            http,
            _profile: profile,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req
            .send()
            .await
            .expect("webdriver call")
            .json()
            .await
            .expect("webdriver json");
        assert!(v["value"]["error"].is_null(), "webdriver {path}: {v}");
        v["value"].clone()
    }

    /// Ends the WebDriver session, which closes Chromium, then stops the
    /// driver: no orphaned browser (killing only the driver leaves Chromium
    /// running, with its open connections).
    pub async fn quit(self) {
        let url = format!("{}/session/{}", self.base, self.session);
        let _ = tokio::time::timeout(Duration::from_secs(20), self.http.delete(url).send()).await;
    }

    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// Runs `script` (a function body; use `return`) in the page.
    pub async fn eval(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// Waits until `script` returns `true`.
    pub async fn wait_for(&self, script: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.eval(script).await == Value::Bool(true) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Saves a PNG screenshot of the viewport.
    pub async fn screenshot(&self, path: &Path) {
        let b64 = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = tenure::text::base64_decode(b64.as_str().expect("base64 string"))
            .expect("a screenshot in base64");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Killing chromedriver alone would orphan Chromium's process tree:
        // kill the whole group, then any process of ours still using this
        // profile (a helper that left the group).
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.group),
            nix::sys::signal::Signal::SIGKILL,
        );
        let marker = format!("--user-data-dir={}", self._profile.path().display());
        for pid in processes_with_arg(&marker) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // Reap chromedriver, our child, before the profile dir goes.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match self.driver.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                _ => break,
            }
        }
    }
}
