//! Patroni's PostgreSQL leader (`patroni[etcd3]`): under its namespace
//! (default `/service/`), one election per scope, named by the scope's path
//! (`/service/pg`). The leader is the `leader` key: its value is the member
//! name, its CreateRevision the token. What Patroni writes, key by key, is
//! measured in docs/patroni-facts.md (tests/patroni.rs asserts it):
//!
//! - a term is one create revision of `leader`: every change of leader
//!   deletes the key and creates it anew; a Patroni restarted within the TTL
//!   puts it again on its new lease, the same term (the same CreateRevision);
//! - a crash failover deletes `leader` with the old leader's member key when
//!   the lease expires (`expired`, asked of etcd as for any key);
//! - a switchover deletes `leader` while the lease lives, with `failover`
//!   = `{"leader":OLD,"member":NEW}` standing since before (`switchover`:
//!   the standing request, [`Layout::read_standing`]); a graceful stop
//!   deletes it with no request standing (`deleted`); `history` reads the
//!   same after a switchover and a failover, so it is not taken as a hint.
//!   A crash while a switchover stands is still `expired`: the standing
//!   request only renames a deletion made while the lease lived.
//!
//! A Citus cluster (`SCOPE/GROUP/leader`, GROUP a number) is one election
//! per group (`/service/SCOPE/GROUP`).
//!
//! The members (`members/NAME`: role, state, timeline, WAL position) are
//! not terms: [`members_prefix`] and [`Member::parse`] read them for the
//! election page, live.

use super::path::{candidate, watched_path, Prefix};
use super::{Layout, Role, Standing};
use crate::election::KeyLayout;
use crate::events::EndCause;

/// The name of this layout in `--source patroni:NAMESPACE`.
pub const NAME: &str = "patroni";

/// Patroni's namespace when `--source patroni:` gives none.
pub const DEFAULT_NAMESPACE: &str = "/service/";

#[derive(Debug, Clone)]
pub struct Patroni {
    namespace: Prefix,
}

impl Patroni {
    /// Patroni's `namespace` (empty: [`DEFAULT_NAMESPACE`]); Patroni joins
    /// it to the scope with one `/`, so one is added where it has none.
    pub fn new(namespace: &str) -> Option<Self> {
        let namespace = match namespace {
            "" => DEFAULT_NAMESPACE.to_owned(),
            n if n.ends_with('/') => n.to_owned(),
            n => format!("{n}/"),
        };
        Prefix::new(&namespace).map(|namespace| Self { namespace })
    }

    /// The namespace as read (`/service/` when none was given).
    pub fn namespace(&self) -> &[u8] {
        self.namespace.bytes()
    }

    /// `SCOPE/members/NAME` (one level of scope): a member of the scope.
    fn member(&self, key: &[u8], rest: &[u8]) -> Option<Role> {
        const MEMBERS: &[u8] = b"/members/";
        let at = rest.windows(MEMBERS.len()).position(|w| w == MEMBERS)?;
        let (scope, name) = (&rest[..at], &rest[at + MEMBERS.len()..]);
        if scope.is_empty() || scope.contains(&b'/') || name.is_empty() || name.contains(&b'/') {
            return Some(Role::Ignored);
        }
        let election = watched_path(&key[..self.namespace().len() + scope.len()]);
        let member = std::str::from_utf8(name).ok().filter(|n| n.len() <= 128);
        Some(match (election, member) {
            (Some(election), Some(member)) => Role::Member {
                election,
                member: member.to_owned(),
            },
            _ => Role::Invalid,
        })
    }
}

impl Layout for Patroni {
    fn name(&self) -> &'static str {
        NAME
    }

    fn ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.namespace.ranges()
    }

    fn classify(&self, key: &[u8], _lease: i64) -> Role {
        let Some(rest) = key.strip_prefix(self.namespace()) else {
            return Role::Ignored;
        };
        // `SCOPE/leader`, one level below the namespace; the scope's other
        // keys (members, config, history, failover, status…) are not terms.
        if let Some(role) = self.member(key, rest) {
            return role;
        }
        let (scope, standing) = match (
            rest.strip_suffix(b"/leader"),
            rest.strip_suffix(b"/failover"),
        ) {
            (Some(scope), _) => (scope, false),
            (None, Some(scope)) => (scope, true),
            (None, None) => return Role::Ignored,
        };
        // A Citus cluster's groups: `SCOPE/GROUP/leader`, GROUP a number.
        let citus = |scope: &[u8]| {
            matches!(
                scope.split(|b| *b == b'/').collect::<Vec<_>>().as_slice(),
                [s, g] if !s.is_empty() && !g.is_empty() && g.iter().all(u8::is_ascii_digit)
            )
        };
        if scope.is_empty() || (scope.contains(&b'/') && !citus(scope)) {
            return Role::Ignored;
        }
        let path = &key[..self.namespace().len() + scope.len()];
        if standing {
            return watched_path(path)
                .map_or(Role::Invalid, |election| Role::Standing { election });
        }
        candidate(path, KeyLayout::Single)
    }

    fn read_member(&self, value: &[u8]) -> Option<bool> {
        Member::parse("", value).map(|m| m.says_primary())
    }

    /// `failover` = `{"leader":"A","member":"B"}` (patronictl switchover,
    /// scheduled or not): A's term, if A deletes its key while its lease
    /// lives, ended by the switchover. `{}` (cleared by the new leader), a
    /// failover request without a leader, or anything else: nothing.
    fn read_standing(&self, value: &[u8]) -> Option<Standing> {
        let v: serde_json::Value = serde_json::from_slice(value).ok()?;
        let holder = v.get("leader")?.as_str()?;
        (!holder.is_empty()).then(|| Standing {
            holder: holder.to_owned(),
            cause: EndCause::Switchover,
        })
    }
}

