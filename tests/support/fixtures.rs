//! Small fixtures the tests and benches share: names, TTLs, a client, a term.

use tenure::election::{CampaignOptions, Campaigned, Client, ElectionName, Leadership, Ttl};

/// A valid election name (panics naming the input otherwise).
pub fn name(s: &str) -> ElectionName {
    ElectionName::new(s).unwrap_or_else(|e| panic!("election name {s:?}: {e}"))
}

pub fn ttl(secs: u64) -> Ttl {
    Ttl::from_secs(secs).unwrap_or_else(|e| panic!("ttl {secs} s: {e}"))
}

/// A tenure client over `endpoints` (no prefix).
pub async fn tenure_client(endpoints: &[String]) -> Client {
    Client::connect(endpoints, "")
        .await
        .unwrap_or_else(|e| panic!("tenure client for {endpoints:?}: {e}"))
}

/// Campaigns for `n` as `id` with a `ttl_secs` lease, which must win.
pub async fn lead(c: &Client, n: &str, id: &str, ttl_secs: u64) -> Leadership {
    let opts = CampaignOptions::new(ttl(ttl_secs));
    match c.campaign(&name(n), id, &opts).await.expect("campaign") {
        Campaigned::Leader(l) => l,
        Campaigned::Held(h) => panic!("{id} expected to lead {n}, held by {h:?}"),
    }
}
