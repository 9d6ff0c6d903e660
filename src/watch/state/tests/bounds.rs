//! Hostile input is bounded: elections, keys and values past the caps.

use super::*;
use crate::election::keys::MAX_CANDIDATE_LEN;
use crate::events::EventKind;

#[test]
fn hostile_input_is_bounded() {
    let mut s = State::new(Sources::tenure(""), 2);
    let huge = "<script>".repeat(100_000);
    let (p, _) = s.apply(3, &[put("election/a", &huge, 3, 3, 1)], 0);
    match &p[0].event.kind {
        EventKind::TermStarted { holder, .. } => assert!(holder.len() <= MAX_CANDIDATE_LEN + 3),
        other => panic!("{other:?}"),
    }
    let (_, st) = s.apply(
        4,
        &[
            Change::Put(Kv {
                key: b"election/\xff".to_vec(),
                value: vec![],
                create_revision: 4,
                mod_revision: 4,
                lease: 0,
            }),
            put("election/b", "x", 4, 4, 0),
            put("election/c", "x", 4, 4, 0),
        ],
        0,
    );
    assert_eq!(
        st,
        [
            WatchStatus::IgnoredKey,
            WatchStatus::Overflow {
                election: "c".into()
            }
        ]
    );
    assert_eq!(s.len(), 2);
}
