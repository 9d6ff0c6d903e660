//! The etcd key schema: the contract with every client, in any language.
//!
//! | key                                   | value                                  |
//! |---------------------------------------|----------------------------------------|
//! | `P election/<name>`                   | holder identity (single-key layout)    |
//! | `P election/<name>/<lease-hex>`       | candidate value (etcd's queue layout)  |
//! | `P fence/<name>/<resource>`           | last accepted token, 20 digits         |
//! | `P fence/<name>/<resource>/~refusal`  | the latest refusal, JSON               |
//! | `P election/~end/<name>`              | how tenure last ended a term, JSON     |
//! | `P election/~floor`                   | tenure's token floor, 20 digits        |
//! | `P election/~acting/<name>`           | the holder's acting record, JSON       |
//!
//! The end marker lives outside every election's own prefix: etcd's
//! `concurrency.Election` (and `etcdctl elect`) takes *every* key under
//! `P election/<name>/` for a candidate, so a marker there would queue as
//! the lowest candidate forever. Older tenure wrote `P election/<name>/~end`;
//! that form is still read (see [`Keys::legacy_end_marker_key`]).
//!
//! Everything that builds or parses one of these keys lives here, and every
//! name that reaches a key has been validated by [`ElectionName::new`] or
//! [`validate_resource`] first. User input never becomes a prefix or range
//! operation on its own: ranges are always built from a validated name.

use super::Error;

/// Longest election name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 128;
/// Longest resource name accepted, in bytes.
pub const MAX_RESOURCE_LEN: usize = 128;
/// Longest candidate identity accepted, in bytes.
pub const MAX_CANDIDATE_LEN: usize = 256;

/// The holder a candidate key's value names, as the watcher keeps it:
/// values from etcd are untrusted and may be up to 1.5 MiB, so at most
/// [`MAX_CANDIDATE_LEN`] bytes, cut on a character boundary and marked
/// with `…`.
pub fn holder_of(value: &[u8]) -> String {
    crate::text::cut_marked(&String::from_utf8_lossy(value), MAX_CANDIDATE_LEN).into_owned()
}
/// The last segment of a refusal record's key. `~` is never part of a valid
/// resource name, so this key cannot collide with a fence key.
pub const REFUSAL_SEGMENT: &str = "~refusal";
/// The segment of the end markers' directory, `P election/~end/<name>`, and
/// the last segment of the legacy marker `P election/<name>/~end`. `~` is
/// never part of a valid election name.
pub const END_MARKER_SEGMENT: &str = "~end";
/// The last segment of the token floor's key, `P election/~floor`.
pub const FLOOR_SEGMENT: &str = "~floor";
/// The segment of the acting records' directory, `P election/~acting/<name>`.
pub const ACTING_SEGMENT: &str = "~acting";

/// Why tenure itself ended a term; the value of the end marker key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndMarkerCause {
    /// The holder (or `tenure resign` with its token) gave it up.
    Resigned,
    /// An operator deposed the holder (`tenure depose`).
    Deleted,
}

/// `{"token":T,"cause":"resigned|deleted"}`, written in the same txn that
/// deletes the leader key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EndMarker {
    pub token: i64,
    pub cause: EndMarkerCause,
}

/// A validated election name: 1–128 bytes of `[A-Za-z0-9._-]` segments
/// separated by `/`, with no empty, `.` or `..` segment.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ElectionName(String);

