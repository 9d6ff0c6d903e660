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

/// `tenure` at `endpoint`, with no prefix, TLS or user settings from the
/// caller's environment, a 3 s request timeout, killed on drop.
pub fn tenure_at(endpoint: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(super::tenure_bin());
    cmd.env("TENURE_ENDPOINTS", endpoint)
        .env("TENURE_TIMEOUT", "3")
        .env_remove("TENURE_PREFIX")
        .kill_on_drop(true);
    for var in ["CACERT", "CERT", "KEY", "USER", "PASSWORD", "PASSWORD_FILE"] {
        cmd.env_remove(format!("TENURE_{var}"))
            .env_remove(format!("ETCDCTL_{var}"));
    }
    cmd
}

/// `tenure` at `etcd` (see [`tenure_at`]).
pub fn tenure(etcd: &super::Etcd) -> tokio::process::Command {
    tenure_at(&etcd.endpoint())
}

/// Runs `tenure ARGS` at `etcd` to the end.
pub async fn run(etcd: &super::Etcd, args: &[&str]) -> std::process::Output {
    tenure(etcd).args(args).output().await.expect("run tenure")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The API token of [`serve_with_api`].
pub const API_TOKEN: &str = "s3cret";

/// A `tenure serve` on `etcd`, its mutating API enabled with [`API_TOKEN`],
/// its history in `dir`; ready.
pub async fn serve_with_api(etcd: &super::Etcd, dir: &std::path::Path) -> super::Serve {
    let serve = super::Serve::start(
        &[etcd.endpoint()],
        &dir.join("history.db"),
        &["--api-token", API_TOKEN],
        &[],
    )
    .await;
    serve.ready().await;
    serve
}

/// `POST /api/v1/elections/ELECTION/resign {token}`; panics unless it
/// succeeds.
pub async fn http_resign(serve: &super::Serve, election: &str, token: i64) {
    let resp = reqwest::Client::new()
        .post(serve.url(&format!("/api/v1/elections/{election}/resign")))
        .bearer_auth(API_TOKEN)
        .json(&serde_json::json!({ "token": token }))
        .send()
        .await
        .expect("resign");
    assert!(resp.status().is_success(), "{:?}", resp.text().await);
}

/// Whether the etcd behind `raw` lets serve merge several key ranges
/// (3.4.31+, 3.5.13+, 3.6: etcd issues 15220 and 17507), read here from its
/// `Status`, apart from tenure's own check. Older: serve must refuse them.
pub async fn merges_several_ranges(raw: &mut etcd_client::Client) -> bool {
    let version = raw.status().await.expect("status").version().to_owned();
    let v: Vec<u64> = version.split('.').filter_map(|p| p.parse().ok()).collect();
    matches!(v.as_slice(), [3, 4, p, ..] if *p >= 31)
        || matches!(v.as_slice(), [3, 5, p, ..] if *p >= 13)
        || matches!(v.as_slice(), [3, m, ..] if *m >= 6)
}
