//! Patroni's members beside its leader on the election page: read live
//! from etcd (`<scope>/members/`), never recorded. A member that says it is
//! a primary while another holds the leader key is marked: two primaries,
//! as far as etcd shows them. etcd does not show an old primary whose
//! Patroni died: its member key goes with its lease, while its PostgreSQL
//! may still run as a primary (docs/patroni-facts.md); the page says so.

use etcd_client::GetOptions;

use crate::layout::path::WatchedName;
use crate::layout::patroni::{self, Member};
use crate::web::AppState;

/// At most this many members are read.
const MAX_MEMBERS: i64 = 100;

pub(super) struct MembersView {
    pub rows: Vec<MemberRow>,
    pub note: String,
}

pub(super) struct MemberRow {
    pub name: String,
    pub role: String,
    pub state: String,
    pub timeline: String,
    pub lag: String,
    /// Says it is a primary, and does not hold the leader key.
    pub second_primary: bool,
    pub leads: bool,
}

/// The members of `name` if it is a Patroni scope of one of serve's
/// sources; `None` otherwise. `leader`: who holds the leader key; `wait`:
/// how long etcd may take.
pub(super) async fn patroni_members(
    s: &AppState,
    target: &crate::web::Target,
    leader: Option<&str>,
    wait: std::time::Duration,
) -> Option<MembersView> {
    let WatchedName::Path(path) = &target.name else {
        return None;
    };
    let source = s
        .sources_of(target)?
        .iter()
        .find(|src| src.layout().name() == patroni::NAME && src.may_name(path))?;
    let prefix = patroni::members_prefix(source.key_path(path));
    let opts = GetOptions::new().with_prefix().with_limit(MAX_MEMBERS);
    let Some(client) = s.client_of(target) else {
        return Some(unread(
            "etcd has not answered since serve started".to_owned(),
        ));
    };
    let read = tokio::time::timeout(wait, client.etcd().get(prefix.clone(), Some(opts))).await;
    let resp = match read {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Some(unread(format!("etcd: {e}"))),
        Err(_) => return Some(unread(format!("no answer within {} ms", wait.as_millis()))),
    };
    let members: Vec<Member> = resp
        .kvs()
        .iter()
        .filter_map(|kv| {
            let name = String::from_utf8_lossy(kv.key().get(prefix.len()..)?);
            Member::parse(&name, kv.value())
        })
        .collect();
    let holder = leader.and_then(|l| members.iter().find(|m| m.name == l));
    let rows = members
        .iter()
        .map(|m| {
            let leads = leader == Some(m.name.as_str());
            MemberRow {
                name: m.name.clone(),
                role: m.role.clone().unwrap_or_else(|| "—".into()),
                state: m.state.clone().unwrap_or_else(|| "—".into()),
                timeline: m.timeline.map_or_else(|| "—".into(), |t| t.to_string()),
                lag: match holder {
                    Some(h) if !leads => m
                        .lag_behind(h)
                        .map_or_else(|| "—".into(), |b| format!("{b} B")),
                    _ => "—".into(),
                },
                second_primary: m.says_primary() && !leads,
                leads,
            }
        })
        .collect();
    Some(MembersView {
        rows,
        note: "As etcd holds them now, read live (each Patroni rewrites its own key, up to a \
               loop behind); not recorded. A member whose Patroni died leaves this list when \
               its lease expires, even if its PostgreSQL still runs as a primary: etcd does \
               not show that."
            .to_owned(),
    })
}

fn unread(why: String) -> MembersView {
    MembersView {
        rows: Vec::new(),
        note: format!("Members could not be read: {why}."),
    }
}
