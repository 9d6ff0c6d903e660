//! Whether what etcd holds contradicts what history recorded: the sign of
//! an etcd that started over under the same cluster id (a restore from a
//! snapshot with the same member name and cluster token) whose new
//! timeline already passed the revision history stored, so neither the
//! cluster id nor a revision behind the stored one tells.
//!
//! In one timeline, a key with CreateRevision `c` that still exists at a
//! later revision existed at every revision from `c` on; the leader of an
//! election is its key with the lowest CreateRevision. So, for the terms
//! history holds as open at its stored revision `R`:
//!
//! - read at `R` (a resume): every open term's key is there with its token
//!   and its lease, and every election with keys there has an open term
//!   whose token is the lowest of them;
//! - read later (a gap: `R` compacted, or marked compacted by a restore
//!   with `--mark-compacted`): a leader whose token is at or below `R`
//!   existed at `R`, so its election had an open term there, whose token
//!   is not above it (and if it is that term, with the same lease).
//!
//! A key whose terms its value defines (a Kubernetes Lease, layout
//! `lease`) is read without its value here: its term's token is the
//! revision of a write between its CreateRevision and its ModRevision, so a
//! resume finds history's open term there when the token lies between
//! them; it is not a leader by its CreateRevision, so the second check
//! passes it by (a Lease may exist with nobody holding it).
//!
//! A key whose rewrites change hands (the `key` layout) is read the same
//! way: its term's token is the revision of the write that gave it to its
//! holder, between its CreateRevision and its ModRevision, with the lease
//! that write put it under.
//!
//! The lease tells apart two timelines that happened to give the same
//! election the same token (the same operations replayed after the
//! restore): a new lease has another id. The holder is not compared (a
//! proclaim changes it within a term).
//!
//! Anything else is another timeline. Not read as one (a false reset is a
//! wrong answer too): an election history never tracked because more than
//! `--max-elections` held keys is skipped when etcd holds more than that
//! many. Not caught: a new timeline that, for every election, has the same
//! leaders with the same tokens as the old one at `R` (for instance both
//! empty), and a history recorded under another `--prefix` (everything
//! differs: read as a reset).

use std::collections::HashMap;

use super::{Kv, Resume};
use crate::election::KeyLayout;
use crate::events::Witness;
use crate::layout::{Role, Source, Sources};

/// Why `kvs`, every key of the watch range read at `revision` (the resume
/// revision itself, or later), contradicts `resume`; `None` when it does
/// not.
pub(super) fn contradiction(
    sources: &Sources,
    resume: &Resume,
    kvs: &[Kv],
    revision: i64,
    max_elections: usize,
) -> Option<String> {
    let stored = resume.revision;
    let exact = revision == stored;
    let keys = keys_of(sources, kvs);
    if exact {
        if let Some(missing) = open_term_missing(sources, resume, &keys) {
            return Some(missing);
        }
    }
    let Keys {
        elections, blocked, ..
    } = keys;
    let open: HashMap<&str, (i64, i64)> = resume
        .open_terms
        .iter()
        .map(|t| (t.election.as_str(), (t.token, t.lease_id)))
        .collect();
    let mut names: Vec<&String> = elections.keys().collect();
    names.sort();
    for name in names {
        let Some((leader, lease)) = elections.get(name).and_then(|c| c.iter().min().copied())
        else {
            continue;
        };
        // A lease-less key older than every candidate blocks the election
        // (etcd's `Campaign` waits for it): no term is open there.
        let blocker = blocked.get(name).and_then(|b| b.iter().min());
        if leader > stored || blocker.is_some_and(|&b| b < leader) {
            continue;
        }
        match open.get(name.as_str()) {
            Some(&(token, _)) if leader < token => {
                return Some(format!(
                    "etcd's leader of {name} at revision {revision} has token {leader}, older \
                     than the term history holds open at {stored} (token {token})"
                ))
            }
            Some(&(token, open_lease)) if leader == token && lease != open_lease => {
                return Some(format!(
                    "etcd's leader of {name} at revision {revision} has token {token} with \
                     lease {lease:x}; the term history holds open has lease {open_lease:x}"
                ))
            }
            Some(_) => {}
            None if elections.len() <= max_elections => {
                return Some(format!(
                    "{name} has a leader with token {leader} at revision {revision}, which would \
                     have led at {stored}, but history holds no open term of it there"
                ))
            }
            None => {}
        }
    }
    None
}

