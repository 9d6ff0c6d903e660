//! tenure's token floor: `P election/~floor`, the highest revision of an
//! etcd timeline that etcd no longer has (it was restored from a snapshot,
//! or replaced), as far as tenure recorded it. Tokens are revisions; after
//! a restore without `--bump-revision` etcd hands them out again, so a
//! token at or below the floor may be one that was handed out (and
//! accepted by a fence) before. Every campaign txn and every fence txn
//! reads the floor in the same txn and refuses such a token
//! ([`super::Error::BelowFloor`]); once etcd's revision has passed the
//! floor, new tokens are above it and it only refuses the old range.
//!
//! `tenure serve` raises it when it records a reset (its watcher saw etcd's
//! revision go behind the stored one, another cluster id, or a state that
//! contradicts its history). The value is 20 digits, zero-padded like a
//! fence value, and only ever raised (a txn), never lowered or deleted by
//! tenure.

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

use super::keys::{pad_token, parse_padded_token};
use super::{Client, Error};

/// The floor a stored value means. One that is not a token (not written by
/// tenure) refuses every token, as the txns' byte comparison of a value
/// that sorts above the digits does: refusing is the side that cannot hand
/// out a token twice.
pub(crate) fn floor_value(value: &[u8]) -> i64 {
    parse_padded_token(value).unwrap_or(i64::MAX)
}

impl Client {
    /// The token floor, if one was ever raised.
    pub async fn floor(&self) -> Result<Option<i64>, Error> {
        let resp = self
            .op(self.etcd().get(self.keys.floor_key(), None))
            .await?;
        Ok(resp.kvs().first().map(|kv| floor_value(kv.value())))
    }

    /// Raises the token floor to `to` unless it is already there or higher,
    /// in one txn; returns the floor in effect afterwards.
    pub async fn raise_floor(&self, to: i64) -> Result<i64, Error> {
        let key = self.keys.floor_key();
        let value = pad_token(to);
        let put = || TxnOp::put(key.clone(), value.clone(), None);
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([put()])
            .or_else([TxnOp::txn(
                Txn::new()
                    .when([Compare::value(key.clone(), CompareOp::Less, value.clone())])
                    .and_then([put()])
                    .or_else([TxnOp::get(key.clone(), None)]),
            )]);
        let resp = self.op(self.etcd().txn(txn)).await?;
        if resp.succeeded() {
            return Ok(to);
        }
        let inner = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Txn(t) => Some(t),
            _ => None,
        });
        let Some(inner) = inner else {
            return Err(Error::Protocol(
                "floor txn: nested txn response missing".into(),
            ));
        };
        if inner.succeeded() {
            return Ok(to);
        }
        let stored = inner.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| floor_value(kv.value())),
            _ => None,
        });
        // Higher already (or written by someone else: see `floor_value`).
        Ok(stored.unwrap_or(to).max(to))
    }
}
