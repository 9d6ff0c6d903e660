//! The PostgreSQL backend: the same schema, queries, retention and export as
//! SQLite, for a history shared by several `tenure serve` replicas.
//!
//! Every statement that differs from SQLite's dialect is in this module; the
//! writer's logic (resume revision, epochs, resets) is shared
//! (`writer::commit_in` through [`WriteTx`]).
//!
//! **Fencing.** Exactly one replica writes each cluster: the holder of the
//! etcd election `tenure/history-writer` in that cluster's etcd, whose token
//! is the one it writes with. Every write transaction first locks that
//! cluster's row of `history_writer` (keyed by its name, `''` for the one
//! unnamed cluster; `SELECT … FOR UPDATE`), refuses
//! ([`HistoryError::Fenced`]) when a higher token is stored there, and
//! stores its own token otherwise, then commits with the batches. Two
//! clusters' writers lock two rows: neither waits for, nor fences, the
//! other. So a writer that lost its term (paused, partitioned)
//! cannot commit after a newer writer has, however late it wakes up: the
//! database itself decides, in the same transaction as the rows. A new
//! writer claims the row as soon as it opens ([`PgWriter::connect`]), before
//! it writes anything.
//!
//! Schema versions are counted in `tenure_schema.version`; migrations run at
//! start-up under a transaction-scoped advisory lock, so replicas starting
//! together migrate once.
//!
//! By job: this file connects (sessions, their settings, the redacted URL);
//! `tls.rs` is TLS as libpq's URL parameters mean it (`sslmode`, …);
//! `schema.rs` creates, migrates and checks the schema; `write.rs` is the
//! fenced writer (its transaction, the fence, the event inserts); `read.rs`
//! is the read pool and every query.

mod read;
mod rows;
mod schema;
pub(super) mod summary;
mod term;
pub mod tls;
mod write;

use std::str::FromStr;
use std::time::Duration;

use postgres::{Client, Config, NoTls};

use super::HistoryError;

pub(super) use read::{
    acting, activity, changes_since, cluster_baseline, cluster_events, events, first_event_ms,
    refusals, resume_point, scopes, terms, watched_until, writer_fence, writer_status, PgPool,
};
pub use schema::{name_unnamed_cluster, prepare, PG_SCHEMA_VERSION};
pub use term::{Seat, TermSeat};
pub use write::record_writer_error;
pub(super) use write::PgWriter;

/// No read or write statement runs longer.
const STATEMENT_TIMEOUT: &str = "60s";
/// Connecting gives up after this (unless the URL says otherwise).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The URL (redacted) in a PostgreSQL error.
fn with_url(e: HistoryError, url: &str) -> HistoryError {
    match e {
        HistoryError::Postgres { error, .. } => HistoryError::Postgres {
            db: redact(url),
            error,
        },
        e => e,
    }
}

/// Is `db` (the `--db` argument) a PostgreSQL URL?
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// The URL with its password (in the authority, or a `password=`
/// parameter) replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let base = redact_authority(base);
    match query {
        None => base,
        Some(q) => {
            let q: Vec<String> = q
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some(("password", _)) => "password=***".to_owned(),
                    _ => p.to_owned(),
                })
                .collect();
            format!("{base}?{}", q.join("&"))
        }
    }
}

fn redact_authority(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match (authority.rfind('@'), authority.find(':')) {
        (Some(at), Some(colon)) if colon < at => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &authority[..colon],
            &rest[at..]
        ),
        _ => url.to_owned(),
    }
}

/// A client that is never dropped on an async runtime's thread: the sync
/// `postgres` client runs a small runtime of its own, which must not be
/// shut down from inside another one (the last `Reader` clone may go away
/// in an async task).
struct Conn(Option<Client>);

impl Conn {
    fn get(&mut self) -> Result<&mut Client, HistoryError> {
        self.0.as_mut().ok_or(HistoryError::Closed)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                let _ = std::thread::Builder::new()
                    .name("tenure-pg-close".into())
                    .spawn(move || drop(client));
            } else {
                drop(client);
            }
        }
    }
}

fn connect(url: &str, settings: &str) -> Result<Conn, HistoryError> {
    connect_tuned(url, settings, |_| {})
}

/// [`connect`], for a session that must not wait long on a server that
/// stopped answering: unacknowledged data gives up after `within`, and an
/// idle connection is probed after `within` (a dropped connection is
/// noticed in seconds, not the system's two hours).
fn connect_within(url: &str, settings: &str, within: Duration) -> Result<Conn, HistoryError> {
    connect_tuned(url, settings, |c| {
        c.tcp_user_timeout(within)
            .keepalives_idle(within)
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3);
    })
}

fn connect_tuned(
    url: &str,
    settings: &str,
    tune: impl FnOnce(&mut Config),
) -> Result<Conn, HistoryError> {
    let setup = |problem: String| HistoryError::PostgresSetup {
        db: redact(url),
        problem,
    };
    let (driver_url, tls) = tls::split(url).map_err(setup)?;
    let mut config = Config::from_str(&driver_url).map_err(|e| HistoryError::Postgres {
        db: redact(url),
        error: Box::new(e),
    })?;
    config.ssl_mode(tls.mode.driver_mode());
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config.keepalives(true);
    config.application_name("tenure");
    tune(&mut config);
    let connected = match tls::connector(&tls).map_err(setup)? {
        Some(tls) => config.connect(tls),
        None => config.connect(NoTls),
    };
    let mut client = connected.map_err(|e| HistoryError::Postgres {
        db: redact(url),
        error: Box::new(e),
    })?;
    client
        .batch_execute(&format!(
            "SET statement_timeout = '{STATEMENT_TIMEOUT}'; {settings}"
        ))
        .map_err(|e| pg_err(url, e))?;
    Ok(Conn(Some(client)))
}

fn pg_err(url: &str, e: postgres::Error) -> HistoryError {
    HistoryError::Postgres {
        db: redact(url),
        error: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_redacted_wherever_the_url_carries_them() {
        assert_eq!(
            redact("postgres://u:secret@db:5432/h?sslmode=require"),
            "postgres://u:***@db:5432/h?sslmode=require"
        );
        assert_eq!(
            redact("postgres://u@db/h?password=secret&sslmode=verify-full"),
            "postgres://u@db/h?password=***&sslmode=verify-full"
        );
        assert_eq!(redact("postgres://u@db/h"), "postgres://u@db/h");
    }
}