impl ElectionName {
    pub fn new(name: &str) -> Result<Self, Error> {
        let invalid = |reason: &'static str| Error::InvalidName {
            name: truncate_for_message(name),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("an election name must not be empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(invalid("an election name is at most 128 bytes"));
        }
        if name.starts_with('/') {
            return Err(invalid(
                "a name beginning with '/' is another system's election (a key path that \
                 `tenure serve --source` watches): read it with `tenure history PATH` or on its \
                 page; tenure's own commands take tenure's own names",
            ));
        }
        for segment in name.split('/') {
            match segment {
                "" => return Err(invalid("empty segment (leading, trailing or double '/')")),
                "." | ".." => return Err(invalid("'.' and '..' segments are not allowed")),
                s if !s.bytes().all(is_name_byte) => {
                    return Err(invalid(
                        "only ASCII letters, digits, '.', '_' and '-' are allowed, with '/' between segments",
                    ))
                }
                _ => {}
            }
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Every proper path prefix of the name, shortest first: `a`, `a/b`
    /// for `a/b/c`. Each is a valid name (its segments are).
    pub fn ancestors(&self) -> impl Iterator<Item = ElectionName> + '_ {
        self.0
            .match_indices('/')
            .map(|(i, _)| ElectionName(self.0[..i].to_owned()))
    }
}

impl std::fmt::Display for ElectionName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for ElectionName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::new(s)
    }
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// A fenced resource name: 1–128 bytes of `[A-Za-z0-9._-]`, no `/` (so a
/// fence key splits unambiguously into election and resource), not `.`/`..`.
pub fn validate_resource(resource: &str) -> Result<(), Error> {
    let invalid = |reason: &'static str| Error::InvalidResource {
        resource: truncate_for_message(resource),
        reason,
    };
    if resource.is_empty() {
        return Err(invalid("a resource name must not be empty"));
    }
    if resource.len() > MAX_RESOURCE_LEN {
        return Err(invalid("a resource name is at most 128 bytes"));
    }
    if resource == "." || resource == ".." {
        return Err(invalid("'.' and '..' are not resource names"));
    }
    if !resource.bytes().all(is_name_byte) {
        return Err(invalid(
            "only ASCII letters, digits, '.', '_' and '-' are allowed (no '/')",
        ));
    }
    Ok(())
}

/// A candidate identity (the leader key's value): 1–256 bytes of UTF-8
/// without control characters. Anything else is allowed, `<script>` too: it
/// is escaped wherever it is shown.
pub fn validate_candidate(id: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(Error::InvalidCandidate("a candidate id must not be empty"));
    }
    if id.len() > MAX_CANDIDATE_LEN {
        return Err(Error::InvalidCandidate(
            "a candidate id is at most 256 bytes",
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(Error::InvalidCandidate(
            "a candidate id must not contain control characters",
        ));
    }
    Ok(())
}

/// Fencing tokens are etcd revisions, so they are positive.
pub fn validate_token(token: i64) -> Result<(), Error> {
    if token <= 0 {
        return Err(Error::InvalidToken(token));
    }
    Ok(())
}

fn truncate_for_message(s: &str) -> String {
    const MAX: usize = 64;
    if s.len() <= MAX {
        return s.to_owned();
    }
    format!("{}… ({} bytes)", crate::text::cut(s, MAX), s.len())
}

/// A fence value: the token zero-padded to 20 digits, so byte order is
/// numeric order and etcd's value comparison can compare tokens.
pub fn pad_token(token: i64) -> String {
    format!("{token:020}")
}

/// Parses a fence value written by [`pad_token`].
pub fn parse_padded_token(value: &[u8]) -> Option<i64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

/// The queue layout's last segment: the lease id in lower-case hex, as
/// etcd's `concurrency.Election` writes it (`fmt.Sprintf("%x", lease)`).
pub fn lease_hex(lease: i64) -> String {
    format!("{lease:x}")
}

/// Builds every key of the schema under one root prefix `P`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `P election/`: everything the watcher looks at for elections.
    pub fn elections_root(&self) -> String {
        format!("{}election/", self.prefix)
    }

    /// `P fence/`: every fence and refusal record.
    pub fn fences_root(&self) -> String {
        format!("{}fence/", self.prefix)
    }

    /// `P election/<name>`: the single-key layout's leader key.
    pub fn leader_key(&self, name: &ElectionName) -> String {
        format!("{}election/{}", self.prefix, name.as_str())
    }

    /// `P election/<name>/<lease-hex>`: a queue-layout candidate, as etcd's
    /// own `concurrency.Election` names it.
    pub fn queue_key(&self, name: &ElectionName, lease: i64) -> String {
        format!("{}/{}", self.leader_key(name), lease_hex(lease))
    }

    /// The key range holding both layouts of one election:
    /// `[P election/<name>, P election/<name>0)`. It contains the leader key,
    /// every `P election/<name>/…` key (`/` is 0x2F, `0` is 0x30) and a few
    /// siblings such as `<name>-x`, which [`classify`] filters out.
    pub fn election_range(&self, name: &ElectionName) -> (String, String) {
        let start = self.leader_key(name);
        let end = format!("{start}0");
        (start, end)
    }

    /// The keys of election `name` that sort in `[P election/<name>,
    /// P election/<name>/g)`: its single key and every queue candidate
    /// (a lower-case hex lease id sorts below `g`), with, at most, some
    /// keys of elections nested under it, which [`classify`] tells apart.
    /// Read (keys only) for each proper path prefix of a campaign's name:
    /// an election there would take the campaign's key for a candidate.
    pub fn own_keys_range(&self, name: &ElectionName) -> (String, String) {
        let start = self.leader_key(name);
        let end = format!("{start}/g");
        (start, end)
    }

    /// `P election/~floor`: tenure's token floor (see
    /// `election::floor`). Under no `Election` prefix of a valid name and
    /// in no `election_range` (`~` sorts after every name byte), inside the
    /// watch range.
    pub fn floor_key(&self) -> String {
        format!("{}election/{}", self.prefix, FLOOR_SEGMENT)
    }

    /// `P election/~end/<name>`: written (without a lease, overwritten: one
    /// key per election) with the deletion of a leader key when tenure ends a
    /// term, so watchers know why it ended. No etcd `Election` prefix covers
    /// it (`~` is never in a name), yet it sorts inside the watch range.
    pub fn end_marker_key(&self, name: &ElectionName) -> String {
        format!(
            "{}election/{}/{}",
            self.prefix,
            END_MARKER_SEGMENT,
            name.as_str()
        )
    }

    /// `P election/~acting/<name>`: the holder's acting record
    /// (`election::acting`), written without a lease and overwritten: one
    /// key per election. Like the end marker, under no `Election` prefix and
    /// inside the watch range.
    pub fn acting_key(&self, name: &ElectionName) -> String {
        format!(
            "{}election/{}/{}",
            self.prefix,
            ACTING_SEGMENT,
            name.as_str()
        )
    }

    /// `P election/<name>/~end`: where tenure before the move wrote the end
    /// marker. Still parsed as a marker; deleted by the next `end_term` of
    /// the election, since inside the candidates' prefix it blocks etcd's
    /// own `Election`.
    pub fn legacy_end_marker_key(&self, name: &ElectionName) -> String {
        format!("{}/{}", self.leader_key(name), END_MARKER_SEGMENT)
    }

    pub fn fence_key(&self, name: &ElectionName, resource: &str) -> String {
        format!("{}fence/{}/{}", self.prefix, name.as_str(), resource)
    }

    pub fn refusal_key(&self, name: &ElectionName, resource: &str) -> String {
        format!("{}/{}", self.fence_key(name, resource), REFUSAL_SEGMENT)
    }
}

