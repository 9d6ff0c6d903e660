//! The shared history over TLS, as libpq's URL parameters mean it
//! (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`), against a real
//! PostgreSQL started by the harness with `ssl = on` and a `pg_hba.conf`
//! that refuses every TCP connection without TLS (so a success proves the
//! connection was encrypted). Certificates are made by the test (openssl).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use support::fixtures::lead;
use support::fixtures::text;
use support::postgres::{PgTls, Postgres, PG_USER};
use support::secure::Pki;
use support::{Etcd, Serve};
use tenure::election::Client;

/// TLS only over TCP; `trust` once encrypted (or a client certificate).
fn tls_server(pki: &Pki, auth: &str) -> Postgres {
    Postgres::start_with(Some(PgTls {
        cert: pki.path("server.crt"),
        key: pki.path("server.key"),
        ca: pki.path("ca.crt"),
        hba: format!("hostssl all all 127.0.0.1/32 {auth}\nhostnossl all all 127.0.0.1/32 reject"),
        // The client certificate's CN is tenure-client; the role is tenure.
        ident: format!("m tenure-client {PG_USER}"),
    }))
}

fn url(pg: &Postgres, host: &str, db: &str, params: &str) -> String {
    format!("postgres://{PG_USER}@{host}:{}/{db}?{params}", pg.port)
}

/// `tenure history NAME --db URL --json`, timed.
fn history(db: &str) -> (Output, Duration) {
    let started = Instant::now();
    let out = std::process::Command::new(support::tenure_bin())
        .args(["history", "orders", "--json", "--db", db])
        .env_remove("TENURE_DB")
        .env("HOME", "/nonexistent-home-for-tenure-tests")
        .output()
        .expect("run tenure history");
    (out, started.elapsed())
}

/// Fails with exit 1, quickly, one line naming the problem.
fn fails_with(db: &str, needle: &str) {
    let (out, took) = history(db);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{db}: {err}");
    assert!(err.contains(needle), "{db}: wanted {needle:?} in {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(took < Duration::from_secs(10), "{db}: took {took:?}");
    println!(
        "[figure] {db} → exit 1 in {} ms: {}",
        took.as_millis(),
        err.trim()
    );
}

fn reads_terms(db: &str) -> usize {
    let (out, _) = history(db);
    assert_eq!(out.status.code(), Some(0), "{db}: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("history JSON");
    v.as_array().map_or(0, |t| t.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_over_tls_verified_and_every_misconfiguration_said() {
    let pki = Pki::generate();
    let pg = tls_server(&pki, "trust");
    pg.psql("postgres", "CREATE DATABASE h");
    let ca = pki.arg("ca.crt");
    let full = url(
        &pg,
        "127.0.0.1",
        "h",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );

    // serve records over verified TLS, and the history reads back.
    let etcd = Etcd::start().await;
    let serve = Serve::start(&[etcd.endpoint()], Path::new(&full), &[], &[]).await;
    serve.ready().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let l = lead(&c, "orders", "a", 10).await;
    let token = l.token();
    serve.caught_up(token).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while reads_terms(&full) == 0 {
        assert!(
            Instant::now() < deadline,
            "the term never reached the history"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The server saw TLS: every TCP session of the server is encrypted.
    let plain = pg.psql(
        "postgres",
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.client_addr IS NOT NULL AND NOT s.ssl",
    );
    assert_eq!(plain, "0", "no unencrypted TCP session");

    // What libpq would accept works too.
    let require = url(&pg, "127.0.0.1", "h", "sslmode=require");
    assert_eq!(reads_terms(&require), 1, "require: encrypted, not verified");
    let default = url(&pg, "127.0.0.1", "h", "");
    assert_eq!(
        reads_terms(&default),
        1,
        "no sslmode: prefer, and the server offers TLS"
    );
    let by_name = |mode: &str| {
        url(
            &pg,
            "localhost",
            "h",
            &format!("sslmode={mode}&sslrootcert={ca}"),
        )
    };
    assert_eq!(
        reads_terms(&by_name("verify-ca")),
        1,
        "verify-ca ignores the name"
    );

    // Each misconfiguration: exit 1 within seconds, a message that says
    // what to do.
    fails_with(
        &url(&pg, "127.0.0.1", "h", "sslmode=disable"),
        "if the server requires TLS, use sslmode=require",
    );
    fails_with(
        &url(
            &pg,
            "127.0.0.1",
            "h",
            &format!(
                "sslmode=verify-full&sslrootcert={}",
                pki.arg("other-ca.crt")
            ),
        ),
        "not signed by a CA in sslrootcert",
    );
    fails_with(&by_name("verify-full"), "does not name the host");
    fails_with(
        &url(&pg, "127.0.0.1", "h", "sslmode=verify-full"),
        "add sslrootcert=FILE",
    );
    fails_with(
        &url(
            &pg,
            "127.0.0.1",
            "h",
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
        ),
        "sslrootcert=/nonexistent/ca.pem",
    );
    // The system's CAs with a weaker mode: refused (any public CA would do).
    fails_with(
        &url(&pg, "127.0.0.1", "h", "sslrootcert=system&sslmode=require"),
        "needs sslmode=verify-full",
    );
    fails_with(
        &url(&pg, "127.0.0.1", "h", "sslmode=strict"),
        "not one of disable, allow, prefer, require",
    );
    // Nothing of the history was touched by the failures.
    assert_eq!(reads_terms(&full), 1);
    drop(l);
    serve.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_for_cert_authentication() {
    let pki = Pki::generate();
    let pg = tls_server(&pki, "cert map=m");
    pg.psql("postgres", "CREATE DATABASE h");
    let ca = pki.arg("ca.crt");
    let base = format!("sslmode=verify-full&sslrootcert={ca}");
    fails_with(
        &url(&pg, "127.0.0.1", "h", &base),
        "requires a client certificate",
    );
    let with_cert = url(
        &pg,
        "127.0.0.1",
        "h",
        &format!(
            "{base}&sslcert={}&sslkey={}",
            pki.arg("client.crt"),
            pki.arg("client.key")
        ),
    );
    // A serve creates the schema and records over the authenticated
    // connection; `tenure history` reads it back with the same URL.
    let etcd = Etcd::start().await;
    let serve = Serve::start(&[etcd.endpoint()], Path::new(&with_cert), &[], &[]).await;
    serve.ready().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let l = lead(&c, "orders", "a", 10).await;
    serve.caught_up(l.token()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while reads_terms(&with_cert) == 0 {
        assert!(
            Instant::now() < deadline,
            "the term never reached the history"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let who = pg.psql(
        "postgres",
        "SELECT DISTINCT s.client_dn FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.client_addr IS NOT NULL",
    );
    assert_eq!(
        who, "/CN=tenure-client",
        "serve's sessions authenticated by the certificate"
    );
    fails_with(
        &url(
            &pg,
            "127.0.0.1",
            "h",
            &format!("{base}&sslcert={}", pki.arg("client.crt")),
        ),
        "sslcert and sslkey go together",
    );
    drop(l);
    serve.stop().await;
}
