//! Within the scenario: a user no role is bound to (403), said on stderr
//! and in `/readyz`, retried until a binding grants the verbs.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::kube::KubeApiserver;
use crate::support::Serve;

/// A token the API does not accept: serve says to give a fresh one (not
/// to grant a role, which cannot help), and is not ready.
pub(crate) async fn refused_is_said(api: &KubeApiserver, dir: &Path) {
    let bad = dir.join("refused");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("token"), "not-a-token").unwrap();
    let kubeconfig = bad.join("kubeconfig");
    api.kubeconfig_for("token", &kubeconfig);
    let args = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &bad.join("h.db"), &args, &[]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !serve
        .log_text()
        .contains("did not accept tenure's credentials")
    {
        assert!(Instant::now() < deadline, "{}", serve.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(serve.log_text().contains("(401)"), "{}", serve.log_text());
    assert!(
        !serve.log_text().contains("ClusterRole tenure-lease-reader"),
        "{}",
        serve.log_text()
    );
    let ready = reqwest::get(serve.url("/readyz")).await.expect("readyz");
    assert_eq!(ready.status().as_u16(), 503);
    serve.stop().await;
}

/// A user no role is bound to (kube-apiserver's static token `unbound`):
/// serve says on stderr and in /readyz which verbs on which resource it
/// lacks, and keeps trying: once a binding grants them, it is ready.
pub(crate) async fn denied_is_said(api: &KubeApiserver, dir: &Path) {
    let denied = dir.join("denied");
    std::fs::create_dir(&denied).unwrap();
    std::fs::copy(api.dir.path().join("unbound-token"), denied.join("token")).unwrap();
    let kubeconfig = denied.join("kubeconfig");
    api.kubeconfig_for("token", &kubeconfig);
    let args = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &denied.join("h.db"), &args, &[]).await;
    let what = "needs get, list and watch on coordination.k8s.io leases in every namespace";
    let deadline = Instant::now() + Duration::from_secs(20);
    while !serve.log_text().contains("(403)") {
        assert!(Instant::now() < deadline, "{}", serve.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(serve.log_text().contains(what), "{}", serve.log_text());
    let ready = reqwest::get(serve.url("/readyz")).await.expect("readyz");
    assert_eq!(ready.status().as_u16(), 503);
    let text = ready.text().await.unwrap();
    for said in [what, "(403)", "ClusterRole tenure-lease-reader", "unbound"] {
        assert!(text.contains(said), "/readyz lacks {said:?}: {text}");
    }
    // Granted meanwhile: the retries read the Leases.
    let binding = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"unbound-reads-leases"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"tenure-lease-reader"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"unbound"}]}"#;
    let path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    let (status, body) = api.curl("POST", path, Some(binding)).await;
    assert_eq!(status, 201, "{body}");
    serve.ready().await;
    serve.stop().await;
}