/// Which layout a leader key uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Layout))]
#[serde(rename_all = "snake_case")]
pub enum KeyLayout {
    /// `P election/<name>`, created by tenure's txn.
    Single,
    /// `P election/<name>/<lease-hex>`, etcd's own `concurrency.Election`.
    Queue,
    /// A key rewritten in place by whoever holds it, its terms defined by
    /// its value (a Kubernetes Lease: the layout seam's `Claim`).
    Lease,
}

impl std::fmt::Display for KeyLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyLayout::Single => "single-key",
            KeyLayout::Queue => "queue",
            KeyLayout::Lease => "lease",
        })
    }
}

/// A key of the schema, parsed (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaKey {
    /// A leader key or queue candidate of election `name`.
    Leader {
        name: ElectionName,
        layout: KeyLayout,
    },
    /// `P election/~end/<name>`, or the legacy `P election/<name>/~end`.
    EndMarker { name: ElectionName },
    /// `P fence/<name>/<resource>`.
    Fence {
        name: ElectionName,
        resource: String,
    },
    /// `P fence/<name>/<resource>/~refusal`.
    Refusal {
        name: ElectionName,
        resource: String,
    },
    /// `P election/~floor`, tenure's token floor.
    Floor,
    /// `P election/~acting/<name>`, the holder's acting record.
    Acting { name: ElectionName },
}

/// Why a key under the prefix is not part of the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSchema {
    /// Outside `P election/` and `P fence/`: not tenure's business.
    Outside,
    /// Under them, but not valid UTF-8 or not a valid name.
    Invalid,
}

