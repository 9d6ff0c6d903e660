//! Helpers every incident test uses: the campaign options, HTTP, URL
//! coding, Markdown table cells.

use std::time::Duration;

use serde_json::Value;
use tenure::election::CampaignOptions;

pub use crate::support::fixtures::{name, ttl};

pub const ELECTIONS: [&str; 3] = ["incident/orders", "incident/payments", "incident/search"];

pub fn opts() -> CampaignOptions {
    CampaignOptions::new(ttl(3))
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client")
}

pub async fn get_json(url: &str) -> Value {
    let r = http().get(url).send().await.expect("GET");
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.json().await.expect("json")
}

pub async fn get_text(url: &str) -> String {
    let r = http().get(url).send().await.expect("GET");
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.text().await.expect("body")
}

pub fn enc(s: &str) -> String {
    s.replace('%', "%25")
        .replace(':', "%3A")
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('*', "%2A")
}

pub fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_owned())
        .collect()
}