/// What `keys_of` reads: each election's candidate keys (CreateRevision,
/// lease); apart, each key whose value defines its terms or whose rewrites
/// change hands: the revisions its term's token may be
/// (CreateRevision..=ModRevision), and its lease; and the
/// CreateRevisions of the lease-less keys among an election's candidates
/// where candidates hold leases (the lowest of them, older than every
/// candidate, blocks it: no leader, no open term).
/// The first of history's open terms (of a source still read) that is not
/// in etcd at the resume revision itself.
fn open_term_missing(sources: &Sources, resume: &Resume, keys: &Keys) -> Option<String> {
    // Terms of sources no longer read are not looked for (the load ends
    // them `unknown`, not seen).
    let ours = resume
        .open_terms
        .iter()
        .filter(|t| sources.may_hold(&t.election, t.layout));
    for t in ours {
        // A candidate key a foreign put stripped of its lease is still the
        // term's key (the watcher keeps that term).
        let there = keys
            .elections
            .get(&t.election)
            .is_some_and(|c| c.contains(&(t.token, t.lease_id)))
            || keys
                .blocked
                .get(&t.election)
                .is_some_and(|b| b.contains(&t.token))
            || keys
                .valued
                .get(&t.election)
                .is_some_and(|(c, m, l)| (*c..=*m).contains(&t.token) && t.lease_id == *l);
        if !there {
            return Some(format!(
                "history's open term of {} (token {}, lease {:x}) is not in etcd at revision {}",
                t.election, t.token, t.lease_id, resume.revision
            ));
        }
    }
    None
}

struct Keys {
    elections: HashMap<String, Vec<(i64, i64)>>,
    valued: HashMap<String, (i64, i64, i64)>,
    blocked: HashMap<String, Vec<i64>>,
}

fn keys_of(sources: &Sources, kvs: &[Kv]) -> Keys {
    let mut keys = Keys {
        elections: HashMap::new(),
        valued: HashMap::new(),
        blocked: HashMap::new(),
    };
    for kv in kvs {
        let (source, role) = sources.classify(&kv.key, kv.lease);
        if let Some(election) = source.and_then(|s| s.lease_less(&role, kv.lease)) {
            let created = keys.blocked.entry(election.to_owned()).or_default();
            created.push(kv.create_revision);
            continue;
        }
        match role {
            Role::Candidate { election, kind } if written(source, kind) => {
                keys.valued
                    .insert(election, (kv.create_revision, kv.mod_revision, kv.lease));
            }
            Role::Candidate { election, .. } => keys
                .elections
                .entry(election)
                .or_default()
                .push((kv.create_revision, kv.lease)),
            _ => {}
        }
    }
    keys
}

/// Why `created`, every key of the watch ranges that etcd holds at
/// revision `w.token` written at `w.token`, contradicts the term history
/// recorded there: in one timeline that revision created the term's key,
/// with its lease, so it is among them. `None` when it is, and when that
/// revision wrote no candidate of any election these sources read (not
/// known: the sources or the prefix may have changed since, and a false
/// reset raises the floor and refuses campaigns; a restore is then caught
/// only where the new timeline's revision wrote another candidate).
pub(super) fn witness_missing(sources: &Sources, w: &Witness, created: &[Kv]) -> Option<String> {
    let candidates: Vec<(String, bool, &Kv)> = created
        .iter()
        .filter_map(|kv| match sources.classify(&kv.key, kv.lease) {
            (source, Role::Candidate { election, kind }) => {
                Some((election, written(source, kind), kv))
            }
            _ => None,
        })
        .collect();
    // A key whose value defines its terms, or whose rewrites change hands,
    // was written, not created, at its term's token.
    let there = candidates.iter().any(|(election, valued, kv)| {
        (kv.create_revision == w.token || *valued && kv.mod_revision == w.token)
            && kv.lease == w.lease_id
            && *election == w.election
    });
    (!there && !candidates.is_empty()).then(|| {
        format!(
            "history recorded a term of {} with token {} (lease {:x}); etcd's revision {} created \
             no such key",
            w.election, w.token, w.lease_id, w.token
        )
    })
}

