//! Lease objects as the API gives them, turned into what etcd's watch
//! gives the state machine: the key kube-apiserver stores the Lease under
//! (`PREFIX leases/NAMESPACE/NAME`), a value the `kubernetes` layout's JSON
//! reader decodes (kind, apiVersion and the object's spec, nothing else),
//! and the resourceVersion as the revision (it is etcd's revision of the
//! write: the same token whichever way the Lease is read).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::http::ApiError;
use super::split::Piece;
use crate::layout::{Claim, Reading, Sources};
use crate::watch::state::{Change, Kv};

/// A list's page read whole (tests): its Leases, the revision it was read
/// at, and where the next page starts.
#[cfg(test)]
#[derive(Debug)]
pub(super) struct Page {
    pub kvs: Vec<Kv>,
    pub revision: i64,
    pub next: Option<String>,
}

/// One watch event.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Watched {
    /// A Lease written or deleted at its revision.
    Change(i64, Change),
    /// Everything up to this revision was sent.
    Bookmark(i64),
    /// An ERROR event: its code (410: the revision is gone) and message.
    Error(u16, String),
    /// A Lease that cannot be read (`"NAME: why"`): at its key and
    /// revision when its first bytes say them, a deletion or an unreadable
    /// write, as etcd's watch gives a value nobody can decode.
    Unreadable(Option<(i64, Change)>, String),
}

/// What a line, a list or one object of them could not be read as; for
/// one object, where it is stored and its revision when its first bytes
/// say so.
#[derive(Debug, thiserror::Error)]
#[error("an answer of the Kubernetes API that is not {what}: {reason}")]
pub struct Unreadable {
    what: &'static str,
    reason: String,
    /// The object's key, as etcd holds it.
    key: Option<Vec<u8>>,
    revision: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    #[serde(default)]
    resource_version: String,
    #[serde(rename = "continue", default)]
    next: Option<String>,
}

#[derive(Deserialize)]
struct Object<'a> {
    #[serde(default)]
    metadata: Meta,
    #[serde(borrow, default)]
    spec: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    resource_version: String,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
}

fn unreadable(what: &'static str, e: impl std::fmt::Display) -> Unreadable {
    Unreadable {
        what,
        reason: crate::text::cut(&e.to_string(), 512).to_owned(),
        key: None,
        revision: None,
    }
}

/// What an [`Unreadable`] resourceVersion is called.
const RESOURCE_VERSION: &str = "a resourceVersion";

fn revision(rv: &str) -> Result<i64, Unreadable> {
    rv.parse::<i64>()
        .map_err(|_| unreadable(RESOURCE_VERSION, rv))
}

impl Unreadable {
    /// Whether it is a resourceVersion that is not an integer: an API
    /// server not backed by etcd, which no retry changes.
    pub(super) fn is_no_revision(&self) -> bool {
        self.what == RESOURCE_VERSION
    }

    /// The object's name as stored (`PREFIX leases/NAMESPACE/NAME`), or
    /// what is known of it.
    pub(super) fn name(&self) -> String {
        match &self.key {
            Some(k) => String::from_utf8_lossy(k).into_owned(),
            None => "an object whose name is not known".to_owned(),
        }
    }

    /// The object as an unreadable write at its key and revision, when
    /// both are known: its value is empty, which the layout reads as
    /// malformed (counted as an ignored key, a write all the same), as a
    /// value read from etcd that cannot be decoded.
    pub(super) fn as_write(&self) -> Option<Kv> {
        Some(Kv {
            key: self.key.clone()?,
            value: Vec::new(),
            create_revision: 0,
            mod_revision: self.revision?,
            lease: 0,
        })
    }

    /// As the error of an answer to `path`: a resourceVersion that is not
    /// an integer is [`ApiError::NotARevision`] (permanent), anything else
    /// an unreadable body (retried).
    pub(super) fn answer_to(self, path: &str) -> ApiError {
        let path = path.to_owned();
        if self.what == RESOURCE_VERSION {
            return ApiError::NotARevision {
                path,
                value: self.reason,
            };
        }
        ApiError::Body {
            path,
            reason: self.to_string(),
        }
    }
}

/// The keys and values of Leases read under `prefix` (`/registry/`).
pub(super) struct Keys<'p> {
    pub prefix: &'p str,
}

