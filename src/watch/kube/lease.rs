//! Lease objects as the API gives them, turned into what etcd's watch
//! gives the state machine: the key kube-apiserver stores the Lease under
//! (`PREFIX leases/NAMESPACE/NAME`), a value the `kubernetes` layout's JSON
//! reader decodes (kind, apiVersion and the object's spec, nothing else),
//! and the resourceVersion as the revision (it is etcd's revision of the
//! write: the same token whichever way the Lease is read).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::http::ApiError;
use crate::watch::state::{Change, Kv};

/// A list's page: its Leases, the revision it was read at, and where the
/// next page starts.
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
}

/// What a line or a list could not be read as.
#[derive(Debug, thiserror::Error)]
#[error("an answer of the Kubernetes API that is not {what}: {reason}")]
pub struct Unreadable {
    what: &'static str,
    reason: String,
}

#[derive(Deserialize)]
struct List<'a> {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
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
        reason: e.to_string(),
    }
}

/// What an [`Unreadable`] resourceVersion is called.
const RESOURCE_VERSION: &str = "a resourceVersion";

fn revision(rv: &str) -> Result<i64, Unreadable> {
    rv.parse::<i64>()
        .map_err(|_| unreadable(RESOURCE_VERSION, rv))
}

impl Unreadable {
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
    /// revision.
    fn kv(&self, object: &RawValue) -> Result<Kv, Unreadable> {
        let o: Object<'_> =
            serde_json::from_str(object.get()).map_err(|e| unreadable("a Lease", e))?;
        let key = format!(
            "{}leases/{}/{}",
            self.prefix, o.metadata.namespace, o.metadata.name
        );
        let spec = o.spec.map_or("{}", RawValue::get);
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

    /// One Lease object, as a GET of it answers.
    pub(super) fn lease(&self, body: &[u8]) -> Result<Kv, Unreadable> {
        let object: &RawValue =
            serde_json::from_slice(body).map_err(|e| unreadable("a Lease", e))?;
        self.kv(object)
    }

    /// One page of a list.
    pub(super) fn page(&self, body: &[u8]) -> Result<Page, Unreadable> {
        let list: List<'_> =
            serde_json::from_slice(body).map_err(|e| unreadable("a LeaseList", e))?;
        let kvs = list
            .items
            .iter()
            .map(|o| self.kv(o))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Page {
            kvs,
            revision: revision(&list.metadata.resource_version)?,
            next: list.metadata.next.filter(|c| !c.is_empty()),
        })
    }

    /// One line of a watch.
    pub(super) fn event(&self, line: &[u8]) -> Result<Watched, Unreadable> {
        let e: Event<'_> =
            serde_json::from_slice(line).map_err(|e| unreadable("a watch event", e))?;
        match e.kind.as_str() {
            "ADDED" | "MODIFIED" => {
                let mut kv = self.kv(e.object)?;
                if e.kind == "ADDED" {
                    kv.create_revision = kv.mod_revision;
                }
                Ok(Watched::Change(kv.mod_revision, Change::Put(kv)))
            }
            "DELETED" => {
                // The object as it was, at the deletion's revision.
                let kv = self.kv(e.object)?;
                Ok(Watched::Change(
                    kv.mod_revision,
                    Change::Delete {
                        key: kv.key,
                        revision: kv.mod_revision,
                        lease: None,
                    },
                ))
            }
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
}
