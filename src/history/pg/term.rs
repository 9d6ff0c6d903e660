//! A writer term elected in the database itself, for a feed that has no
//! etcd to elect in (Leases read through the Kubernetes API): the feed's
//! fence row (`history_writer`, keyed by the cluster's name) is the
//! election. Claiming takes the row's token plus one and a lease on the
//! database's own clock (`expires_at`, `clock_timestamp()`); the holder
//! renews it; a standby claims once it has run out. The token is then the
//! writer's fence token, so the fence and the election are one row: a
//! writer that lost its term (paused past its lease, cut from the
//! database) is refused at its next commit whatever it believes, because
//! the new holder's token is higher. The lease only decides when a standby
//! may take over.
//!
//! Blocking; one connection kept per seat, every statement bounded by
//! [`SEAT_TIMEOUT`].

use std::time::Duration;

use super::{connect, with_url, Conn};
use crate::history::HistoryError;

/// No claim, renewal or release statement waits longer (a lock held by a
/// commit, a database that stopped answering).
const SEAT_TIMEOUT: &str = "5s";

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seat {
    /// This replica's term, with its token.
    Won { token: i64 },
    /// Another holder's term that has not run out.
    Held {
        token: i64,
        holder: String,
        /// Its lease left, by the database's clock.
        left_ms: i64,
    },
}

/// One replica's seat at a feed's database election.
pub struct TermSeat {
    conn: Conn,
    url: String,
    cluster: String,
    holder: String,
    ttl_ms: i64,
}

impl TermSeat {
    /// A session for the election of `cluster`'s writer (`""`: the one
    /// unnamed cluster) as `holder`, each term leased for `ttl`.
    pub fn connect(
        url: &str,
        cluster: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<TermSeat, HistoryError> {
        let conn = connect(
            url,
            &format!(
                "SET statement_timeout = '{SEAT_TIMEOUT}'; SET lock_timeout = '{SEAT_TIMEOUT}'; \
                 SET idle_in_transaction_session_timeout = '{SEAT_TIMEOUT}'"
            ),
        )?;
        Ok(TermSeat {
            conn,
            url: url.to_owned(),
            cluster: cluster.to_owned(),
            holder: holder.to_owned(),
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
        })
    }

    /// Takes the term when no live one holds it: the stored token plus one,
    /// leased from now by the database's clock. A live term (this
    /// replica's own id included: a restarted replica waits out its old
    /// lease, as in etcd) is `Seat::Held`.
    pub fn claim(&mut self) -> Result<Seat, HistoryError> {
        let (cluster, holder, ttl_ms) = (&self.cluster, &self.holder, self.ttl_ms);
        let client = self.conn.get()?;
        let seat = (|| {
            let mut tx = client.transaction()?;
            tx.execute(
                "INSERT INTO history_writer (cluster, token, holder, since_ms) VALUES ($1, 0, '', 0)
                 ON CONFLICT (cluster) DO NOTHING",
                &[cluster],
            )?;
            let row = tx.query_one(
                "SELECT token, holder, generation,
                        (EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000)::BIGINT
                 FROM history_writer WHERE cluster = $1 FOR UPDATE",
                &[cluster],
            )?;
            let (token, stored_holder, generation, left): (i64, String, i64, Option<i64>) = (
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
            );
            if generation == super::schema::RENAMED_GENERATION {
                return Err(HistoryError::WriterFailed(format!(
                    "this history's one unnamed cluster was {stored_holder} by a replica \
                     started with --cluster: restart this one with the same --cluster options \
                     as the others"
                )));
            }
            if let Some(left_ms) = left.filter(|l| *l > 0) {
                return Ok(Seat::Held {
                    token,
                    holder: stored_holder,
                    left_ms,
                });
            }
            let next = token.checked_add(1).ok_or_else(|| {
                HistoryError::WriterFailed("the writer token cannot grow further".into())
            })?;
            tx.execute(
                "UPDATE history_writer SET token = $2, holder = $3, since_ms = $4,
                        expires_at = clock_timestamp() + $5 * INTERVAL '1 millisecond'
                 WHERE cluster = $1",
                &[
                    cluster,
                    &next,
                    holder,
                    &crate::events::now_ms(),
                    &(ttl_ms as f64),
                ],
            )?;
            tx.commit()?;
            Ok(Seat::Won { token: next })
        })();
        seat.map_err(|e| with_url(e, &self.url))
    }

    /// Extends the term of `token` by the TTL from now; `false` when it is
    /// no longer this term (a standby claimed after it ran out).
    pub fn renew(&mut self, token: i64) -> Result<bool, HistoryError> {
        let n = self.conn.get()?.execute(
            "UPDATE history_writer
             SET expires_at = clock_timestamp() + $3 * INTERVAL '1 millisecond'
             WHERE cluster = $1 AND token = $2 AND expires_at > clock_timestamp()",
            &[&self.cluster, &token, &(self.ttl_ms as f64)],
        );
        let n = n.map_err(|e| with_url(e.into(), &self.url))?;
        Ok(n == 1)
    }

    /// Ends the term of `token` now (a standby claims at its next try);
    /// nothing when it is no longer this term.
    pub fn release(&mut self, token: i64) -> Result<(), HistoryError> {
        self.conn
            .get()?
            .execute(
                "UPDATE history_writer SET expires_at = NULL WHERE cluster = $1 AND token = $2",
                &[&self.cluster, &token],
            )
            .map_err(|e| with_url(e.into(), &self.url))?;
        Ok(())
    }
}
