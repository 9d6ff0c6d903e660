//! The rules file: promtool's checks and unit tests, every alert's shape,
//! and the fast variant the live test loads.

use std::path::Path;

use crate::{promtool, read, repo_file};

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
pub(crate) fn fast_rules(yaml: &str) -> String {
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
