//! Kubernetes' Leases (`coordination.k8s.io/v1`) as kube-apiserver stores
//! them in its etcd: `PREFIX leases/NAMESPACE/NAME`, `PREFIX` being its
//! `--etcd-prefix` (`/registry/` by default). Every controller that uses
//! client-go's `leaderelection` (kube-controller-manager, kube-scheduler,
//! operators) holds one. What kube-apiserver writes is measured in
//! docs/kubernetes-facts.md; tests/kubernetes.rs runs the real parts.
//!
//! - **Named as Kubernetes names them**, `NAMESPACE/NAME`
//!   (`kube-system/kube-controller-manager`, what `kubectl get lease -n
//!   kube-system kube-controller-manager` takes), whatever the prefix and
//!   whether read from etcd or through the API ([`lease_name`]). Unlike
//!   other systems' elections this is no path, and tenure's own names
//!   could be the same: a cluster reads Leases or tenure's own elections,
//!   never both (`Source::overlaps`). Histories that named them
//!   `PREFIX NAMESPACE/NAME` are renamed once (`history::lease_names`).
//! - **Terms are the value's** ([`Layout::read_claim`]): a Lease key is
//!   created once and rewritten at every renewal, with no etcd lease. A
//!   term is a run of writes with one non-empty `holderIdentity` and one
//!   `acquireTime`; the state machine keeps the rule (`watch::state`), this
//!   file only reads a value into a [`Claim`].
//! - **Heartbeats are not elections**: kubelet's node leases (namespace
//!   `kube-node-lease`) and kube-apiserver's identity leases
//!   (`kube-system/apiserver-…`, held by `<name>_<uuid>`) are renewed by
//!   their one owner forever. They are told by their key alone, so their
//!   writes (5,000 nodes every 10 s) are never decoded: [`Role::Ignored`].
//!   `--source kubernetes+heartbeats:PREFIX` reads them as elections too.
//! - **Values**: `k8s\0` and a `runtime.Unknown` holding the Lease
//!   (protobuf, kube-apiserver's default), or JSON (`{`,
//!   `--storage-media-type=application/json`), per value. `k8s:enc:` is
//!   encrypted at rest: named as such ([`Unreadable::Encrypted`]), never
//!   guessed. Anything else is malformed; nothing here panics on a value.
//!
//! The protobuf messages are the handful this needs, derived with `prost`
//! (already in the tree under etcd-client) from the field numbers of
//! `k8s.io/api` and `k8s.io/apimachinery` (ARCHITECTURE.md, dependencies,
//! says why not `k8s-pb`). Unknown fields are skipped, as protobuf does.

use super::path::{lease_name, Prefix};
use super::{Claim, Hold, Layout, Role, Unreadable};
use crate::election::KeyLayout;

/// The name of this layout in `--source kubernetes:PREFIX`.
pub const NAME: &str = "kubernetes";
/// The same, with heartbeat leases read as elections.
pub const NAME_WITH_HEARTBEATS: &str = "kubernetes+heartbeats";

/// kube-apiserver's `--etcd-prefix` when `--source kubernetes:` gives none.
pub const DEFAULT_PREFIX: &str = "/registry/";

const MAGIC: &[u8] = b"k8s\0";
const ENCRYPTED: &[u8] = b"k8s:enc:";

#[derive(Debug, Clone)]
pub struct Kubernetes {
    /// `PREFIX leases/`: the one range read.
    leases: Prefix,
    heartbeats: bool,
}

impl Kubernetes {
    /// kube-apiserver's `--etcd-prefix` (empty: [`DEFAULT_PREFIX`]); it
    /// joins it to `leases` with one `/`, so one is added where it has none.
    pub fn new(prefix: &str, heartbeats: bool) -> Option<Self> {
        let prefix = Self::prefix_of(prefix);
        Some(Self {
            leases: Prefix::new(&format!("{prefix}leases/"))?,
            heartbeats,
        })
    }

