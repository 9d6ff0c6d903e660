//! Named tasks: every task tenure spawns has a name, and a task that panics
//! says which it was in the log (tokio's own message names only the worker
//! thread). `tokio::spawn` and `Handle::spawn` are disallowed elsewhere by
//! clippy.toml; this file is their one caller.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tokio::runtime::Handle;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

/// Spawns `future` on the current runtime as the task `name`. A panic is
/// logged with the name, then carried on to the [`JoinHandle`]
/// (`JoinError::is_panic`).
pub fn spawn<F>(name: &'static str, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    #[allow(clippy::disallowed_methods)] // the one place a task is spawned
    tokio::spawn(named(name, future))
}

/// [`spawn`] on the runtime of `handle` (from a `Drop`, which may run
/// outside any task).
pub fn spawn_on<F>(handle: &Handle, name: &'static str, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    #[allow(clippy::disallowed_methods)] // the one place a task is spawned
    handle.spawn(named(name, future))
}

/// [`spawn`] into `set` (whose tasks end with it).
pub fn spawn_in<T, F>(set: &mut JoinSet<T>, name: &'static str, future: F) -> AbortHandle
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    #[allow(clippy::disallowed_methods)] // the one place a task is spawned
    set.spawn(named(name, future))
}

/// A task that is aborted when this guard is dropped: a helper that must
/// not outlive the loop that started it.
#[derive(Debug)]
pub struct AbortOnDrop<T>(pub JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn named<F: Future>(name: &'static str, future: F) -> F::Output {
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(out) => out,
        Err(panic) => {
            tracing::error!(task = name, panic = panic_message(&*panic), "task panicked");
            std::panic::resume_unwind(panic)
        }
    }
}

/// The text a panic was raised with (`panic!("…")`), when it has one.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Taking a `std::sync::Mutex` whose last holder panicked: the panic is
/// logged where it happened ([`spawn`]'s name says which task), and every
/// value these locks guard is whole between statements, so the lock is
/// used as it is. One way to take such a lock, everywhere.
pub trait Locked<T> {
    /// The guard, poisoned or not.
    fn locked(&self) -> std::sync::MutexGuard<'_, T>;
    /// The value, through `&mut`, poisoned or not.
    fn locked_mut(&mut self) -> &mut T;
}

impl<T> Locked<T> for std::sync::Mutex<T> {
    fn locked(&self) -> std::sync::MutexGuard<'_, T> {
        self.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn locked_mut(&mut self) -> &mut T {
        self.get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Without the `server` feature (no subscriber to read the log back);
    // with it, the test below checks the same and the log line: two tests
    // in one process would race on the callsite's cached interest.
    #[cfg(not(feature = "server"))]
    #[tokio::test]
    async fn a_panic_reaches_the_join_handle_and_a_value_passes_through() {
        assert_eq!(spawn("value", async { 7 }).await.ok(), Some(7));
        let err = spawn("boom", async { panic!("on purpose") })
            .await
            .expect_err("the panic is carried to the handle");
        assert!(err.is_panic());
        let payload = err.into_panic();
        assert_eq!(panic_message(&*payload), "on purpose");
    }

    /// The log line names the task: read back from a subscriber of the test's own.
    #[cfg(feature = "server")]
    #[tokio::test]
    async fn a_panic_is_logged_with_the_tasks_name() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        // The current-thread runtime of #[tokio::test] polls the task on
        // this thread, under the default just set.
        assert_eq!(spawn("value", async { 7 }).await.ok(), Some(7));
        let err = spawn("the-named-task", async { panic!("on purpose") })
            .await
            .expect_err("the panic is carried to the handle");
        assert!(err.is_panic());
        let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(log.contains("task panicked"), "{log}");
        assert!(log.contains("task=\"the-named-task\""), "{log}");
        assert!(log.contains("on purpose"), "{log}");
    }
}
