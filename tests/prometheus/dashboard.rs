//! The dashboard: importable, filtered by election, every metric tenure
//! exposes on a panel, recorded series that exist.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::read;

pub(crate) struct Query {
    pub panel: String,
    pub expr: String,
    pub instant: bool,
}

pub(crate) fn dashboard() -> Value {
    serde_json::from_str(&read("grafana/tenure-dashboard.json")).expect("dashboard is JSON")
}

/// Every query of the dashboard: panel targets (rows' nested panels too) and
/// annotation queries.
pub(crate) fn dashboard_queries(d: &Value) -> Vec<Query> {
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

/// Issue 14: the dashboard links to tenure's incident timeline and report
/// for its own time range (Grafana's `${__from:date:seconds}`, which
/// tenure's `from`/`to` read as unix seconds).
#[test]
fn dashboard_links_to_the_tenure_timeline_for_its_time_range() {
    let d = dashboard();
    let vars = d["templating"]["list"].as_array().expect("templating");
    let url = vars
        .iter()
        .find(|v| v["name"] == "tenure_url")
        .expect("a $tenure_url variable");
    assert_eq!(url["type"], "textbox");
    let links = d["links"].as_array().expect("links");
    let timeline = links
        .iter()
        .find(|l| l["url"].as_str().is_some_and(|u| u.contains("/timeline?")))
        .expect("a link to /timeline");
    assert_eq!(
        timeline["url"],
        "${tenure_url}/timeline?from=${__from:date:seconds}&to=${__to:date:seconds}"
    );
    assert!(links.iter().any(|l| l["url"]
        .as_str()
        .is_some_and(|u| u.contains("/api/v1/report?") && u.contains("${__from:date:seconds}"))));
    // What Grafana substitutes is a time tenure reads.
    assert_eq!(
        tenure::history::parse_time("1796220000").expect("unix seconds"),
        1_796_220_000_000
    );
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