    /// The prefix as read: `/registry/` for none, a `/` added at the end.
    pub fn prefix_of(prefix: &str) -> String {
        match prefix {
            "" => DEFAULT_PREFIX.to_owned(),
            p if p.ends_with('/') => p.to_owned(),
            p => format!("{p}/"),
        }
    }

    /// A heartbeat lease, by its key: a node's, or kube-apiserver's own.
    fn heartbeat(namespace: &[u8], name: &[u8]) -> bool {
        namespace == b"kube-node-lease"
            || (namespace == b"kube-system" && name.starts_with(b"apiserver-"))
    }
}

impl Layout for Kubernetes {
    fn name(&self) -> &'static str {
        if self.heartbeats {
            NAME_WITH_HEARTBEATS
        } else {
            NAME
        }
    }

    fn ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.leases.ranges()
    }

    fn classify(&self, key: &[u8], _lease: i64) -> Role {
        let Some(rest) = key.strip_prefix(self.leases.bytes()) else {
            return Role::Ignored;
        };
        let mut parts = rest.split(|b| *b == b'/');
        let (Some(namespace), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
            return Role::Invalid;
        };
        if namespace.is_empty() || name.is_empty() {
            return Role::Invalid;
        }
        if !self.heartbeats && Self::heartbeat(namespace, name) {
            return Role::Ignored;
        }
        match lease_name(namespace, name) {
            Some(election) => Role::Candidate {
                election,
                kind: KeyLayout::Lease,
            },
            None => Role::Invalid,
        }
    }

    fn read_claim(&self, value: &[u8]) -> Option<Claim> {
        Some(read(value))
    }
}