/// Where the members of the election `path` (`/service/SCOPE`) are.
pub fn members_prefix(path: &str) -> String {
    format!("{path}/members/")
}

/// One member key as Patroni writes it (docs/patroni-facts.md): every
/// field but the name may be missing (`timeline` is, in some puts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub role: Option<String>,
    pub state: Option<String>,
    pub timeline: Option<i64>,
    /// `xlog_location`: the WAL position it reported (running only).
    pub wal: Option<u64>,
}

impl Member {
    /// The member `name` from its key's JSON; `None` when not JSON.
    pub fn parse(name: &str, value: &[u8]) -> Option<Member> {
        let v: serde_json::Value = serde_json::from_slice(value).ok()?;
        let text = |f: &str| {
            v.get(f)
                .and_then(|x| x.as_str())
                .map(|s| s.chars().take(64).collect())
        };
        Some(Member {
            name: name.chars().take(128).collect(),
            role: text("role"),
            state: text("state"),
            timeline: v.get("timeline").and_then(serde_json::Value::as_i64),
            wal: v.get("xlog_location").and_then(serde_json::Value::as_u64),
        })
    }

    /// Whether it says it is a primary (`primary`, or Patroni's older
    /// word `master`).
    pub fn says_primary(&self) -> bool {
        matches!(self.role.as_deref(), Some("primary" | "master"))
    }

    /// How far behind `leader`'s WAL position it reported, in bytes (what
    /// `patronictl list` calls the lag); `None` when either did not say.
    pub fn lag_behind(&self, leader: &Member) -> Option<u64> {
        Some(leader.wal?.saturating_sub(self.wal?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_key_of_each_scope_is_its_election() {
        let p = Patroni::new("").expect("the default namespace");
        let cand = |e: &str| Role::Candidate {
            election: e.into(),
            kind: KeyLayout::Single,
        };
        assert_eq!(p.classify(b"/service/pg/leader", 7), cand("/service/pg"));
        assert_eq!(
            p.classify(b"/service/pg/members/m1", 7),
            Role::Member {
                election: "/service/pg".into(),
                member: "m1".into()
            }
        );
        assert_eq!(p.read_member(br#"{"role":"primary"}"#), Some(true));
        assert_eq!(p.read_member(br#"{"role":"replica"}"#), Some(false));
        assert_eq!(
            p.classify(b"/service/pg/failover", 0),
            Role::Standing {
                election: "/service/pg".into()
            }
        );
        assert_eq!(p.classify(b"/service/a/b/leader", 7), Role::Ignored);
        // Citus: one election per group.
        assert_eq!(p.classify(b"/service/c/0/leader", 7), cand("/service/c/0"));
        assert_eq!(p.classify(b"/service/c/0/x/leader", 7), Role::Ignored);
        assert_eq!(p.classify(b"/service//leader", 7), Role::Ignored);
        assert_eq!(p.classify(b"/service/p\x01/leader", 7), Role::Invalid);
        assert_eq!(p.classify(b"/other/pg/leader", 7), Role::Ignored);
        let q = Patroni::new("/db").expect("a namespace");
        assert_eq!(q.namespace(), b"/db/");
        assert_eq!(q.classify(b"/db/main/leader", 7), cand("/db/main"));
    }

    #[test]
    fn members_are_read_field_by_field() {
        let leader = Member::parse(
            "m0",
            br#"{"role":"primary","state":"running","timeline":2,"xlog_location":1000}"#,
        )
        .expect("json");
        let replica = Member::parse(
            "m1",
            br#"{"role":"replica","state":"running","xlog_location":400}"#,
        )
        .expect("json");
        assert!(leader.says_primary() && !replica.says_primary());
        assert_eq!(replica.timeline, None, "missing from some puts");
        assert_eq!(replica.lag_behind(&leader), Some(600));
        let starting =
            Member::parse("m2", br#"{"role":"replica","state":"starting"}"#).expect("json");
        assert_eq!(starting.lag_behind(&leader), None);
        assert_eq!(Member::parse("m3", b"not json"), None);
    }

    #[test]
    fn a_standing_switchover_names_the_leader_it_ends() {
        let p = Patroni::new("").expect("the default namespace");
        assert_eq!(
            p.read_standing(br#"{"leader":"m0","member":"m1"}"#),
            Some(Standing {
                holder: "m0".into(),
                cause: EndCause::Switchover
            })
        );
        assert_eq!(p.read_standing(b"{}"), None, "cleared");
        assert_eq!(
            p.read_standing(br#"{"member":"m1"}"#),
            None,
            "a failover request"
        );
        assert_eq!(p.read_standing(b"not json"), None);
    }
}
