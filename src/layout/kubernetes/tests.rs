//! Decoding real values: tests/fixtures/kubernetes/ holds what a real
//! kube-apiserver v1.37.2 wrote to etcd 3.6.17 for a Lease `default/demo`
//! of two client-go v0.37.2 candidates (`tests/go/leasecandidate`, 6 s
//! leases, alpha released on SIGTERM, beta took it) and its own identity
//! lease, each value as read with `etcdctl watch -w json` at the revision
//! in its name.

use super::*;
use crate::events::EndCause;

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/kubernetes/",
            $name
        ))
    };
}

fn held(holder: &str, acq: i64, renew: i64, duration: i64, transitions: i64) -> Claim {
    Claim::Held(Hold {
        holder: holder.into(),
        acquired_us: Some(acq),
        renewed_us: Some(renew),
        duration_s: Some(duration),
        transitions: Some(transitions),
    })
}

#[test]
fn real_protobuf_values_read_as_kube_apiserver_wrote_them() {
    let acquired = read(fixture!("demo-210-alpha-acquired.bin"));
    assert_eq!(
        acquired,
        held("alpha", 1796526435259541, 1796526435259541, 6, 0)
    );
    let renewed = read(fixture!("demo-211-alpha-renewed.bin"));
    assert_eq!(
        renewed,
        held("alpha", 1796526435259541, 1796526435271234, 6, 0)
    );
    let released = read(fixture!("demo-220-released.bin"));
    assert_eq!(
        released,
        Claim::Free {
            transitions: Some(0)
        }
    );
    let beta = read(fixture!("demo-221-beta-acquired.bin"));
    assert_eq!(beta, held("beta", 1796526442331977, 1796526442331977, 6, 1));
    // What the state machine reads from them.
    let Claim::Held(alpha) = renewed else {
        panic!("held")
    };
    let Claim::Held(a0) = acquired else {
        panic!("held")
    };
    assert!(a0.same_term(&alpha), "a renewal is the same term");
    assert_eq!(alpha.ended_by(&released), EndCause::Resigned);
    // beta acquired 7.07 s after alpha's last renewal here, of a 6 s lease.
    assert_eq!(alpha.ended_by(&beta), EndCause::Expired);
}

#[test]
fn kube_apiserver_s_identity_lease_is_a_heartbeat() {
    let v = fixture!("kube-system-apiserver-identity.bin");
    let Claim::Held(h) = read(v) else {
        panic!("held")
    };
    assert!(h
        .holder
        .starts_with("apiserver-wlv32tlttr4jl3gtroqexyxapa_"));
    assert_eq!(
        (h.duration_s, h.acquired_us, h.transitions),
        (Some(3600), None, None)
    );
    let k = Kubernetes::new("/registry", false).expect("a prefix");
    let key = b"/registry/leases/kube-system/apiserver-wlv32tlttr4jl3gtroqexyxapa";
    assert_eq!(k.classify(key, 0), Role::Ignored);
    assert_eq!(
        k.classify(b"/registry/leases/kube-node-lease/node-1", 0),
        Role::Ignored
    );
    let all = Kubernetes::new("/registry/", true).expect("a prefix");
    assert_eq!(
        all.classify(key, 0),
        Role::Candidate {
            election: "kube-system/apiserver-wlv32tlttr4jl3gtroqexyxapa".into(),
            kind: KeyLayout::Lease
        }
    );
}

#[test]
fn a_lease_is_named_by_its_namespace_and_name_whatever_the_prefix() {
    let k = Kubernetes::new("", false).expect("the default prefix");
    assert_eq!(k.ranges()[0].0, b"/registry/leases/".to_vec());
    assert_eq!(
        k.classify(b"/registry/leases/kube-system/kube-controller-manager", 0),
        Role::Candidate {
            election: "kube-system/kube-controller-manager".into(),
            kind: KeyLayout::Lease
        }
    );
    assert_eq!(k.classify(b"/registry/leases/a", 0), Role::Invalid);
    assert_eq!(k.classify(b"/registry/leases/a/b/c", 0), Role::Invalid);
    assert_eq!(k.classify(b"/registry/leases//b", 0), Role::Invalid);
    assert_eq!(k.classify(b"/registry/leases/a/\x01", 0), Role::Invalid);
    assert_eq!(k.classify(b"/registry/pods/a/b", 0), Role::Ignored);
    // A prefix without its `/`, as kube-apiserver's flag is written: the
    // same name (the prefix is etcd's, not Kubernetes').
    let other = Kubernetes::new("/k8s", false).expect("a prefix");
    assert_eq!(
        other.classify(b"/k8s/leases/ns/x", 0),
        Role::Candidate {
            election: "ns/x".into(),
            kind: KeyLayout::Lease
        }
    );
}

