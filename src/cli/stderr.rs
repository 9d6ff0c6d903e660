//! tenure's own messages to stderr, never blocking the caller.
//!
//! A holder must stop its command on time even when nobody reads its stderr
//! (a full pipe, a stuck log shipper): a blocking `eprintln!` on the loss
//! path would hold the SIGKILL back indefinitely. Every message (and every
//! `tracing` log line) goes into a bounded queue that one thread writes
//! out; when the queue is full, messages are dropped and counted, and the
//! count is written once the writer catches up.
//!
//! Deliberately absent: the command's own output. It inherits tenure's
//! stdout and stderr directly and never passes through tenure.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::OnceLock;
use std::time::Duration;

/// Messages held while stderr does not take them.
const QUEUE: usize = 1024;

enum Item {
    Line(Vec<u8>),
    Flush(SyncSender<()>),
}

struct Log {
    tx: SyncSender<Item>,
    dropped: AtomicU64,
}

fn log() -> &'static Log {
    static LOG: OnceLock<Log> = OnceLock::new();
    LOG.get_or_init(|| {
        let (tx, rx) = sync_channel(QUEUE);
        // Without the thread, messages are dropped (and counted), never
        // blocking anyone.
        let _ = std::thread::Builder::new()
            .name("tenure-stderr".into())
            .spawn(move || writer(rx));
        Log {
            tx,
            dropped: AtomicU64::new(0),
        }
    })
}

fn writer(rx: Receiver<Item>) {
    let mut err = std::io::stderr();
    let mut reported = 0;
    for item in rx {
        match item {
            Item::Line(bytes) => {
                let dropped = log().dropped.load(Ordering::Relaxed);
                if dropped > reported {
                    let _ = writeln!(
                        err,
                        "tenure: {} log messages dropped while stderr was not being read",
                        dropped - reported
                    );
                    reported = dropped;
                }
                let _ = err.write_all(&bytes);
            }
            Item::Flush(done) => {
                let _ = err.flush();
                let _ = done.send(());
            }
        }
    }
}

fn send(bytes: Vec<u8>) {
    let log = log();
    match log.tx.try_send(Item::Line(bytes)) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
            log.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Writes `tenure: <message>` and a newline to stderr without blocking.
pub fn say(message: impl std::fmt::Display) {
    send(format!("tenure: {message}\n").into_bytes());
}

/// Waits up to `limit` for every queued message to be written (at exit).
pub fn flush(limit: Duration) {
    let (done, wait) = sync_channel(1);
    if log().tx.try_send(Item::Flush(done)).is_ok() {
        let _ = wait.recv_timeout(limit);
    }
}

/// A `tracing` writer that queues each formatted event as one message.
#[derive(Default)]
pub struct MakeQueued;

pub struct Queued(Vec<u8>);

impl Write for Queued {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        let bytes = std::mem::take(&mut self.0);
        if !bytes.is_empty() {
            send(bytes);
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for MakeQueued {
    type Writer = Queued;
    fn make_writer(&'a self) -> Queued {
        Queued(Vec::new())
    }
}