impl Keys {
    /// Parses any key (with its lease) into a schema key. Keys from etcd are
    /// untrusted: anything that is not a valid name is `Invalid`, never a panic.
    pub fn parse(&self, key: &[u8], lease: i64) -> Result<SchemaKey, NotSchema> {
        let prefix = self.prefix.as_bytes();
        let rest = key.strip_prefix(prefix).ok_or(NotSchema::Outside)?;
        if let Some(rest) = rest.strip_prefix(b"election/") {
            let rest = std::str::from_utf8(rest).map_err(|_| NotSchema::Invalid)?;
            if rest == FLOOR_SEGMENT {
                return Ok(SchemaKey::Floor);
            }
            let valid = |n: &str| ElectionName::new(n).map_err(|_| NotSchema::Invalid);
            if let Some(name) = rest
                .strip_prefix(END_MARKER_SEGMENT)
                .and_then(|r| r.strip_prefix('/'))
            {
                return Ok(SchemaKey::EndMarker { name: valid(name)? });
            }
            if let Some(name) = rest
                .strip_prefix(ACTING_SEGMENT)
                .and_then(|r| r.strip_prefix('/'))
            {
                return Ok(SchemaKey::Acting { name: valid(name)? });
            }
            if let Some(name) = rest
                .strip_suffix(END_MARKER_SEGMENT)
                .and_then(|r| r.strip_suffix('/'))
            {
                return Ok(SchemaKey::EndMarker { name: valid(name)? });
            }
            if let Some((parent, last)) = rest.rsplit_once('/') {
                if lease != 0 && last == lease_hex(lease) {
                    return Ok(SchemaKey::Leader {
                        name: valid(parent)?,
                        layout: KeyLayout::Queue,
                    });
                }
            }
            return Ok(SchemaKey::Leader {
                name: valid(rest)?,
                layout: KeyLayout::Single,
            });
        }
        if let Some(rest) = rest.strip_prefix(b"fence/") {
            let rest = std::str::from_utf8(rest).map_err(|_| NotSchema::Invalid)?;
            let (rest, refusal) = match rest
                .strip_suffix(REFUSAL_SEGMENT)
                .and_then(|r| r.strip_suffix('/'))
            {
                Some(r) => (r, true),
                None => (rest, false),
            };
            let (name, resource) = rest.rsplit_once('/').ok_or(NotSchema::Invalid)?;
            let name = ElectionName::new(name).map_err(|_| NotSchema::Invalid)?;
            validate_resource(resource).map_err(|_| NotSchema::Invalid)?;
            let resource = resource.to_owned();
            return Ok(if refusal {
                SchemaKey::Refusal { name, resource }
            } else {
                SchemaKey::Fence { name, resource }
            });
        }
        Err(NotSchema::Outside)
    }

    /// The one key range a watcher needs for both `P election/` and
    /// `P fence/`: `[P election/, P fence0)`. Keys in between that belong to
    /// neither parse as [`NotSchema::Outside`].
    pub fn watch_range(&self) -> (String, String) {
        (self.elections_root(), format!("{}fence0", self.prefix))
    }
}

/// What a key in an election's range is, for the election `name`.
pub fn classify(keys: &Keys, name: &ElectionName, key: &[u8], lease: i64) -> Option<KeyLayout> {
    let leader_key = keys.leader_key(name);
    let rest = key.strip_prefix(leader_key.as_bytes())?;
    if rest.is_empty() {
        return Some(KeyLayout::Single);
    }
    let last = rest.strip_prefix(b"/")?;
    if lease != 0 && last == lease_hex(lease).as_bytes() {
        Some(KeyLayout::Queue)
    } else {
        None
    }
}

