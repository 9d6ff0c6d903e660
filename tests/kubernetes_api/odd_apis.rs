//! Beside the scenario, APIs serve cannot use: one that never answers
//! (`/readyz` names the API, not etcd) and one whose resourceVersions are no
//! revisions (serve exits 1 saying what to do).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::Serve;

/// A Kubernetes API that never answers (a port that accepts and is
/// silent): /readyz names it, not etcd (which this serve never reads),
/// while the first list waits, then says why it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_the_kubernetes_api_it_cannot_reach() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    // Connections complete in its backlog; nothing ever answers them.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context:\n    \
         cluster: k\n    user: u\nclusters:\n- name: k\n  cluster:\n    server: \
         https://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    token: t\n"
    );
    std::fs::write(&kubeconfig, text).unwrap();
    let args = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &dir.path().join("h.db"), &args, &[]).await;
    let readyz = || async {
        let ready = reqwest::get(serve.url("/readyz")).await.expect("readyz");
        assert_eq!(ready.status().as_u16(), 503);
        ready.text().await.unwrap()
    };
    // The first list waits up to 10 s for an answer.
    assert_eq!(
        readyz().await,
        "not ready: the Kubernetes API unreachable or the watcher has not loaded its \
         snapshot yet\n"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = readyz().await;
        assert!(!text.contains("etcd"), "{text}");
        if text.contains(&format!(
            "the Kubernetes API at 127.0.0.1:{port} did not answer"
        )) {
            break;
        }
        assert!(text.contains("the Kubernetes API"), "{text}");
        assert!(Instant::now() < deadline, "{text}\n{}", serve.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    serve.stop().await;
    drop(silent);
}

/// An API server whose resourceVersions are not integers (not etcd's
/// revisions: a Python HTTPS server answering every GET with such a
/// LeaseList): serve says what to do instead and exits 1, never relisting
/// for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_version_that_is_no_revision_stops_serve_with_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = serving_cert(dir.path()).await;
    let server = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","metadata":{"resourceVersion":"a1b2"},"items":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
    let mut fake = tokio::process::Command::new("python3")
        .args(["-c", server])
        .arg(&cert)
        .arg(&key)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");
    use tokio::io::AsyncBufReadExt;
    let out = fake.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(out).lines();
    let port: u16 = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("the fake server's port")
        .unwrap()
        .expect("a port line")
        .trim()
        .parse()
        .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context:\n    \
         cluster: k\n    user: u\nclusters:\n- name: k\n  cluster:\n    server: \
         https://127.0.0.1:{port}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    \
         token: t\n",
        ca.display()
    );
    std::fs::write(&kubeconfig, text).unwrap();
    let args = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let mut serve = Serve::start(&nowhere, &dir.path().join("h.db"), &args, &[]).await;
    assert_eq!(serve.exited(Duration::from_secs(20)).await, Some(1));
    let log = serve.log_text();
    for said in [
        "resourceVersion \"a1b2\", which is not an integer",
        "--source kubernetes:/registry/",
        "the watcher of the Kubernetes API stopped",
    ] {
        assert!(log.contains(said), "{said:?} not in\n{log}");
    }
    let _ = fake.kill().await;
}

/// A CA and a serving certificate for 127.0.0.1 signed by it (rustls takes
/// no CA as a leaf): (ca.crt, server.crt, server.key) under `dir`.
async fn serving_cert(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let p = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    std::fs::write(
        dir.join("ext"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )
    .unwrap();
    let steps: [Vec<String>; 3] = [
        [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=ca",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain(["-keyout", &p("ca.key"), "-out", &p("ca.crt")].map(str::to_owned))
        .collect(),
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=fake"]
            .map(str::to_owned)
            .into_iter()
            .chain(["-keyout", &p("server.key"), "-out", &p("server.csr")].map(str::to_owned))
            .collect(),
        ["x509", "-req", "-days", "1", "-CAcreateserial"]
            .map(str::to_owned)
            .into_iter()
            .chain(
                [
                    "-in",
                    &p("server.csr"),
                    "-CA",
                    &p("ca.crt"),
                    "-CAkey",
                    &p("ca.key"),
                    "-extfile",
                    &p("ext"),
                    "-out",
                    &p("server.crt"),
                ]
                .map(str::to_owned),
            )
            .collect(),
    ];
    for args in steps {
        let out = tokio::process::Command::new("openssl")
            .args(&args)
            .output()
            .await
            .expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    }
    (
        dir.join("ca.crt"),
        dir.join("server.crt"),
        dir.join("server.key"),
    )
}
