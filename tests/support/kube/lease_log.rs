//! The test's own record of one Lease key: every write from its etcd watch,
//! decoded by a wire walk of its own (not tenure's decoder).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{EventType, WatchOptions};

use super::unix_us;

/// One write of the Lease key as the test's watch saw it.
#[derive(Clone, Debug)]
pub struct Write {
    pub revision: i64,
    /// When the watch delivered it (unix µs, the candidates' clock).
    pub seen_us: i64,
    pub deleted: bool,
    /// `holderIdentity` (empty: nobody).
    pub holder: String,
    pub acquire_us: Option<i64>,
    pub renew_us: Option<i64>,
    pub transitions: Option<i64>,
}

/// Every write of one key from revision 1 (nothing before the watch is
/// missed), until dropped.
pub struct LeaseLog {
    writes: Arc<Mutex<Vec<Write>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseLog {
    pub async fn start(mut client: etcd_client::Client, key: &str) -> LeaseLog {
        let opts = WatchOptions::new().with_start_revision(1);
        let mut stream = client.watch(key, Some(opts)).await.expect("watch");
        let writes = Arc::new(Mutex::new(Vec::new()));
        let sink = writes.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(resp)) = stream.message().await {
                let seen_us = unix_us();
                for e in resp.events() {
                    let Some(kv) = e.kv() else { continue };
                    let deleted = e.event_type() == EventType::Delete;
                    let spec = if deleted {
                        Spec::default()
                    } else {
                        spec_of(kv.value())
                            .unwrap_or_else(|| panic!("not a Lease: {:?}", kv.value()))
                    };
                    sink.lock().unwrap().push(Write {
                        revision: kv.mod_revision(),
                        seen_us,
                        deleted,
                        holder: spec.holder,
                        acquire_us: spec.acquire_us,
                        renew_us: spec.renew_us,
                        transitions: spec.transitions,
                    });
                }
            }
        });
        LeaseLog { writes, task }
    }

    pub fn writes(&self) -> Vec<Write> {
        self.writes.lock().unwrap().clone()
    }

    /// Waits until a write satisfies `f`; returns it.
    pub async fn wait_for(
        &self,
        what: &str,
        within: Duration,
        f: impl Fn(&Write) -> bool,
    ) -> Write {
        let deadline = Instant::now() + within;
        loop {
            if let Some(w) = self.writes().into_iter().find(|w| f(w)) {
                return w;
            }
            assert!(
                Instant::now() < deadline,
                "never saw {what}: {}",
                self.timeline()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The holder now (empty: nobody; `None`: no write yet or deleted).
    pub fn holder(&self) -> Option<String> {
        self.writes()
            .last()
            .filter(|w| !w.deleted)
            .map(|w| w.holder.clone())
    }

    /// One line per change of holder, for messages.
    pub fn timeline(&self) -> String {
        let mut out = String::new();
        let mut last: Option<(String, Option<i64>, bool)> = None;
        for w in self.writes() {
            let now = (w.holder.clone(), w.acquire_us, w.deleted);
            if last.as_ref() != Some(&now) {
                out.push_str(&format!(
                    "\n  rev {} {} holder {:?} acquire {:?} transitions {:?}",
                    w.revision,
                    if w.deleted { "DELETE" } else { "put" },
                    w.holder,
                    w.acquire_us,
                    w.transitions
                ));
                last = Some(now);
            }
        }
        out
    }
}

impl Drop for LeaseLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct Spec {
    holder: String,
    acquire_us: Option<i64>,
    renew_us: Option<i64>,
    transitions: Option<i64>,
}

/// The test's own reading of a stored Lease: `k8s\0`, then runtime.Unknown
/// field 2 (raw) = the Lease, its field 2 = the spec (holderIdentity 1,
/// acquireTime 3, renewTime 4, leaseTransitions 5; MicroTime seconds 1,
/// nanos 2), by a walk over protobuf's wire format.
fn spec_of(value: &[u8]) -> Option<Spec> {
    let body = value.strip_prefix(b"k8s\0")?;
    let raw = field(body, 2)?.bytes()?;
    let spec = field(raw, 2)?.bytes()?;
    let micro = |f: Option<Wire<'_>>| {
        let t = f?.bytes()?;
        let s = field(t, 1).and_then(|w| w.int()).unwrap_or(0);
        let n = field(t, 2).and_then(|w| w.int()).unwrap_or(0);
        Some(s * 1_000_000 + n / 1000)
    };
    Some(Spec {
        holder: field(spec, 1)
            .and_then(|w| w.bytes())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default(),
        acquire_us: micro(field(spec, 3)),
        renew_us: micro(field(spec, 4)),
        transitions: field(spec, 5).and_then(|w| w.int()),
    })
}

enum Wire<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

impl<'a> Wire<'a> {
    fn bytes(self) -> Option<&'a [u8]> {
        match self {
            Wire::Bytes(b) => Some(b),
            Wire::Int(_) => None,
        }
    }
    fn int(self) -> Option<i64> {
        match self {
            Wire::Int(i) => Some(i),
            Wire::Bytes(_) => None,
        }
    }
}

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let c = *b.get(*i)?;
        *i += 1;
        v |= u64::from(c & 0x7f) << shift;
        if c < 0x80 {
            return Some(v);
        }
    }
    None
}

/// The last occurrence of field `n` in message `b`.
fn field(b: &[u8], n: u64) -> Option<Wire<'_>> {
    let mut i = 0;
    let mut found = None;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let value = match key & 7 {
            0 => Wire::Int(varint(b, &mut i)? as i64),
            2 => {
                let len = varint(b, &mut i)? as usize;
                let v = b.get(i..i + len)?;
                i += len;
                Wire::Bytes(v)
            }
            _ => return None,
        };
        if key >> 3 == n {
            found = Some(value);
        }
    }
    found
}
