//! Every Lease, listed page by page (`limit` and `continue`, one revision
//! whatever the pages), each page read piece by piece as it arrives
//! (`split.rs`): no page is held whole, one object at a time is decoded
//! and its holder cut (`lease.rs`). An object that cannot be read is
//! named and counted, never a reason to stop: at its key and revision
//! when its first bytes say them, an unreadable write (as a value from
//! etcd nobody can decode), else counted alone. A page that does not
//! arrive within [`BODY_TIMEOUT`](super::http::BODY_TIMEOUT) is asked for
//! again at half the size, down to one object; pages grow back after.

use tokio::time::Instant;

use super::http::{self, ApiError, BODY_TIMEOUT};
use super::lease::Keys;
use super::split::{Piece, Splitter};
use super::{ApiConfig, Kv, LEASES, PAGE};
use crate::layout::Sources;

/// A list read: every object, the revision, and what could not be read.
#[derive(Debug, Default)]
pub(super) struct Listed {
    pub kvs: Vec<Kv>,
    pub revision: i64,
    /// Objects that cannot be read, `"NAME: why"`; those with a key and a
    /// revision are in `kvs` as unreadable writes too.
    pub unreadable: Vec<String>,
    /// How many of them are not in `kvs` (no key or revision known).
    pub unnamed: usize,
}

/// One page read.
struct Page {
    listed: Listed,
    next: Option<String>,
}

/// Every Lease at `revision` (exactly), or now.
pub(super) async fn list(
    api: &ApiConfig,
    keys: &Keys<'_>,
    sources: &Sources,
    revision: Option<i64>,
) -> Result<Listed, ApiError> {
    let mut all = Listed::default();
    let mut next: Option<String> = None;
    let mut limit = PAGE;
    let mut at = None;
    loop {
        let path = match (&next, revision) {
            (Some(c), _) => format!(
                "{LEASES}?limit={limit}&continue={}",
                crate::text::encode_component(c)
            ),
            (None, Some(r)) => {
                format!("{LEASES}?limit={limit}&resourceVersion={r}&resourceVersionMatch=Exact")
            }
            (None, None) => format!("{LEASES}?limit={limit}"),
        };
        let page = match page(api, keys, sources, &path).await {
            Ok(p) => p,
            // Begun but not whole: smaller pages. (No answer at all is
            // no page's fault: said at once.)
            Err(e @ ApiError::Body { .. }) if limit > 1 => {
                limit /= 2;
                tracing::warn!(error = %e, limit, "a page of Leases did not arrive whole; asking for smaller pages");
                continue;
            }
            Err(e) => return Err(e),
        };
        limit = (limit * 2).min(PAGE);
        at = at.or(Some(page.listed.revision));
        all.kvs.extend(page.listed.kvs);
        all.unreadable.extend(page.listed.unreadable);
        all.unnamed += page.listed.unnamed;
        match page.next {
            Some(c) => next = Some(c),
            None => {
                all.revision = at.unwrap_or_default();
                return Ok(all);
            }
        }
    }
}

/// The revision the API has now (a list of one object).
pub(super) async fn revision_now(api: &ApiConfig, keys: &Keys<'_>) -> Result<i64, ApiError> {
    let path = format!("{LEASES}?limit=1");
    Ok(page(api, keys, &Sources::new(Vec::new()), &path)
        .await?
        .listed
        .revision)
}

/// One page at `path`, read piece by piece within [`BODY_TIMEOUT`].
async fn page(
    api: &ApiConfig,
    keys: &Keys<'_>,
    sources: &Sources,
    path: &str,
) -> Result<Page, ApiError> {
    let mut answer = http::get(api, path).await?;
    let deadline = Instant::now() + BODY_TIMEOUT;
    let mut split = Splitter::new();
    let mut pieces = Vec::new();
    let mut page = Page {
        listed: Listed::default(),
        next: None,
    };
    let mut meta = false;
    let late = || ApiError::Body {
        path: path.to_owned(),
        reason: format!("not whole within {BODY_TIMEOUT:?}"),
    };
    while let Some(chunk) = tokio::time::timeout_at(deadline, answer.chunk())
        .await
        .map_err(|_| late())??
    {
        split.feed(&chunk, &mut pieces);
        for piece in pieces.drain(..) {
            meta |= matches!(piece, Piece::Metadata(_));
            read(keys, sources, piece, &mut page).map_err(|e| e.answer_to(path))?;
        }
    }
    if !split.whole() || !meta {
        let reason = "not a whole LeaseList (cut short, or no metadata)".to_owned();
        return Err(ApiError::Body {
            path: path.to_owned(),
            reason,
        });
    }
    Ok(page)
}

/// One piece into `page`. The list's metadata unreadable, or an object's
/// resourceVersion no integer (an API server not backed by etcd), fail
/// the page; an object that cannot be read is named and counted.
fn read(
    keys: &Keys<'_>,
    sources: &Sources,
    piece: Piece,
    page: &mut Page,
) -> Result<(), super::lease::Unreadable> {
    if let Piece::Metadata(m) = piece {
        (page.listed.revision, page.next) = keys.list_meta(&m)?;
        return Ok(());
    }
    match keys.item(piece) {
        Ok(kv) => {
            page.listed
                .unreadable
                .extend(super::lease::unreadable_value(sources, &kv));
            page.listed.kvs.push(kv);
        }
        Err(e) if e.is_no_revision() => return Err(e),
        Err(e) => {
            match e.as_write() {
                Some(kv) => page.listed.kvs.push(kv),
                None => page.listed.unnamed += 1,
            }
            page.listed.unreadable.push(format!("{}: {e}", e.name()));
        }
    }
    Ok(())
}