/// The pod a holder identity names, where it is client-go's
/// `hostname_uuid` (kube-controller-manager's, kube-scheduler's: the
/// hostname, which in a pod is its name, `_`, a UUID); `None` for any
/// other identity (a name of the holder's own choosing is shown as it is,
/// never guessed into a pod).
pub fn pod_of(identity: &str) -> Option<&str> {
    let (host, uuid) = identity.rsplit_once('_')?;
    let dashes = [8, 13, 18, 23];
    let is_uuid = uuid.len() == 36
        && uuid.char_indices().all(|(i, c)| {
            if dashes.contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    (is_uuid && !host.is_empty()).then_some(host)
}

/// What one stored value of a Lease says.
pub fn read(value: &[u8]) -> Claim {
    let spec = if value.starts_with(ENCRYPTED) {
        return Claim::Unreadable(Unreadable::Encrypted);
    } else if let Some(body) = value.strip_prefix(MAGIC) {
        proto::spec(body)
    } else if value.first() == Some(&b'{') {
        json::spec(value)
    } else {
        None
    };
    spec.map_or(Claim::Unreadable(Unreadable::Malformed), Spec::claim)
}

/// The earliest time a Lease is read with (1970-01-01, µs): a writer's
/// clock before the epoch is no clock a term can be measured on.
const EARLIEST_US: i64 = 0;
/// The latest (9999-12-31T23:59:59.999999Z): past it kube-apiserver's own
/// RFC 3339 has no four-digit year.
const LATEST_US: i64 = 253_402_300_799_999_999;

/// A time read, if it lies between [`EARLIEST_US`] and [`LATEST_US`]: a
/// value with a time outside is unreadable (counted, never a term's time).
fn in_range(us: i64) -> Option<i64> {
    (EARLIEST_US..=LATEST_US).contains(&us).then_some(us)
}

/// The fields of a LeaseSpec a term is read from; times in µs since the
/// epoch, on the writer's clock.
#[derive(Debug, Default, PartialEq, Eq)]
struct Spec {
    holder: Option<String>,
    duration_s: Option<i64>,
    acquired_us: Option<i64>,
    renewed_us: Option<i64>,
    transitions: Option<i64>,
}

impl Spec {
    /// The claim it makes; a holder cut as every holder is kept
    /// ([`holder_of`](crate::election::keys::holder_of): a value may be
    /// 1.5 MiB), so a Lease read from etcd or through the API is the same.
    fn claim(self) -> Claim {
        match self.holder {
            Some(holder) if !holder.is_empty() => Claim::Held(Hold {
                holder: if holder.len() > crate::election::keys::MAX_CANDIDATE_LEN {
                    crate::election::keys::holder_of(holder.as_bytes())
                } else {
                    holder
                },
                acquired_us: self.acquired_us,
                renewed_us: self.renewed_us,
                duration_s: self.duration_s,
                transitions: self.transitions,
            }),
            // Absent or `""`: nobody holds it (client-go's release writes
            // `""`).
            _ => Claim::Free {
                transitions: self.transitions,
            },
        }
    }
}

/// kube-apiserver's protobuf storage: `runtime.Unknown{typeMeta, raw}`,
/// `raw` the Lease. Field numbers from k8s.io/apimachinery's
/// `runtime/generated.proto` and k8s.io/api's `coordination/v1`.
mod proto {
    use prost::Message;

    #[derive(Clone, PartialEq, Message)]
    struct Unknown {
        #[prost(message, optional, tag = "1")]
        type_meta: Option<TypeMeta>,
        #[prost(bytes = "vec", optional, tag = "2")]
        raw: Option<Vec<u8>>,
    }

    /// runtime.TypeMeta: apiVersion 1, kind 2 (meta/v1's is the other way).
    #[derive(Clone, PartialEq, Message)]
    struct TypeMeta {
        #[prost(string, optional, tag = "1")]
        api_version: Option<String>,
        #[prost(string, optional, tag = "2")]
        kind: Option<String>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct Lease {
        #[prost(message, optional, tag = "2")]
        spec: Option<LeaseSpec>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct LeaseSpec {
        #[prost(string, optional, tag = "1")]
        holder_identity: Option<String>,
        #[prost(int32, optional, tag = "2")]
        lease_duration_seconds: Option<i32>,
        #[prost(message, optional, tag = "3")]
        acquire_time: Option<MicroTime>,
        #[prost(message, optional, tag = "4")]
        renew_time: Option<MicroTime>,
        #[prost(int32, optional, tag = "5")]
        lease_transitions: Option<i32>,
    }

    #[derive(Clone, Copy, PartialEq, Message)]
    struct MicroTime {
        #[prost(int64, optional, tag = "1")]
        seconds: Option<i64>,
        #[prost(int32, optional, tag = "2")]
        nanos: Option<i32>,
    }

    /// Go's zero time (0001-01-01T00:00:00Z) in seconds since the epoch:
    /// what a MicroTime set to nothing carries (its JSON is `null`).
    const GO_ZERO_SECONDS: i64 = -62_135_596_800;

    impl MicroTime {
        /// `Some(None)`: Go's zero time, no time (as its JSON, `null`);
        /// `None`: out of range, the value is unreadable.
        fn micros(self) -> Option<Option<i64>> {
            let (seconds, nanos) = (self.seconds.unwrap_or(0), self.nanos.unwrap_or(0));
            if seconds == GO_ZERO_SECONDS && nanos == 0 {
                return Some(None);
            }
            if !(0..1_000_000_000).contains(&nanos) {
                return None;
            }
            let s = seconds.checked_mul(1_000_000)?;
            super::in_range(s.checked_add(i64::from(nanos) / 1000)?).map(Some)
        }
    }

    /// A time as read: absent, or in range; `None` when unreadable.
    fn time(t: Option<MicroTime>) -> Option<Option<i64>> {
        t.map_or(Some(None), MicroTime::micros)
    }

    /// A stored value (magic included) of a Lease held by `holder`,
    /// acquired at `seconds` and `nanos` (tests).
    #[cfg(test)]
    pub(super) fn value(holder: &str, seconds: i64, nanos: i32) -> Vec<u8> {
        let spec = LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime {
                seconds: Some(seconds),
                nanos: Some(nanos),
            }),
            renew_time: None,
            lease_transitions: Some(0),
        };
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
            }),
            raw: Some(Lease { spec: Some(spec) }.encode_to_vec()),
        };
        [super::MAGIC, &unknown.encode_to_vec()].concat()
    }

    /// The spec of the Lease in `body` (after the magic); `None` when it is
    /// not one.
    pub(super) fn spec(body: &[u8]) -> Option<super::Spec> {
        let unknown = Unknown::decode(body).ok()?;
        let meta = unknown.type_meta?;
        if meta.kind.as_deref() != Some("Lease")
            || !meta
                .api_version
                .is_some_and(|v| v.starts_with("coordination.k8s.io/"))
        {
            return None;
        }
        let spec = Lease::decode(unknown.raw?.as_slice()).ok()?.spec?;
        Some(super::Spec {
            holder: spec.holder_identity,
            duration_s: spec.lease_duration_seconds.map(i64::from),
            acquired_us: time(spec.acquire_time)?,
            renewed_us: time(spec.renew_time)?,
            transitions: spec.lease_transitions.map(i64::from),
        })
    }
}