impl Keys<'_> {
    /// A Lease object as etcd would hold it: its key, its value, its
    /// revision. A holderIdentity past 256 bytes is cut as the layout cuts
    /// it (`election::keys::holder_of`), so one Lease costs a few kB
    /// whatever its writer wrote.
    fn kv(&self, object: &str) -> Result<Kv, Unreadable> {
        let o: Object<'_> = serde_json::from_str(object).map_err(|e| unreadable("a Lease", e))?;
        let key = format!(
            "{}leases/{}/{}",
            self.prefix, o.metadata.namespace, o.metadata.name
        );
        let spec = o.spec.map_or("{}", RawValue::get);
        let spec = cut_holder(spec).map_err(|e| unreadable("a Lease", e))?;
        let value = format!(
            "{{\"kind\":\"Lease\",\"apiVersion\":\"coordination.k8s.io/v1\",\"spec\":{spec}}}"
        );
        Ok(Kv {
            key: key.into_bytes(),
            value: value.into_bytes(),
            // Not in the object; no rule of a Lease needs it
            // (`contradiction` reads 0 as "any revision up to the value's").
            create_revision: 0,
            mod_revision: revision(&o.metadata.resource_version)?,
            lease: 0,
        })
    }

    /// One object of a list or a watch, or why not, named as far as its
    /// first bytes tell.
    fn object(&self, object: &[u8]) -> Result<Kv, Unreadable> {
        let read = std::str::from_utf8(object)
            .map_err(|e| unreadable("a Lease", e))
            .and_then(|o| self.kv(o));
        read.map_err(|e| self.named(e, object))
    }

    /// `e` with the key and revision `head` (an object's first bytes)
    /// names.
    fn named(&self, mut e: Unreadable, head: &[u8]) -> Unreadable {
        let meta = find(head, b"\"metadata\":{").map_or(head, |at| &head[at..]);
        let (namespace, name) = (field(meta, "namespace"), field(meta, "name"));
        if let (Some(ns), Some(n)) = (namespace, name) {
            if !ns.is_empty() && !n.is_empty() {
                e.key = Some(format!("{}leases/{ns}/{n}", self.prefix).into_bytes());
            }
        }
        e.revision = field(meta, "resourceVersion").and_then(|rv| rv.parse().ok());
        e
    }

    /// One Lease object, as a GET of it answers.
    pub(super) fn lease(&self, body: &[u8]) -> Result<Kv, Unreadable> {
        self.object(body)
    }

    /// A list's `metadata`: the revision it was read at, and where the
    /// next page starts.
    pub(super) fn list_meta(&self, raw: &[u8]) -> Result<(i64, Option<String>), Unreadable> {
        let meta: ListMeta =
            serde_json::from_slice(raw).map_err(|e| unreadable("a LeaseList", e))?;
        let rev = revision(&meta.resource_version)?;
        Ok((rev, meta.next.filter(|c| !c.is_empty())))
    }

    /// One object of a list's `items`.
    pub(super) fn item(&self, piece: Piece) -> Result<Kv, Unreadable> {
        match piece {
            Piece::Item(bytes) => self.object(&bytes),
            Piece::TooBig { head, len } => Err(self.too_big(&head, len)),
            Piece::Metadata(_) => Err(unreadable("an item", "a second metadata")),
        }
    }

    fn too_big(&self, head: &[u8], len: usize) -> Unreadable {
        let why = unreadable(
            "a Lease within 16 MiB",
            format!("{len} bytes, read no further"),
        );
        self.named(why, head)
    }

    /// One page of a list read whole (tests: serve reads pages piece by
    /// piece, `split.rs`).
    #[cfg(test)]
    pub(super) fn page(&self, body: &[u8]) -> Result<Page, Unreadable> {
        let mut pieces = Vec::new();
        let mut split = super::split::Splitter::new();
        split.feed(body, &mut pieces);
        if !split.whole() || !matches!(pieces.first(), Some(Piece::Metadata(_))) {
            return Err(unreadable("a LeaseList", "not whole, or no metadata first"));
        }
        let mut page = Page {
            kvs: Vec::new(),
            revision: 0,
            next: None,
        };
        for p in pieces {
            match p {
                Piece::Metadata(m) => (page.revision, page.next) = self.list_meta(&m)?,
                p => page.kvs.push(self.item(p)?),
            }
        }
        Ok(page)
    }

    /// One line of a watch.
    pub(super) fn event(&self, line: &[u8]) -> Result<Watched, Unreadable> {
        let e: Event<'_> =
            serde_json::from_slice(line).map_err(|e| unreadable("a watch event", e))?;
        let kind = e.kind.as_str();
        match kind {
            "ADDED" | "MODIFIED" | "DELETED" => match self.object(e.object.get().as_bytes()) {
                Ok(kv) => Ok(change(kind, kv)),
                Err(e) if e.is_no_revision() => Err(e),
                Err(e) => Ok(unreadable_change(kind, e)),
            },
            "BOOKMARK" => {
                let o: Object<'_> = serde_json::from_str(e.object.get())
                    .map_err(|e| unreadable("a bookmark", e))?;
                Ok(Watched::Bookmark(revision(&o.metadata.resource_version)?))
            }
            "ERROR" => {
                let s: Status =
                    serde_json::from_str(e.object.get()).map_err(|e| unreadable("a Status", e))?;
                Ok(Watched::Error(s.code, s.message))
            }
            other => Err(unreadable("a watch event", format!("type {other:?}"))),
        }
    }

    /// A watch event longer than a line may be (`len` bytes, `head` its
    /// first): unreadable, named as far as its first bytes tell.
    pub(super) fn too_big_event(&self, head: &[u8], len: usize) -> Watched {
        let kind = field(head, "type").unwrap_or("MODIFIED").to_owned();
        unreadable_change(&kind, self.too_big(head, len))
    }
}