/// Whether a candidate's term begins at a write of its key, not at its
/// creation: a key whose value defines its terms (a Kubernetes Lease), or
/// whose rewrites change hands (`Layout::rewrite_changes_hands`).
fn written(source: Option<&Source>, kind: KeyLayout) -> bool {
    kind == KeyLayout::Lease || source.is_some_and(|s| s.layout().rewrite_changes_hands())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::KeyLayout;
    use crate::events::OpenTerm;

    fn kv(key: &str, create: i64) -> Kv {
        Kv {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
            create_revision: create,
            mod_revision: create,
            lease: 0,
        }
    }

    fn resume(revision: i64, open: &[(&str, i64)]) -> Resume {
        Resume {
            revision,
            open_terms: open
                .iter()
                .map(|(e, t)| OpenTerm {
                    election: (*e).into(),
                    token: *t,
                    holder: "h".into(),
                    lease_id: 0,
                    layout: KeyLayout::Single,
                    started_revision: *t,
                    started_at_ms: 0,
                })
                .collect(),
            cluster_id: Some(1),
            live_at_ms: None,
            witnesses: Vec::new(),
        }
    }

    #[test]
    fn one_timeline_agrees_with_itself() {
        let k = Sources::tenure("");
        let r = resume(60, &[("x", 55), ("y", 10)]);
        let at_r = [
            kv("election/x", 55),
            kv("election/y", 10),
            kv("fence/x/db", 56),
            kv("election/~floor", 3),
        ];
        assert_eq!(contradiction(&k, &r, &at_r, 60, 10), None);
        // Later (a gap): x ended, a waiter of y leads, z is new.
        let later = [kv("election/y/1f", 12), kv("election/z", 70)];
        let later: Vec<Kv> = later
            .into_iter()
            .map(|mut k| {
                if k.key.ends_with(b"1f") {
                    k.lease = 0x1f;
                }
                k
            })
            .collect();
        assert_eq!(contradiction(&k, &r, &later, 80, 10), None);
    }

    /// A lease-less key under a `concurrency` prefix is no candidate: alone
    /// (a config key) it makes no election, lowest it blocks one (etcd's
    /// `Campaign` waits for it), so history holds no open term there; and a
    /// candidate a foreign put stripped of its lease is still its term's key.
    #[test]
    fn lease_less_keys_under_a_concurrency_prefix_expect_no_term() {
        let k = Sources::new(vec![Source::parse("concurrency:/app/").expect("source")]);
        let leased = |key: &str, create: i64, lease: i64| Kv {
            lease,
            ..kv(key, create)
        };
        let none = resume(60, &[]);
        // A config key alone; a blocker before two candidates.
        let at_r = [
            kv("/app/cfg/x", 3),
            kv("/app/job/cfg", 4),
            leased("/app/job/a1", 5, 0xa1),
            leased("/app/job/b2", 6, 0xb2),
        ];
        assert_eq!(contradiction(&k, &none, &at_r, 60, 10), None);
        assert_eq!(contradiction(&k, &none, &at_r, 80, 10), None);
        // A lease-less key after the leader blocks nothing: its term is due.
        let late = [leased("/app/job/a1", 5, 0xa1), kv("/app/job/cfg", 7)];
        assert!(contradiction(&k, &none, &late, 60, 10).is_some());
        // The leader's key stripped of its lease by a foreign put.
        let mut open = resume(60, &[("/app/job", 5)]);
        open.open_terms[0].lease_id = 0xa1;
        let stripped = [Kv {
            mod_revision: 9,
            ..kv("/app/job/a1", 5)
        }];
        assert_eq!(contradiction(&k, &open, &stripped, 60, 10), None);
    }

    #[test]
    fn another_timeline_contradicts_it() {
        let k = Sources::tenure("");
        let r = resume(60, &[("x", 55)]);
        // The open term is not there.
        assert!(contradiction(&k, &r, &[], 60, 10).is_some());
        // Another leader, with a token history gave someone else.
        assert!(contradiction(&k, &r, &[kv("election/x", 25)], 60, 10).is_some());
        // The same token, another lease: the same operations replayed.
        let mut same = kv("election/x", 55);
        same.lease = 9;
        assert!(contradiction(&k, &r, std::slice::from_ref(&same), 60, 10).is_some());
        assert!(contradiction(&k, &r, &[same], 70, 10).is_some());
        // A leader history never had.
        let r = resume(60, &[]);
        assert!(contradiction(&k, &r, &[kv("election/x", 25)], 60, 10).is_some());
        // After a restore with --bump-revision: a key of the snapshot.
        let r = resume(60, &[("x", 55)]);
        assert!(contradiction(&k, &r, &[kv("election/x", 22)], 1_000_000_023, 10).is_some());
        // More elections than tracked: one history never had may be one
        // it could not track.
        let r = resume(60, &[]);
        let many = [kv("election/a", 5), kv("election/b", 6)];
        assert!(contradiction(&k, &r, &many, 60, 1).is_none());
    }

    #[test]
    fn a_witness_is_its_key_created_at_its_token_with_its_lease() {
        let k = Sources::tenure("");
        let w = Witness {
            election: "x".into(),
            token: 30,
            lease_id: 7,
        };
        let mut ours = kv("election/x", 30);
        ours.lease = 7;
        assert_eq!(witness_missing(&k, &w, std::slice::from_ref(&ours)), None);
        // Nothing written there that these sources read: not known (the
        // sources or the prefix may have changed), never a reset.
        assert_eq!(witness_missing(&k, &w, &[]), None);
        assert_eq!(witness_missing(&k, &w, &[kv("other/x", 30)]), None);
        // Another lease, another election: another timeline.
        let mut other_lease = ours.clone();
        other_lease.lease = 8;
        assert!(witness_missing(&k, &w, &[other_lease]).is_some());
        let mut other_election = kv("election/y", 30);
        other_election.lease = 7;
        assert!(witness_missing(&k, &w, &[other_election]).is_some());
        assert!(k.watches_name("x") && !k.watches_name("/app/x"));
    }

    /// A Lease's term: its token is a write between the key's creation
    /// and its last write, never its CreateRevision but for the first.
    #[test]
    fn a_lease_s_term_is_there_between_its_creation_and_its_last_write() {
        let k = Sources::new(vec![
            crate::layout::Source::parse("kubernetes:/registry/").expect("kubernetes")
        ]);
        let name = "ns/x";
        let mut lease = kv("/registry/leases/ns/x", 10);
        lease.mod_revision = 58;
        let resume = |revision, open: &[(&str, i64)]| {
            let mut r = resume(revision, open);
            for t in &mut r.open_terms {
                t.layout = KeyLayout::Lease;
            }
            r
        };
        let r = resume(60, &[(name, 55)]);
        assert_eq!(
            contradiction(&k, &r, std::slice::from_ref(&lease), 60, 10),
            None
        );
        // A Lease nobody holds, and no open term: nothing to say.
        assert_eq!(
            contradiction(&k, &resume(60, &[]), std::slice::from_ref(&lease), 60, 10),
            None
        );
        // The open term's token after the key's last write: not this timeline.
        let r = resume(60, &[(name, 59)]);
        assert!(contradiction(&k, &r, std::slice::from_ref(&lease), 60, 10).is_some());
        // Its witness: the key written (not created) at the token.
        let w = Witness {
            election: name.into(),
            token: 58,
            lease_id: 0,
        };
        assert_eq!(witness_missing(&k, &w, std::slice::from_ref(&lease)), None);
        lease.mod_revision = 57;
        assert!(witness_missing(&k, &w, &[lease]).is_some());
    }

    /// A term of a source no longer read (tenure's own writer election,
    /// recorded while serve also read tenure's layout; a Lease under its
    /// old path name) is not looked for in the sources read now: no reset.
    #[test]
    fn open_terms_of_sources_no_longer_read_are_not_contradicted() {
        let leases = crate::layout::Source::parse("kubernetes:/registry/").expect("kubernetes");
        let k = Sources::for_serve("", vec![leases], false).expect("Leases alone");
        let mut r = resume(60, &[("tenure/history-writer", 40), ("/registry/ns/x", 30)]);
        r.open_terms[1].layout = KeyLayout::Lease;
        assert_eq!(contradiction(&k, &r, &[], 60, 10), None);
        // The same terms, with tenure's layout read: contradicted.
        let own = Sources::tenure("");
        assert!(contradiction(&own, &r, &[], 60, 10).is_some());
    }
}
