//! Within the scenario: the Lease's page through the API shows its own
//! figures, and a browser finds no word of etcd on it.

use std::time::Duration;

use serde_json::Value;

use crate::support::kube::KubeApiserver;
use crate::support::Serve;
use crate::{LEASE_API, NAME};

/// The Lease's page through the API, once its renewals are read: no etcd
/// lease or TTL, no "not read live" banner, when the lease runs out.
pub(crate) async fn lease_page_speaks_kubernetes(serve: &Serve, api: &KubeApiserver) {
    let url = serve.url(&format!("/elections/{}", NAME.replace('/', "%2F")));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let page = loop {
        let page = reqwest::get(&url)
            .await
            .expect("GET")
            .text()
            .await
            .expect("body");
        // "in …", counted down by the page between renewals.
        let counting = page
            .split_once("id=\"runs-out\"><span data-until=\"")
            .is_some_and(|(_, rest)| {
                rest.split_once("\">")
                    .is_some_and(|(_, t)| t.starts_with("in "))
            });
        if counting {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no 'runs out in': {page}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for etcd_word in [
        "not read live",
        "0 <span class=\"muted\">· lease",
        "TTL left",
        "etcd reachable",
    ] {
        assert!(
            !page.contains(etcd_word),
            "{etcd_word:?} on the Lease page: {page}"
        );
    }
    assert!(page.contains("Kubernetes Lease"), "{page}");
    // Named as Kubernetes names it; kube-apiserver's etcd prefix nowhere.
    assert!(
        page.contains(&format!("<h1 class=\"election-name\">{NAME}</h1>")),
        "{page}"
    );
    assert!(!page.contains("/registry"), "{page}");
    // Its own figures, as the API has them (its holder renews steadily).
    let (status, body) = api.curl("GET", LEASE_API, None).await;
    assert_eq!(status, 200, "{body}");
    let lease: Value = serde_json::from_str(&body).expect("a Lease");
    let transitions = lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0);
    let duration = lease["spec"]["leaseDurationSeconds"]
        .as_i64()
        .expect("duration");
    for figure in [
        format!("id=\"transitions\">{transitions} "),
        format!("id=\"lease-duration\">{duration} s "),
        "renewTime, by the holder's clock".to_owned(),
        "id=\"no-margin\"".to_owned(),
    ] {
        assert!(page.contains(&figure), "{figure:?} not on the page: {page}");
    }
    // Its holder's identity is no hostname_uuid: no pod guessed.
    assert!(!page.contains("holder-pod"), "{page}");
    assert!(!page.contains(">Margin</th>"), "{page}");
    no_etcd_word_in_a_browser(serve).await;
}

/// The overview and the Lease's page as a browser shows them (headless
/// Chromium): named as Kubernetes names it, and no word of etcd in any
/// text a reader sees.
async fn no_etcd_word_in_a_browser(serve: &Serve) {
    let browser = crate::support::Browser::start().await;
    let check = format!(
        "const t = document.body.innerText; \
         return t.includes('{NAME}') && !t.toLowerCase().includes('etcd') \
         && !t.includes('/registry')"
    );
    browser.goto(&serve.url("/")).await;
    browser
        .wait_for(&check, "the overview: the Lease named, no etcd word")
        .await;
    browser
        .goto(&serve.url(&format!("/elections/{}", NAME.replace('/', "%2F"))))
        .await;
    browser
        .wait_for(
            &format!("{check} && document.getElementById('runs-out') !== null"),
            "the Lease's page: no etcd word",
        )
        .await;
    browser.quit().await;
}