/// `"NAME: why"` when the layout cannot read the value of `kv`, a key it
/// reads (a field of another type, a time outside 1970..9999): counted by
/// the state as every unreadable value is, named here. Heartbeats, which
/// the layout never decodes, are not read here either.
pub(super) fn unreadable_value(sources: &Sources, kv: &Kv) -> Option<String> {
    if kv.value.is_empty() {
        // An object already named as unreadable (`as_write`).
        return None;
    }
    let (Some(source), role) = sources.classify(&kv.key, 0) else {
        return None;
    };
    match source.read(&role, &kv.value) {
        Some(Reading::Claim(Claim::Unreadable(_))) => Some(format!(
            "{}: a Lease whose spec cannot be read (a field of another type, or a time \
             outside 1970..9999)",
            String::from_utf8_lossy(&kv.key)
        )),
        _ => None,
    }
}

/// [`unreadable_value`] of a write.
pub(super) fn unreadable_value_of(sources: &Sources, change: &Change) -> Option<String> {
    match change {
        Change::Put(kv) => unreadable_value(sources, kv),
        Change::Delete { .. } => None,
    }
}

/// A Lease written or deleted, as a change at its revision.
fn change(kind: &str, mut kv: Kv) -> Watched {
    let revision = kv.mod_revision;
    let change = match kind {
        // The object as it was, at the deletion's revision.
        "DELETED" => Change::Delete {
            key: kv.key,
            revision,
            lease: None,
        },
        _ => {
            if kind == "ADDED" {
                kv.create_revision = revision;
            }
            Change::Put(kv)
        }
    };
    Watched::Change(revision, change)
}

/// An event whose object cannot be read: a deletion is still one at its
/// key and revision when known; a write an unreadable one.
fn unreadable_change(kind: &str, e: Unreadable) -> Watched {
    let at = match e.as_write().map(|kv| change(kind, kv)) {
        Some(Watched::Change(r, c)) => Some((r, c)),
        _ => None,
    };
    Watched::Unreadable(at, format!("{}: {e}", e.name()))
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The first string member `name` in `json`, read leniently (a head cut
/// anywhere): `"name":"VALUE"`, VALUE without escapes.
fn field<'a>(json: &'a [u8], name: &str) -> Option<&'a str> {
    let pattern = format!("\"{name}\":\"");
    let at = find(json, pattern.as_bytes())? + pattern.len();
    let rest = &json[at..];
    let end = rest.iter().position(|b| *b == b'"' || *b == b'\\')?;
    (rest[end] == b'"')
        .then(|| std::str::from_utf8(&rest[..end]).ok())
        .flatten()
}

/// A spec past which a holderIdentity may be long enough to cut.
const SMALL_SPEC: usize = 1024;

