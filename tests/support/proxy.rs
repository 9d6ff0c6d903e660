//! A small TCP proxy on loopback for fault injection without root: it can
//! delay traffic, and it can turn every connection open at that moment into
//! a *half-open* one (bytes are read and silently dropped, nothing is closed,
//! so neither end sees an error) while new connections still pass. And it
//! can close every connection whose answers pass a byte budget
//! ([`Proxy::cut_after_bytes`]): a response larger than that never arrives
//! whole, however often the client asks again.
//!
//! `tc netem` and toxiproxy are not available on these machines; this is the
//! in-process replacement the design notes suggest. It runs on the runtime of
//! whoever creates it and stops (closing every connection) when dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

#[derive(Default)]
struct Shared {
    /// Added before every forwarded chunk, in microseconds.
    delay_us: AtomicU64,
    /// Added before every chunk from the client to the target only.
    delay_up_us: AtomicU64,
    /// Set: every connection, open or new, is blackholed (a partition).
    partitioned: AtomicBool,
    /// One flag per live connection; set = blackholed for good.
    conns: Mutex<Vec<Arc<AtomicBool>>>,
    accepted: AtomicU64,
    /// Non-zero: a connection is closed (both ways) when more than this many
    /// bytes from the target would have reached the client through it.
    cut_after: AtomicU64,
    /// Connections closed that way.
    cut: AtomicU64,
    /// Set: where new connections go instead of the first target.
    retargeted: Mutex<Option<SocketAddr>>,
}

pub struct Proxy {
    pub addr: SocketAddr,
    pub target: SocketAddr,
    shared: Arc<Shared>,
    tasks: Arc<Mutex<JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on 127.0.0.1:0 and forwards every connection to `target`.
    pub async fn start(target: SocketAddr) -> Proxy {
        assert!(
            target.ip().is_loopback(),
            "the proxy only forwards to loopback, not {target}"
        );
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy on 127.0.0.1:0");
        let addr = listener.local_addr().expect("proxy addr");
        let shared = Arc::new(Shared::default());
        let tasks = Arc::new(Mutex::new(JoinSet::new()));
        let accept = {
            let shared = shared.clone();
            let tasks = tasks.clone();
            tokio::spawn(async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    shared.accepted.fetch_add(1, Ordering::Relaxed);
                    let dead = Arc::new(AtomicBool::new(shared.partitioned.load(Ordering::SeqCst)));
                    shared
                        .conns
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(dead.clone());
                    let shared = shared.clone();
                    tasks
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .spawn(async move {
                            let to = shared
                                .retargeted
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .unwrap_or(target);
                            if let Ok(outbound) = TcpStream::connect(to).await {
                                let _ = inbound.set_nodelay(true);
                                let _ = outbound.set_nodelay(true);
                                let (ri, wi) = inbound.into_split();
                                let (ro, wo) = outbound.into_split();
                                let cut = Arc::new(tokio::sync::Notify::new());
                                // Cut: both halves dropped, the sockets closed.
                                tokio::select! {
                                    _ = async {
                                        tokio::join!(
                                            pipe(ri, wo, dead.clone(), shared.clone(), true, cut.clone()),
                                            pipe(ro, wi, dead, shared.clone(), false, cut.clone())
                                        )
                                    } => {}
                                    _ = cut.notified() => {
                                        shared.cut.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            }
                        });
                }
            })
        };
        Proxy {
            addr,
            target,
            shared,
            tasks,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds `d` of latency to every chunk in both directions (0 removes it).
    /// Chunks in flight are delayed independently: a request sent while
    /// another is delayed arrives `d` after it was sent, not `2 d`.
    pub fn set_delay(&self, d: Duration) {
        self.shared
            .delay_us
            .store(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Adds `d` of latency to every chunk from the client to the target
    /// only (0 removes it): a request arrives late, its answer does not.
    pub fn set_delay_up(&self, d: Duration) {
        self.shared
            .delay_up_us
            .store(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// A partition: every connection open now and every new one is
    /// blackholed (bytes read and dropped, nothing closed), until
    /// [`Proxy::heal`]. Connections cut now stay cut.
    pub fn partition(&self) {
        self.shared.partitioned.store(true, Ordering::SeqCst);
        self.blackhole_existing();
    }

    /// New connections pass again.
    pub fn heal(&self) {
        self.shared.partitioned.store(false, Ordering::SeqCst);
    }

    /// Every connection open now becomes half-open for good: bytes in either
    /// direction are read and dropped, nothing is closed or reset. New
    /// connections are forwarded normally. Returns how many were cut.
    pub fn blackhole_existing(&self) -> usize {
        let conns = self.shared.conns.lock().unwrap_or_else(|p| p.into_inner());
        let mut n = 0;
        for c in conns.iter() {
            if !c.swap(true, Ordering::SeqCst) {
                n += 1;
            }
        }
        n
    }

    /// From now on new connections go to `to` (loopback only); open ones
    /// stay where they are ([`Proxy::close_existing`] ends them): the
    /// endpoint now leads to another server.
    pub fn retarget(&self, to: SocketAddr) {
        assert!(
            to.ip().is_loopback(),
            "the proxy only forwards to loopback, not {to}"
        );
        *self
            .shared
            .retargeted
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(to);
    }

    /// Closes every connection open now; new connections are forwarded
    /// normally.
    pub fn close_existing(&self) {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort_all();
    }

    /// From now on every connection, open or new, is closed as soon as
    /// more than `bytes` from the target would have reached the client
    /// through it in all (counted from its start; 0 turns it off). An
    /// answer bigger than that is cut part-way on every attempt.
    pub fn cut_after_bytes(&self, bytes: u64) {
        self.shared.cut_after.store(bytes, Ordering::SeqCst);
    }

    /// Connections closed by [`Proxy::cut_after_bytes`] so far.
    pub fn cut(&self) -> u64 {
        self.shared.cut.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort_all();
    }
}

/// Forwards `from` to `to`. Each chunk is written `delay` after it was
/// read, independently of the chunks before it (a link with latency, not a
/// slow one: chunks in flight do not add up their delays), in order.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    dead: Arc<AtomicBool>,
    shared: Arc<Shared>,
    up: bool,
    cut: Arc<tokio::sync::Notify>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let reader = {
        let dead = dead.clone();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            let mut passed: u64 = 0;
            loop {
                let n = match from.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                passed += n as u64;
                let limit = shared.cut_after.load(Ordering::SeqCst);
                if !up && limit > 0 && passed > limit {
                    cut.notify_one();
                    std::future::pending::<()>().await;
                }
                if dead.load(Ordering::SeqCst) {
                    // Half-open: swallow everything, close nothing.
                    continue;
                }
                let mut delay = shared.delay_us.load(Ordering::Relaxed);
                if up {
                    delay += shared.delay_up_us.load(Ordering::Relaxed);
                }
                let due = tokio::time::Instant::now() + Duration::from_micros(delay);
                if tx.send((due, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        }
    };
    let writer = {
        let dead = dead.clone();
        async move {
            while let Some((due, bytes)) = rx.recv().await {
                tokio::time::sleep_until(due).await;
                if dead.load(Ordering::SeqCst) {
                    continue;
                }
                if to.write_all(&bytes).await.is_err() {
                    break;
                }
            }
            to
        }
    };
    let ((), mut to) = tokio::join!(reader, writer);
    if !dead.load(Ordering::SeqCst) {
        let _ = to.shutdown().await;
    } else {
        // Keep the socket open (and silent) until the proxy is dropped.
        std::future::pending::<()>().await;
    }
}
