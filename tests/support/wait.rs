//! Waiting for a condition, never for a fixed time: poll it, with a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` every `every` until it yields `Some`, for at most `limit`;
/// `Err` says what never happened.
pub async fn poll<T, F, Fut>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut check: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(format!("{what}: not within {limit:?}"));
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `check` every 20 ms; panics when it is still false after `within`.
pub async fn wait_until(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The async form of [`wait_until`]: polls `check` every 20 ms.
pub async fn wait_until_async<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
