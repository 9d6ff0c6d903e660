//! A writer term elected in the database itself, for a feed that has no
//! etcd to elect in (Leases read through the Kubernetes API). The term is
//! the feed's fence token: claiming takes the fence row's token
//! (`history_writer`, keyed by the cluster's name) plus one, with a lease
//! on the database's own clock in `writer_lease`; the holder renews the
//! lease; a standby claims once it has run out. So a writer that lost its
//! term (paused past its lease, cut from the database) is refused at its
//! next commit whatever it believes: the new holder's token is higher.
//! The lease only decides when a standby may take over.
//!
//! The lease has a table of its own: every commit locks the fence row for
//! its whole length (a retention prune may take a minute), and a renewal
//! must not wait for that. Only a claim of a lease that ran out locks the
//! fence row, to raise its token. Renewals and releases match the holder
//! as well as the token (a token number may come again after a reset).
//!
//! Blocking; one session per seat, opened again when it was closed or a
//! statement failed, every statement bounded by [`SEAT_TIMEOUT`] on the
//! server and the connection by TCP (`connect_within`).

use std::time::Duration;

use postgres::Client;

use super::{connect_within, with_url, Conn};
use crate::history::HistoryError;

/// No claim, renewal or release statement waits longer (a lock held by a
/// commit, a database that stopped answering).
const SEAT_TIMEOUT: Duration = Duration::from_secs(5);

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
    conn: Option<Conn>,
    url: String,
    cluster: String,
    holder: String,
    ttl_ms: f64,
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
        let mut seat = TermSeat {
            conn: None,
            url: url.to_owned(),
            cluster: cluster.to_owned(),
            holder: holder.to_owned(),
            ttl_ms: ttl.as_secs_f64() * 1000.0,
        };
        seat.session()?;
        Ok(seat)
    }

    /// The session, opened again when there is none or it was closed.
    fn session(&mut self) -> Result<&mut Client, HistoryError> {
        let open = self
            .conn
            .as_mut()
            .and_then(|c| c.get().ok())
            .is_some_and(|c| !c.is_closed());
        if !open {
            let ms = SEAT_TIMEOUT.as_millis();
            let settings = format!(
                "SET statement_timeout = {ms}; SET lock_timeout = {ms}; \
                 SET idle_in_transaction_session_timeout = {ms}"
            );
            self.conn = Some(connect_within(&self.url, &settings, SEAT_TIMEOUT)?);
        }
        self.conn.as_mut().ok_or(HistoryError::Closed)?.get()
    }

    /// `f` on the session; a failure drops it (the next call opens a new
    /// one: a restarted database, a session cut by a timeout).
    fn with<T>(
        &mut self,
        f: impl FnOnce(&mut Client, &Self) -> Result<T, HistoryError>,
    ) -> Result<T, HistoryError> {
        self.session()?;
        let mut conn = self.conn.take().ok_or(HistoryError::Closed)?;
        let result = conn.get().and_then(|c| f(c, self));
        if result.is_ok() {
            self.conn = Some(conn);
        }
        result.map_err(|e| with_url(e, &self.url))
    }

    /// Takes the term when no live one holds it: the fence row's token plus
    /// one, leased from now by the database's clock. A live term (this
    /// replica's own id included: a restarted replica waits out its old
    /// lease, as in etcd) is `Seat::Held`.
    pub fn claim(&mut self) -> Result<Seat, HistoryError> {
        self.with(|client, seat| {
            let mut tx = client.transaction()?;
            let Some(held) = seat.live_lease(&mut tx)? else {
                let token = seat.raise_fence(&mut tx)?;
                tx.execute(
                    "UPDATE writer_lease SET token = $2, holder = $3,
                            expires_at = clock_timestamp() + $4 * INTERVAL '1 millisecond'
                     WHERE cluster = $1",
                    &[&seat.cluster, &token, &seat.holder, &seat.ttl_ms],
                )?;
                tx.commit()?;
                return Ok(Seat::Won { token });
            };
            tx.commit()?;
            Ok(held)
        })
    }

    /// The lease row, locked (made when the feed has none): `Some` while
    /// another term's lease has not run out.
    fn live_lease(&self, tx: &mut postgres::Transaction<'_>) -> Result<Option<Seat>, HistoryError> {
        tx.execute(
            "INSERT INTO writer_lease (cluster, token, holder) VALUES ($1, 0, '')
             ON CONFLICT (cluster) DO NOTHING",
            &[&self.cluster],
        )?;
        let row = tx.query_one(
            "SELECT token, holder,
                    (EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000)::BIGINT
             FROM writer_lease WHERE cluster = $1 FOR UPDATE",
            &[&self.cluster],
        )?;
        let left: Option<i64> = row.try_get(2)?;
        Ok(match left.filter(|l| *l > 0) {
            Some(left_ms) => Some(Seat::Held {
                token: row.try_get(0)?,
                holder: row.try_get(1)?,
                left_ms,
            }),
            None => None,
        })
    }

    /// The fence row's token plus one, stored with this holder (the row
    /// made when the feed has none; locked, so a commit in flight of the
    /// term that ran out finishes first, and then is the last).
    fn raise_fence(&self, tx: &mut postgres::Transaction<'_>) -> Result<i64, HistoryError> {
        tx.execute(
            "INSERT INTO history_writer (cluster, token, holder, since_ms) VALUES ($1, 0, '', 0)
             ON CONFLICT (cluster) DO NOTHING",
            &[&self.cluster],
        )?;
        let row = tx.query_one(
            "SELECT token, generation, holder FROM history_writer WHERE cluster = $1 FOR UPDATE",
            &[&self.cluster],
        )?;
        let (token, generation, stored_holder): (i64, i64, String) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        if generation == super::schema::RENAMED_GENERATION {
            return Err(HistoryError::WriterFailed(format!(
                "this history's one unnamed cluster was {stored_holder} by a replica started \
                 with --cluster: restart this one with the same --cluster options as the others"
            )));
        }
        let next = token.checked_add(1).ok_or_else(|| {
            HistoryError::WriterFailed("the writer token cannot grow further".into())
        })?;
        tx.execute(
            "UPDATE history_writer SET token = $2, holder = $3, since_ms = $4 WHERE cluster = $1",
            &[&self.cluster, &next, &self.holder, &crate::events::now_ms()],
        )?;
        Ok(next)
    }

    /// Extends the term of `token` by the TTL from now; `false` when it is
    /// no longer this term (it ran out, a standby claimed).
    pub fn renew(&mut self, token: i64) -> Result<bool, HistoryError> {
        self.with(|client, seat| {
            let n = client.execute(
                "UPDATE writer_lease
                 SET expires_at = clock_timestamp() + $4 * INTERVAL '1 millisecond'
                 WHERE cluster = $1 AND token = $2 AND holder = $3
                   AND expires_at > clock_timestamp()",
                &[&seat.cluster, &token, &seat.holder, &seat.ttl_ms],
            )?;
            Ok(n == 1)
        })
    }

    /// Ends the term of `token` now (a standby claims at its next try);
    /// nothing when it is no longer this term.
    pub fn release(&mut self, token: i64) -> Result<(), HistoryError> {
        self.with(|client, seat| {
            client.execute(
                "UPDATE writer_lease SET expires_at = NULL
                 WHERE cluster = $1 AND token = $2 AND holder = $3",
                &[&seat.cluster, &token, &seat.holder],
            )?;
            Ok(())
        })
    }
}