/// Whether `key` (bound to `lease`) makes election `name` collide with
/// another in etcd's own `Election` layout, which takes *every* key under
/// `P election/<name>/` for a candidate of `name`:
///
/// - a key under `P election/<name>/` that is not one of `name`'s queue
///   candidates (nor the legacy end marker): the key of an election nested
///   under `name` (`<name>/primary`), a candidate etcd would queue;
/// - the key of an election whose name is a proper path prefix of `name`
///   (its single key, or one of its queue candidates): that election's
///   etcd clients would queue behind `name`'s key.
pub fn collides(keys: &Keys, name: &ElectionName, key: &[u8], lease: i64) -> bool {
    let own = keys.leader_key(name);
    if let Some(last) = key
        .strip_prefix(own.as_bytes())
        .and_then(|r| r.strip_prefix(b"/"))
    {
        let queued = lease != 0 && last == lease_hex(lease).as_bytes();
        return !queued && last != END_MARKER_SEGMENT.as_bytes();
    }
    name.ancestors()
        .any(|m| classify(keys, &m, key, lease).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "team/db-primary", "x.y_z-1", "a/b/c"] {
            assert!(ElectionName::new(ok).is_ok(), "{ok}");
        }
        let too_long = "a".repeat(129);
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            "../x",
            "a/./b",
            "a b",
            "a\0b",
            "<script>",
            too_long.as_str(),
        ] {
            assert!(ElectionName::new(bad).is_err(), "{bad:?}");
        }
        assert!(ElectionName::new(&"a".repeat(128)).is_ok());
    }

    #[test]
    fn resources_and_candidates() {
        assert!(validate_resource("orders-db").is_ok());
        for bad in ["", "a/b", "..", "~refusal", "a b"] {
            assert!(validate_resource(bad).is_err(), "{bad:?}");
        }
        assert!(validate_candidate("<script>alert(1)</script>").is_ok());
        assert!(validate_candidate("").is_err());
        assert!(validate_candidate("a\nb").is_err());
        assert!(validate_candidate(&"x".repeat(257)).is_err());
    }

    #[test]
    fn padding_orders_numerically() {
        assert!(pad_token(9) < pad_token(10));
        assert!(pad_token(451) < pad_token(1_000_000));
        assert_eq!(pad_token(453).len(), 20);
        assert_eq!(parse_padded_token(pad_token(453).as_bytes()), Some(453));
    }

    #[test]
    fn ancestors_and_collisions() {
        let n = ElectionName::new("a/b/c").unwrap();
        let up: Vec<String> = n.ancestors().map(|m| m.to_string()).collect();
        assert_eq!(up, ["a", "a/b"]);
        assert_eq!(ElectionName::new("a").unwrap().ancestors().count(), 0);
        let keys = Keys::new("p/");
        let orders = ElectionName::new("orders").unwrap();
        let primary = ElectionName::new("orders/primary").unwrap();
        // orders: a nested election's key collides; its own queue
        // candidates, the legacy marker and siblings do not.
        assert!(collides(&keys, &orders, b"p/election/orders/primary", 7));
        assert!(collides(&keys, &orders, b"p/election/orders/1f/x", 0x1f));
        assert!(!collides(&keys, &orders, b"p/election/orders/1f", 0x1f));
        assert!(!collides(&keys, &orders, b"p/election/orders/~end", 0));
        assert!(!collides(&keys, &orders, b"p/election/orders-x", 0));
        assert!(!collides(&keys, &orders, b"p/election/orders", 5));
        // orders/primary: the single key or a queue candidate of orders.
        assert!(collides(&keys, &primary, b"p/election/orders", 5));
        assert!(collides(&keys, &primary, b"p/election/orders/2a", 0x2a));
        assert!(!collides(&keys, &primary, b"p/election/orders/other", 0x2a));
        assert!(!collides(&keys, &primary, b"p/election/orders/primary", 9));
        // Every candidate of an ancestor lies in its own-keys range.
        let (s, e) = keys.own_keys_range(&orders);
        for k in [
            "p/election/orders",
            "p/election/orders/0",
            "p/election/orders/ffffffffffffffff",
        ] {
            assert!(s.as_str() <= k && k < e.as_str(), "{k}");
        }
        assert!(e.as_str() <= "p/election/orders/~end");
        // The floor is tenure's, in the watch range, in no election's.
        assert_eq!(keys.floor_key(), "p/election/~floor");
        assert_eq!(
            keys.parse(keys.floor_key().as_bytes(), 0),
            Ok(SchemaKey::Floor)
        );
        let (ws, we) = keys.watch_range();
        assert!(ws <= keys.floor_key() && keys.floor_key() < we);
        for n in ["a", "zzz", "Z", "9"] {
            let n = ElectionName::new(n).unwrap();
            let (s, e) = keys.election_range(&n);
            assert!(!(s <= keys.floor_key() && keys.floor_key() < e));
        }
    }

    #[test]
    fn classification() {
        let keys = Keys::new("p/");
        let name = ElectionName::new("db").unwrap();
        assert_eq!(
            classify(&keys, &name, b"p/election/db", 7),
            Some(KeyLayout::Single)
        );
        assert_eq!(
            classify(&keys, &name, b"p/election/db/1f", 31),
            Some(KeyLayout::Queue)
        );
        assert_eq!(classify(&keys, &name, b"p/election/db/1f", 32), None);
        assert_eq!(classify(&keys, &name, b"p/election/db-x", 0), None);
        assert_eq!(classify(&keys, &name, b"p/election/db/sub", 0), None);
        let (start, end) = keys.election_range(&name);
        assert!(start.as_str() < "p/election/db/ff" && "p/election/db/ff" < end.as_str());
        assert_eq!(keys.refusal_key(&name, "r"), "p/fence/db/r/~refusal");
    }

    #[test]
    fn the_acting_record_is_in_the_watch_range_and_no_elections() {
        let keys = Keys::new("p/");
        let name = ElectionName::new("team/db").unwrap();
        let acting = keys.acting_key(&name);
        assert_eq!(acting, "p/election/~acting/team/db");
        assert_eq!(
            keys.parse(acting.as_bytes(), 0),
            Ok(SchemaKey::Acting { name: name.clone() })
        );
        for n in ["team", "team/db", "a", "zzz"] {
            let n = ElectionName::new(n).unwrap();
            let (s, e) = keys.election_range(&n);
            assert!(!(s <= acting && acting < e), "{acting} in range of {n}");
        }
        let (ws, we) = keys.watch_range();
        assert!(ws <= acting && acting < we);
    }

    #[test]
    fn parsing_round_trips_every_key_kind() {
        let keys = Keys::new("p/");
        let name = ElectionName::new("team/db").unwrap();
        let leader = |layout| SchemaKey::Leader {
            name: name.clone(),
            layout,
        };
        assert_eq!(
            keys.parse(keys.leader_key(&name).as_bytes(), 5),
            Ok(leader(KeyLayout::Single))
        );
        let queue = format!("{}/{}", keys.leader_key(&name), lease_hex(0x1f));
        assert_eq!(
            keys.parse(queue.as_bytes(), 0x1f),
            Ok(leader(KeyLayout::Queue))
        );
        // Not the key's own lease: a single-key election named "team/db/1f".
        assert!(matches!(
            keys.parse(queue.as_bytes(), 7),
            Ok(SchemaKey::Leader {
                layout: KeyLayout::Single,
                ..
            })
        ));
        assert_eq!(keys.end_marker_key(&name), "p/election/~end/team/db");
        for marker in [
            keys.end_marker_key(&name),
            keys.legacy_end_marker_key(&name),
        ] {
            assert_eq!(
                keys.parse(marker.as_bytes(), 5),
                Ok(SchemaKey::EndMarker { name: name.clone() })
            );
        }
        // The marker is in no election's own range (etcd's `Election` of
        // any valid name never sees it), but in the watch range.
        let marker = keys.end_marker_key(&name);
        for n in ["team", "team/db", "a", "zzz", "~end"] {
            let prefix = format!("p/election/{n}/");
            if n != "~end" {
                assert!(!marker.starts_with(&prefix), "{marker} under {prefix}");
            }
            if let Ok(n) = ElectionName::new(n) {
                let (s, e) = keys.election_range(&n);
                assert!(!(s <= marker && marker < e), "{marker} in range of {n}");
            }
        }
        let (ws, we) = keys.watch_range();
        assert!(ws <= marker && marker < we);
        assert_eq!(
            keys.parse(keys.fence_key(&name, "orders").as_bytes(), 0),
            Ok(SchemaKey::Fence {
                name: name.clone(),
                resource: "orders".into()
            })
        );
        assert_eq!(
            keys.parse(keys.refusal_key(&name, "orders").as_bytes(), 0),
            Ok(SchemaKey::Refusal {
                name: name.clone(),
                resource: "orders".into()
            })
        );
        assert_eq!(keys.parse(b"other/election/x", 0), Err(NotSchema::Outside));
        assert_eq!(keys.parse(b"p/elephant", 0), Err(NotSchema::Outside));
        assert_eq!(
            keys.parse(b"p/election/\xff\xfe", 0),
            Err(NotSchema::Invalid)
        );
        assert_eq!(keys.parse(b"p/election/a b", 0), Err(NotSchema::Invalid));
        assert_eq!(keys.parse(b"p/fence/nodash", 0), Err(NotSchema::Invalid));
        let (start, end) = keys.watch_range();
        for k in [keys.leader_key(&name), keys.refusal_key(&name, "r")] {
            assert!(start <= k && k < end, "{k} outside the watch range");
        }
    }
}
