//! Nested names that both hold keys: a collision, reported once.

use super::*;
use crate::events::EventKind;

#[test]
fn nested_names_that_both_hold_keys_are_a_collision_reported_once() {
    let mut s = State::new(Sources::tenure(""), 10);
    let collisions = |p: &[Pending]| -> Vec<(String, String)> {
        p.iter()
            .filter_map(|p| match &p.event.kind {
                EventKind::NameCollision { other } => {
                    Some((p.event.election.clone(), other.clone()))
                }
                _ => None,
            })
            .collect()
    };
    let (p, _) = s.apply(5, &[put("election/orders/primary", "p", 5, 5, 1)], 1000);
    assert!(collisions(&p).is_empty());
    // etcdctl elect election/orders: a queue key of orders.
    let (p, _) = s.apply(6, &[put("election/orders/7", "e", 6, 6, 7)], 1100);
    assert_eq!(
        collisions(&p),
        [
            ("orders".to_string(), "orders/primary".to_string()),
            ("orders/primary".to_string(), "orders".to_string())
        ]
    );
    // A sibling name and a term change are no new collision.
    let (p, _) = s.apply(7, &[put("election/orders-x", "x", 7, 7, 1)], 1200);
    assert!(collisions(&p).is_empty());
    let (p, _) = s.apply(8, &[del("election/orders/primary", 8, 1)], 1300);
    assert!(collisions(&p).is_empty());
    // Back again: a new collision.
    let (p, _) = s.apply(9, &[put("election/orders/primary", "q", 9, 9, 1)], 1400);
    assert_eq!(collisions(&p).len(), 2);
    // A reload reports only what was not a collision before it.
    let kv = |k: &str, c: i64, lease: i64| Kv {
        key: k.as_bytes().to_vec(),
        value: b"v".to_vec(),
        create_revision: c,
        mod_revision: c,
        lease,
    };
    let (ev, _) = s.load(
        20,
        &[
            kv("election/orders/7", 6, 7),
            kv("election/orders/primary", 9, 1),
            kv("election/a/b/c", 12, 1),
            kv("election/a", 11, 1),
        ],
        &[],
        2000,
    );
    let fresh: Vec<(String, String)> = ev
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::NameCollision { other } => Some((e.election.clone(), other.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        fresh,
        [
            ("a".to_string(), "a/b/c".to_string()),
            ("a/b/c".to_string(), "a".to_string())
        ]
    );
}