/// `--storage-media-type=application/json`: the object as JSON, times as
/// RFC 3339 (MicroTime with microseconds).
pub use json::rfc3339_micros;

mod json {
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Lease {
        kind: String,
        api_version: String,
        #[serde(default)]
        spec: LeaseSpec,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct LeaseSpec {
        holder_identity: Option<String>,
        lease_duration_seconds: Option<i32>,
        acquire_time: Option<String>,
        renew_time: Option<String>,
        lease_transitions: Option<i32>,
    }

    pub(super) fn spec(value: &[u8]) -> Option<super::Spec> {
        let lease: Lease = serde_json::from_slice(value).ok()?;
        if lease.kind != "Lease" || !lease.api_version.starts_with("coordination.k8s.io/") {
            return None;
        }
        let s = lease.spec;
        // `Some(None)`: no time written; `None`: one that is not a time.
        let time = |t: Option<String>| match t {
            None => Some(None),
            Some(t) => rfc3339_micros(&t).and_then(super::in_range).map(Some),
        };
        Some(super::Spec {
            holder: s.holder_identity,
            duration_s: s.lease_duration_seconds.map(i64::from),
            acquired_us: time(s.acquire_time)?,
            renewed_us: time(s.renew_time)?,
            transitions: s.lease_transitions.map(i64::from),
        })
    }

    /// `2026-12-06T02:55:52.584261Z` (or `+01:00`) in µs since the epoch;
    /// `None` when it is not such a time.
    pub fn rfc3339_micros(t: &str) -> Option<i64> {
        let b = t.as_bytes();
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let s = t.get(r)?;
            s.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| s.parse().ok())?
        };
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
            return None;
        }
        let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if b[13] != b':' || b[16] != b':' || !(1..=12).contains(&mo) {
            return None;
        }
        if d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59 {
            return None;
        }
        let mut i = 19;
        let mut micros = 0;
        if b[i] == b'.' {
            let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
            let frac = &t[i + 1..i + 1 + digits];
            let padded = format!("{:0<6}", frac.get(..6.min(digits))?);
            micros = padded.parse::<i64>().ok()?;
            i += 1 + digits;
        }
        let offset_s = match t.get(i..)? {
            "Z" | "z" => 0,
            o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
                let sign = if o.starts_with('-') { -1 } else { 1 };
                let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
                if oh > 23 || om > 59 || o.as_bytes()[3] != b':' {
                    return None;
                }
                sign * (oh * 3600 + om * 60)
            }
            _ => return None,
        };
        let days = days_from_civil(y, mo, d);
        let secs = days * 86_400 + h * 3600 + mi * 60 + s - offset_s;
        Some(secs * 1_000_000 + micros)
    }

    /// The days of month `m` of year `y` (proleptic Gregorian).
    fn days_in_month(y: i64, m: i64) -> i64 {
        match m {
            2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
    /// `days_from_civil`).
    fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }
}

#[cfg(test)]
mod tests;