/// The JSON storage of the same Lease (`--storage-media-type=
/// application/json`), as docs/kubernetes-facts.md quotes a real one.
#[test]
fn json_values_read_the_same() {
    let v = br#"{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"demo","namespace":"default","uid":"681000ab-0cb8-4c6a-b8ca-3b9d80d3477a","creationTimestamp":"2026-12-06T02:55:52Z","managedFields":[{"manager":"leasecandidate","operation":"Update","apiVersion":"coordination.k8s.io/v1","time":"2026-12-06T02:55:55Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:acquireTime":{},"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:leaseTransitions":{},"f:renewTime":{}}}}]},"spec":{"holderIdentity":"alpha","leaseDurationSeconds":6,"acquireTime":"2026-12-06T02:55:52.584261Z","renewTime":"2026-12-06T02:55:55.610701Z","leaseTransitions":0}}
"#;
    // 2026-12-06T02:55:52Z is 1796525752 s.
    assert_eq!(
        read(v),
        held("alpha", 1796525752584261, 1796525755610701, 6, 0)
    );
    let released = br#"{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{},"spec":{"holderIdentity":"","leaseDurationSeconds":1}}"#;
    assert_eq!(read(released), Claim::Free { transitions: None });
    assert_eq!(
        json::rfc3339_micros("2026-12-06T03:55:52.5+01:00"),
        Some(1796525752500000)
    );
    assert_eq!(json::rfc3339_micros("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(json::rfc3339_micros("2026-13-06T02:55:52Z"), None);
    assert_eq!(json::rfc3339_micros("2026-12-06T02:55:52"), None);
}

/// A time no writer's clock gives (before 1970, past year 9999, a 30th
/// of February, a 25th hour) makes the value unreadable, from JSON and
/// from protobuf alike, never a term's time; Go's zero time is no time
/// (its JSON is `null`).
#[test]
fn an_out_of_range_time_is_unreadable_never_a_time() {
    let json = |t: &str| {
        let v = format!(
            r#"{{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","spec":{{"holderIdentity":"a","acquireTime":"{t}"}}}}"#
        );
        read(v.as_bytes())
    };
    let malformed = Claim::Unreadable(Unreadable::Malformed);
    for t in [
        "99999-01-01T00:00:00.000000Z",
        "1969-12-31T23:59:59.000000Z",
        "0001-01-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-12-06T25:00:00Z",
        "2026-12-06T02:60:00Z",
        "2026-12-06T02:55:52+25:00",
        "1970-01-01T00:30:00+01:00",
    ] {
        assert_eq!(json(t), malformed, "{t}");
    }
    assert!(matches!(json("2024-02-29T00:00:00Z"), Claim::Held(_)));
    assert!(matches!(
        json("9999-12-31T23:59:59.999999Z"),
        Claim::Held(_)
    ));
    // Protobuf: seconds since the epoch.
    let at = |seconds: i64, nanos: i32| match read(&proto::value("a", seconds, nanos)) {
        Claim::Held(h) => Ok(h.acquired_us),
        other => Err(other),
    };
    assert_eq!(at(1_796_525_752, 5_000), Ok(Some(1_796_525_752_000_005)));
    assert_eq!(at(-62_135_596_800, 0), Ok(None));
    for (s, n) in [
        (-1, 0),
        (3_093_527_980_800, 0),
        (i64::MAX, 0),
        (i64::MIN, 0),
        (5, -1),
        (5, 1_000_000_000),
    ] {
        assert_eq!(at(s, n), Err(malformed.clone()), "{s} {n}");
    }
}

#[test]
fn encrypted_and_malformed_values_are_named_never_guessed() {
    let encrypted = b"k8s:enc:aescbc:v1:key1:\x8f\x01\x02\x03";
    assert_eq!(read(encrypted), Claim::Unreadable(Unreadable::Encrypted));
    let malformed = Claim::Unreadable(Unreadable::Malformed);
    let real = fixture!("demo-221-beta-acquired.bin");
    // Every cut of a real value, and every flipped byte, reads as something
    // or as malformed: never a panic.
    for n in 0..real.len() {
        let _ = read(&real[..n]);
        let mut v = real.to_vec();
        v[n] ^= 0xff;
        let _ = read(&v);
    }
    assert_eq!(read(&real[..real.len() / 2]), malformed);
    assert_eq!(read(b""), malformed);
    assert_eq!(read(b"alpha"), malformed);
    assert_eq!(read(b"k8s\0"), malformed, "no TypeMeta");
    assert_eq!(read(b"{\"kind\":\"Pod\",\"apiVersion\":\"v1\"}"), malformed);
    assert_eq!(read(b"{not json"), malformed);
    // Another kind behind the magic: a Pod's TypeMeta.
    let mut pod = b"k8s\0\x0a\x07\x0a\x02v1\x12\x03Pod\x12\x00".to_vec();
    assert_eq!(read(&pod), malformed);
    pod.truncate(4);
    assert_eq!(read(&pod), malformed);
}

/// client-go's `hostname_uuid` names the pod; nothing else is read as one.
#[test]
fn a_hostname_uuid_identity_names_its_pod() {
    assert_eq!(
        pod_of("kube-controller-manager-node1_4e3a3c38-5d6a-4b8f-9f2a-0123456789ab"),
        Some("kube-controller-manager-node1")
    );
    assert_eq!(
        pod_of("a_b_4e3a3c38-5d6a-4b8f-9f2a-0123456789ab"),
        Some("a_b")
    );
    assert_eq!(pod_of("_4e3a3c38-5d6a-4b8f-9f2a-0123456789ab"), None);
    assert_eq!(pod_of("kcm_4e3a3c38x5d6a-4b8f-9f2a-0123456789ab"), None);
    assert_eq!(pod_of("kcm_not-a-uuid"), None);
    assert_eq!(pod_of("alpha"), None);
}