/// `spec` (a LeaseSpec's JSON) with its holderIdentity cut as the layout
/// cuts holders; a small spec is passed as it is (a holder it holds is
/// shorter than the cut).
fn cut_holder(spec: &str) -> Result<std::borrow::Cow<'_, str>, serde_json::Error> {
    if spec.len() <= SMALL_SPEC {
        return Ok(spec.into());
    }
    let mut fields: serde_json::Map<String, serde_json::Value> = serde_json::from_str(spec)?;
    if let Some(serde_json::Value::String(h)) = fields.get_mut("holderIdentity") {
        *h = crate::election::keys::holder_of(h.as_bytes());
    }
    Ok(serde_json::to_string(&fields)?.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Claim, Layout};

    const K: Keys<'static> = Keys {
        prefix: "/registry/",
    };

    #[test]
    fn a_lease_reads_as_the_layout_reads_it_from_etcd() {
        let list = br#"{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","metadata":{"resourceVersion":"812","continue":"abc"},"items":[{"metadata":{"name":"kube-controller-manager","namespace":"kube-system","resourceVersion":"800","managedFields":[]},"spec":{"holderIdentity":"m1_x","leaseDurationSeconds":15,"acquireTime":"2026-12-06T02:55:52.584261Z","renewTime":"2026-12-06T02:56:00.000001Z","leaseTransitions":3}}]}"#;
        let page = K.page(list).unwrap();
        assert_eq!((page.revision, page.next.as_deref()), (812, Some("abc")));
        let kv = &page.kvs[0];
        assert_eq!(
            kv.key,
            b"/registry/leases/kube-system/kube-controller-manager"
        );
        assert_eq!(kv.mod_revision, 800);
        let layout = crate::layout::kubernetes::Kubernetes::new("/registry/", false).unwrap();
        match layout.read_claim(&kv.value) {
            Some(Claim::Held(h)) => {
                assert_eq!(h.holder, "m1_x");
                assert_eq!(h.duration_s, Some(15));
                assert_eq!(h.transitions, Some(3));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn watch_events_are_changes_at_their_resource_version() {
        let put = br#"{"type":"MODIFIED","object":{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"demo","namespace":"default","resourceVersion":"901"},"spec":{"holderIdentity":""}}}"#;
        match K.event(put).unwrap() {
            Watched::Change(901, Change::Put(kv)) => assert_eq!(kv.create_revision, 0),
            other => panic!("{other:?}"),
        }
        let del = br#"{"type":"DELETED","object":{"metadata":{"name":"demo","namespace":"default","resourceVersion":"905"}}}"#;
        assert_eq!(
            K.event(del).unwrap(),
            Watched::Change(
                905,
                Change::Delete {
                    key: b"/registry/leases/default/demo".to_vec(),
                    revision: 905,
                    lease: None
                }
            )
        );
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"resourceVersion":"990","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        assert_eq!(K.event(bookmark).unwrap(), Watched::Bookmark(990));
        let gone = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (900)","reason":"Expired","code":410}}"#;
        assert_eq!(
            K.event(gone).unwrap(),
            Watched::Error(410, "too old resource version: 5 (900)".into())
        );
        assert!(K
            .event(b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"x\"}}}")
            .is_err());
    }

    #[test]
    fn a_resource_version_that_is_no_revision_stops_with_what_to_do() {
        let list = br#"{"kind":"LeaseList","metadata":{"resourceVersion":"a1b2"},"items":[]}"#;
        let e = K.page(list).unwrap_err().answer_to("/apis/x");
        assert!(e.is_permanent(), "{e}");
        let said = e.to_string();
        assert!(said.contains("\"a1b2\", which is not an integer"), "{said}");
        assert!(said.contains("--source kubernetes:/registry/"), "{said}");
        let event = br#"{"type":"MODIFIED","object":{"metadata":{"name":"d","namespace":"n","resourceVersion":"x7"},"spec":{}}}"#;
        assert!(K.event(event).unwrap_err().answer_to("/w").is_permanent());
        // A body that is no JSON at all is retried, not stopped on.
        assert!(!K
            .page(b"<html>")
            .unwrap_err()
            .answer_to("/p")
            .is_permanent());
        let one = br#"{"metadata":{"name":"demo","namespace":"default","resourceVersion":"77"},"spec":{"holderIdentity":"a"}}"#;
        assert_eq!(K.lease(one).unwrap().mod_revision, 77);
    }

    #[test]
    fn a_huge_holder_is_cut_as_from_etcd_and_an_unreadable_object_is_named() {
        let holder = "h".repeat(1_300_000);
        let one = format!(
            r#"{{"metadata":{{"name":"big","namespace":"t","resourceVersion":"70"}},"spec":{{"holderIdentity":"{holder}","leaseDurationSeconds":5}}}}"#
        );
        let kv = K.item(Piece::Item(one.into_bytes())).unwrap();
        assert!(kv.value.len() < 400, "{}", kv.value.len());
        let layout = crate::layout::kubernetes::Kubernetes::new("/registry/", false).unwrap();
        match layout.read_claim(&kv.value) {
            Some(Claim::Held(h)) => {
                assert_eq!(h.holder, format!("{}…", "h".repeat(256)));
                assert_eq!(h.duration_s, Some(5));
            }
            other => panic!("{other:?}"),
        }
        // From etcd, the layout cuts it alike.
        let stored = format!(
            r#"{{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","spec":{{"holderIdentity":"{holder}"}}}}"#
        );
        assert!(
            matches!(layout.read_claim(stored.as_bytes()), Some(Claim::Held(h)) if h.holder.len() == 259)
        );
        // Too big to read: named by its head, an unreadable write there.
        let head = br#"{"metadata":{"name":"huge","namespace":"t","uid":"u","resourceVersion":"71","managedFields":[{"manager":"x"#;
        let e = K
            .item(Piece::TooBig {
                head: head.to_vec(),
                len: 20_000_000,
            })
            .unwrap_err();
        assert_eq!(e.name(), "/registry/leases/t/huge");
        assert!(e.to_string().contains("20000000 bytes"), "{e}");
        let kv = e.as_write().unwrap();
        assert_eq!((kv.mod_revision, kv.value.len()), (71, 0));
        assert!(matches!(
            layout.read_claim(&kv.value),
            Some(Claim::Unreadable(_))
        ));
        // No name at all: counted alone.
        let e = K.item(Piece::Item(b"{\"spec\":[}".to_vec())).unwrap_err();
        assert!(e.as_write().is_none());
    }

    #[test]
    fn an_unreadable_watch_event_is_a_write_at_its_key_or_a_deletion_never_an_end() {
        let head = br#"{"type":"MODIFIED","object":{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"huge","namespace":"t","resourceVersion":"88"},"spec":{"holderIdentity":"hhhh"#;
        match K.too_big_event(head, 30_000_000) {
            Watched::Unreadable(Some((88, Change::Put(kv))), what) => {
                assert_eq!(kv.key, b"/registry/leases/t/huge");
                assert!(kv.value.is_empty());
                assert!(what.starts_with("/registry/leases/t/huge: "), "{what}");
            }
            other => panic!("{other:?}"),
        }
        let del = format!(
            r#"{{"type":"DELETED","object":{{"metadata":{{"name":"d","namespace":"t","resourceVersion":"90"}},"spec":[{}]}}}}"#,
            "1,".repeat(600) + "1"
        );
        assert!(matches!(
            K.event(del.as_bytes()).unwrap(),
            Watched::Unreadable(Some((90, Change::Delete { revision: 90, .. })), _)
        ));
        assert!(matches!(
            K.too_big_event(b"{\"type\":\"MOD", 30_000_000),
            Watched::Unreadable(None, _)
        ));
    }

    #[test]
    fn a_value_the_layout_cannot_read_is_named_heartbeats_are_not_read() {
        let sources = Sources::new(vec![
            crate::layout::Source::parse("kubernetes:/registry/").unwrap()
        ]);
        let lease = |ns: &str, t: &str| {
            let one = format!(
                r#"{{"metadata":{{"name":"x","namespace":"{ns}","resourceVersion":"5"}},"spec":{{"holderIdentity":"a","acquireTime":"{t}"}}}}"#
            );
            K.item(Piece::Item(one.into_bytes())).unwrap()
        };
        let old = lease("default", "1969-12-31T23:59:59.000000Z");
        let said = unreadable_value(&sources, &old).unwrap();
        assert!(
            said.starts_with("/registry/leases/default/x: a Lease whose spec cannot be read"),
            "{said}"
        );
        let fine = lease("default", "2026-12-06T02:55:52.584261Z");
        assert_eq!(unreadable_value(&sources, &fine), None);
        // A heartbeat is never decoded, so never named.
        let node = lease("kube-node-lease", "1969-12-31T23:59:59.000000Z");
        assert_eq!(unreadable_value(&sources, &node), None);
    }
}
