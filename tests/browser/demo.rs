//! `tenure dev` (the demo) in real headless Chromium, once its split-brain
//! story ran: the frozen holder's acting bar runs on past its term, its
//! overlap with the next term in red with its length, the refusal at its
//! end, the report saying the same; both timelines fitted to the young
//! history; the range hint readable; the legend naming what is drawn; the
//! election of another system (`etcdctl elect`) listed. Screenshots of the
//! overlap and of the fitted incident view go to `target/screenshots/`
//! (the copies in docs/ come from there).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::process::{Child, Command};

use crate::support::{self, wait::poll, Browser};
use tenure::history::format_duration_ms;

/// `tenure dev` as a child: SIGTERM on drop (it stops its fleet, serve and
/// etcd), SIGKILL if it has not ended 10 s later.
struct Dev {
    child: Child,
    base: String,
    log: PathBuf,
}

impl Dev {
    fn start(dir: &Path) -> Dev {
        let port = support::free_port();
        let etcd = support::etcd_bin();
        let path = format!(
            "{}:{}",
            etcd.parent().expect("etcd's directory").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let log = dir.join("dev.log");
        let child = Command::new(support::tenure_bin())
            .args(["dev", "--listen", &format!("127.0.0.1:{port}")])
            // One replay of the story within the test.
            .args(["--story-every", "600"])
            .arg("--db")
            .arg(dir.join("history.db"))
            .env("PATH", path)
            .env("TMPDIR", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .kill_on_drop(true)
            .spawn()
            .expect("start tenure dev");
        Dev {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn json(&self, path: &str) -> Option<Value> {
        reqwest::get(self.url(path)).await.ok()?.json().await.ok()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                _ => return,
            }
        }
        let _ = self.child.start_kill();
    }
}

/// The first recorded term of `holder` in `terms`.
fn term_of<'a>(terms: &'a Value, holder: &str) -> Option<&'a Value> {
    terms["terms"]
        .as_array()?
        .iter()
        .find(|t| t["holder"] == holder)
}

/// The window `[from, to]` (unix ms) a drawing (`svg`, a selector) shows,
/// read from its title ("… from 2026-12-06 06:01:44.000 to … UTC").
async fn drawn_window(browser: &Browser, svg: &str) -> (i64, i64) {
    let v = browser
        .eval(&format!(
            "const t = document.querySelector('{svg} > title').textContent; \
             const m = t.match(/from (\\S+ \\S+) to (\\S+ \\S+) UTC/); \
             const ms = s => Date.parse(s.replace(' ', 'T') + 'Z'); \
             return m ? [ms(m[1]), ms(m[2])] : t"
        ))
        .await;
    match (v[0].as_i64(), v[1].as_i64()) {
        (Some(from), Some(to)) => (from, to),
        _ => panic!("no window in the drawing's title: {v}"),
    }
}

/// Whether the `from` field's placeholder fits in the field, measured in
/// the field's own font.
const HINT_FITS: &str = "const i = document.querySelector('input[name=from]'); \
     const c = document.createElement('canvas').getContext('2d'); \
     const st = getComputedStyle(i); c.font = st.font; \
     const room = i.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight); \
     return c.measureText(i.placeholder).width <= room";

