//! An independent record of what Patroni writes: [`DcsLog`], every put and
//! delete under a cluster's prefix from one etcd watch (from revision 1, so
//! nothing before the watch is missed; with the previous value, so a delete
//! says what it removed), each stamped with when the harness received it.
//! [`DcsLog::timeline`] prints it concisely; [`DcsLog::terms`] groups the
//! `leader` key into terms by its create revision.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{EventType, WatchOptions};
use serde_json::Value;

/// One put or delete of a key under the prefix.
#[derive(Clone, Debug)]
pub struct DcsEvent {
    /// When the harness received it.
    pub at: Instant,
    /// The revision of the put or delete.
    pub revision: i64,
    pub deleted: bool,
    /// The key without the prefix (`leader`, `members/m0`, …).
    pub key: String,
    /// The value put; for a delete, the value it removed.
    pub value: String,
    /// Of the key put; for a delete, of the key removed.
    pub create_revision: i64,
    pub lease: i64,
}

impl DcsEvent {
    /// The value as JSON (member keys, `history`, `failover`, `status`, `config`).
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.value).ok()
    }

    /// A member key's `field` as text (`role`, `state`, `timeline`, `api_url`).
    pub fn field(&self, field: &str) -> Option<String> {
        let v = self.json()?;
        let f = v.get(field)?;
        Some(
            f.as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| f.to_string()),
        )
    }
}

/// One leader term as the `leader` key shows it: from the put that created
/// the key to the delete that removed it.
#[derive(Clone, Debug)]
pub struct Term {
    pub leader: String,
    pub create_revision: i64,
    /// Every lease the key carried in this term, in order.
    pub leases: Vec<i64>,
    pub puts: usize,
    /// The revision and receipt time of the delete that ended it.
    pub ended: Option<(i64, Instant)>,
    pub started_at: Instant,
}

pub struct DcsLog {
    prefix: String,
    started: Instant,
    events: Arc<Mutex<Vec<DcsEvent>>>,
    closed: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl DcsLog {
    /// Watches `prefix` from revision 1 until dropped.
    pub async fn start(mut client: etcd_client::Client, prefix: &str) -> DcsLog {
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(1)
            .with_prev_key();
        let mut stream = client
            .watch(prefix, Some(opts))
            .await
            .expect("watch the prefix");
        let created = stream
            .message()
            .await
            .expect("watch")
            .expect("watch created");
        assert!(created.created(), "first watch response is its creation");
        let events = Arc::new(Mutex::new(Vec::new()));
        let closed = Arc::new(Mutex::new(None));
        let (sink, why) = (events.clone(), closed.clone());
        let cut = prefix.len();
        let task = tokio::spawn(async move {
            let _client = client;
            let end = loop {
                let resp = match stream.message().await {
                    Ok(Some(resp)) => resp,
                    Ok(None) => break "watch stream ended".to_owned(),
                    Err(e) => break format!("watch failed: {e}"),
                };
                if resp.canceled() {
                    break format!("watch canceled: {}", resp.cancel_reason());
                }
                let at = Instant::now();
                let mut log = sink.lock().unwrap_or_else(|p| p.into_inner());
                for e in resp.events() {
                    let Some(kv) = e.kv() else { continue };
                    let deleted = e.event_type() == EventType::Delete;
                    let shown = if deleted {
                        e.prev_kv().unwrap_or(kv)
                    } else {
                        kv
                    };
                    log.push(DcsEvent {
                        at,
                        revision: kv.mod_revision(),
                        deleted,
                        key: String::from_utf8_lossy(kv.key().get(cut..).unwrap_or_default())
                            .into_owned(),
                        value: String::from_utf8_lossy(shown.value()).into_owned(),
                        create_revision: shown.create_revision(),
                        lease: shown.lease(),
                    });
                }
            };
            *why.lock().unwrap_or_else(|p| p.into_inner()) = Some(end);
        });
        DcsLog {
            prefix: prefix.to_owned(),
            started: Instant::now(),
            events,
            closed,
            task,
        }
    }

    pub fn events(&self) -> Vec<DcsEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The events of one key (relative to the prefix).
    pub fn of(&self, key: &str) -> Vec<DcsEvent> {
        self.events().into_iter().filter(|e| e.key == key).collect()
    }

    /// Panics if the watch ended (the record would be incomplete).
    pub fn assert_open(&self) {
        if let Some(why) = self
            .closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            panic!("the record of {} stopped: {why}", self.prefix);
        }
    }

    /// The first recorded event matching `f`, waiting up to `within`.
    pub async fn wait_for(
        &self,
        what: &str,
        within: Duration,
        f: impl Fn(&DcsEvent) -> bool,
    ) -> DcsEvent {
        let deadline = Instant::now() + within;
        loop {
            if let Some(e) = self.events().into_iter().find(&f) {
                return e;
            }
            self.assert_open();
            assert!(
                Instant::now() < deadline,
                "{what}: not within {within:?}\n{}",
                self.timeline()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The `leader` key's terms, grouped by its create revision.
    pub fn terms(&self) -> Vec<Term> {
        let mut terms: Vec<Term> = Vec::new();
        for e in self.of("leader") {
            let same = terms
                .last()
                .is_some_and(|t| t.create_revision == e.create_revision && t.ended.is_none());
            if !same {
                terms.push(Term {
                    leader: e.value.clone(),
                    create_revision: e.create_revision,
                    leases: Vec::new(),
                    puts: 0,
                    ended: None,
                    started_at: e.at,
                });
            }
            let Some(t) = terms.last_mut() else { continue };
            if e.deleted {
                t.ended = Some((e.revision, e.at));
                continue;
            }
            t.puts += 1;
            if t.leases.last() != Some(&e.lease) {
                t.leases.push(e.lease);
            }
        }
        terms
    }

    /// One line per event, times from the start of the record: every key but
    /// `status` (counted), member keys only when role, state, timeline or
    /// lease change.
    pub fn timeline(&self) -> String {
        let mut out = String::new();
        let mut members: HashMap<String, String> = HashMap::new();
        let mut status = 0;
        for e in self.events() {
            let t = e.at.saturating_duration_since(self.started).as_secs_f64();
            let what = if e.deleted { "DELETE" } else { "PUT   " };
            let shown = if e.key == "status" {
                status += 1;
                continue;
            } else if e.key.starts_with("members/") && !e.deleted {
                let s = format!(
                    "role={} state={} timeline={}",
                    e.field("role").unwrap_or_default(),
                    e.field("state").unwrap_or_default(),
                    e.field("timeline").unwrap_or_else(|| "-".into())
                );
                let seen = format!("{s} {}", e.lease);
                if members.insert(e.key.clone(), seen.clone()).as_deref() == Some(seen.as_str()) {
                    continue;
                }
                s
            } else {
                e.value.chars().take(200).collect()
            };
            out.push_str(&format!(
                "{t:8.3}s r{:<5} {what} {:<12} {shown}  (create {}, lease {:x})\n",
                e.revision, e.key, e.create_revision, e.lease
            ));
        }
        out.push_str(&format!("({status} puts of `status` not shown)\n"));
        out
    }
}

impl Drop for DcsLog {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "what Patroni wrote under {}:\n{}",
                self.prefix,
                self.timeline()
            );
        }
        self.task.abort();
    }
}