async fn screenshot(browser: &Browser, name: &str) {
    let shot = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/screenshots")
        .join(name);
    browser.screenshot(&shot).await;
    let size = std::fs::metadata(&shot).expect("screenshot written").len();
    assert!(size > 10_000, "screenshot is {size} bytes");
    println!("screenshot: {}", shot.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_shows_the_overlap_and_fits_its_windows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start(dir.path());
    // The story starts 10 s in; scene-01's late acting end comes some 20 s
    // later.
    let terms = poll(
        "scene-01's term with an overlap",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let terms = dev.json("/api/v1/elections/boss-fight/terms").await?;
            let ok = term_of(&terms, "scene-01")?["overlap_ms"].as_i64()? > 0
                && term_of(&terms, "scene-02").is_some();
            ok.then_some(terms)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dev.log()));
    let one = term_of(&terms, "scene-01").expect("scene-01");
    let two = term_of(&terms, "scene-02").expect("scene-02");
    let overlap_ms = one["overlap_ms"].as_i64().expect("overlap");
    println!("[figure] the demo's overlap: {overlap_ms} ms; scene-01: {one}");
    assert_eq!(one["acting_stopped_late"], true, "{one}");
    assert!(one["margin_ms"].as_i64().expect("a margin") < 0, "{one}");
    // Frozen 3 s past scene-02's start, then 1.2 s of its writer: more
    // than 3 s of two holders, however fast the machine.
    assert!(overlap_ms >= 3_000, "{one}");
    // The refusal at its end: scene-01's token refused, after scene-02 led.
    let refusals = poll(
        "a refusal of scene-01's token",
        Duration::from_secs(20),
        Duration::from_millis(300),
        || async {
            let events = dev
                .json("/api/v1/elections/boss-fight/events?limit=1000")
                .await?;
            events["events"].as_array()?.iter().find_map(|e| {
                (e["type"] == "fence_refused" && e["token"] == one["token"]).then(|| e.clone())
            })
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dev.log()));
    assert!(
        refusals["at_ms"].as_i64() >= two["started_at_ms"].as_i64(),
        "{refusals}"
    );

    let browser = Browser::start().await;
    // The election page, no window given.
    browser.goto(&dev.url("/elections/boss-fight")).await;
    browser
        .wait_for(
            "return document.querySelector('#timeline svg.wide rect.overlap') !== null",
            "the red overlap on the election page",
        )
        .await;
    let red = browser
        .eval(
            "const f = getComputedStyle(document.querySelector('#timeline svg.wide rect.overlap')).fill; \
             const [r, g, b] = f.match(/\\d+/g).map(Number); return r > g + 80 && r > b + 80",
        )
        .await;
    assert_eq!(red, true, "the overlap is drawn in red");
    let label = browser
        .eval(
            "const t = document.querySelector('#timeline svg.wide text.overlap-label'); \
             return t ? t.textContent : null",
        )
        .await;
    assert_eq!(
        label.as_str(),
        Some(format!("overlap {}", format_duration_ms(overlap_ms)).as_str()),
        "the overlap's length beside it"
    );
    // scene-01's acting runs on past the start of scene-02's term: the red
    // part begins where scene-02's bar does.
    let beside = browser
        .eval(&format!(
            "const s = document.querySelector('#timeline svg.wide'); \
             const red = s.querySelector('rect.overlap'); \
             const next = s.querySelector('rect.term[data-token=\"{}\"]'); \
             const x = e => +e.getAttribute('x'); \
             return Math.abs(x(red) - x(next)) < 3",
            two["token"]
        ))
        .await;
    assert_eq!(beside, true, "the overlap starts at scene-02's term");
    // Fitted: from a tenth of the election's age and 2 s before its first
    // term, at least 10 s in all (the page's times are to the millisecond).
    let (from, to) = drawn_window(&browser, "#timeline svg.wide").await;
    let first = one["started_at_ms"].as_i64().expect("start");
    let margin = first - from;
    println!(
        "[figure] election page: {} ms shown, the first term {margin} ms from its left",
        to - from
    );
    assert!(
        (0..=((to - first) / 10 + 2_000).max(10_000 - (to - first)) + 2).contains(&margin),
        "window {from}..{to}, first term at {first}"
    );
    let legend = browser
        .eval("return document.querySelector('#stats').textContent")
        .await;
    let legend = legend.as_str().unwrap_or_default();
    assert!(
        legend.contains("acting") && legend.contains("overlap"),
        "{legend}"
    );
    assert_eq!(
        browser.eval(HINT_FITS).await,
        true,
        "the from hint is cut off"
    );
    screenshot(&browser, "demo-overlap.png").await;

    // The incident view, no window given: fitted to the history.
    browser.goto(&dev.url("/timeline")).await;
    browser
        .wait_for(
            "return document.querySelector('#timeline rect.overlap') !== null",
            "the overlap on /timeline",
        )
        .await;
    let span = browser
        .eval("return document.querySelector('.window .muted').textContent")
        .await;
    let span = span.as_str().unwrap_or_default().to_owned();
    assert!(span.contains("all that was recorded"), "{span}");
    // Fitted to a history of well under a minute: not the hour, and no
    // term of it starts before the window.
    let (from, to) = drawn_window(&browser, "#timeline svg").await;
    println!("[figure] /timeline: {} ms shown", to - from);
    assert!((10_000..120_000).contains(&(to - from)), "{from}..{to}");
    assert!(first >= from, "{from}..{to}, scene-01 from {first}");
    let legend = browser
        .eval("return document.querySelector('.chart .legend').textContent")
        .await;
    assert!(
        legend.as_str().unwrap_or_default().contains("overlap"),
        "{legend}"
    );
    assert_eq!(
        browser.eval(HINT_FITS).await,
        true,
        "the from hint is cut off"
    );
    // The other system's election is there beside tenure's.
    let lanes = browser
        .eval("return [...document.querySelectorAll('#timeline g.lane')].map(g => g.dataset.election)")
        .await;
    assert!(
        lanes
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e == "/jobs/cron/leader")),
        "{lanes}"
    );
    screenshot(&browser, "incident-fitted.png").await;
    browser.quit().await;

    // The report says the same.
    let (from, to) = (
        one["started_at_ms"].as_i64().expect("start") / 1000 - 60,
        two["started_at_ms"].as_i64().expect("start") / 1000 + 600,
    );
    let report = reqwest::get(dev.url(&format!(
        "/api/v1/report?from={from}&to={to}&match=boss-fight&format=md"
    )))
    .await
    .expect("report")
    .text()
    .await
    .expect("report text");
    assert!(report.contains("## Who acted when"), "{report}");
    assert!(report.contains(&format!("**{overlap_ms}")), "{report}");
    drop(dev);
}
