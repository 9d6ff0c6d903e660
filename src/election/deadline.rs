//! Deadlines that hold across a suspended host.
//!
//! tokio's clock is CLOCK_MONOTONIC, which stops while the host is
//! suspended; etcd's lease timers (on another host) do not. A deadline of
//! "sent + TTL − margin" kept on the monotonic clock alone would, after a
//! suspend, tell the holder it still leads long after etcd expired its
//! lease. A [`Deadline`] is kept on both clocks: CLOCK_MONOTONIC (for
//! tokio's timers) and CLOCK_BOOTTIME (which counts the time suspended). It
//! has passed as soon as either clock says so, and a task waiting for it
//! wakes at least every [`SUSPEND_CHECK`] to read CLOCK_BOOTTIME, because a
//! monotonic timer does not fire for time spent suspended.
//!
//! Deliberately absent: any wall clock. CLOCK_BOOTTIME never jumps with
//! NTP or an operator's `date`; it only runs on while the host sleeps.

use std::time::Duration;

use tokio::time::{sleep_until, Instant};

/// How often a waiter reads CLOCK_BOOTTIME: the longest a resumed host's
/// holder can go on believing it leads, past a deadline that expired while
/// the host was suspended.
pub const SUSPEND_CHECK: Duration = Duration::from_millis(200);

/// Time since boot, suspended time included (CLOCK_BOOTTIME).
pub fn boottime() -> Duration {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(Duration::from)
        // Linux has had CLOCK_BOOTTIME since 2.6.39; without it, fall back
        // to the monotonic clock alone (the deadline is then only as safe
        // as CLOCK_MONOTONIC is).
        .unwrap_or_else(|_| monotonic_fallback());
    now + test_hook::suspended()
}

fn monotonic_fallback() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// An instant on both clocks. Taken with [`Stamp::now`] at the moment a
/// request is sent; deadlines are stamps plus a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub mono: Instant,
    pub boot: Duration,
}

impl Stamp {
    pub fn now() -> Self {
        Self {
            mono: Instant::now(),
            boot: boottime(),
        }
    }

    /// This instant plus `d`, on both clocks.
    pub fn after(self, d: Duration) -> Deadline {
        Deadline {
            mono: self.mono + d,
            boot: self.boot + d,
        }
    }
}

/// A moment that has passed when either clock has reached it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub mono: Instant,
    pub boot: Duration,
}

impl Deadline {
    pub fn has_passed(&self) -> bool {
        Instant::now() >= self.mono || boottime() >= self.boot
    }

    /// Time left by the clock that has less left (zero once passed).
    pub fn remaining(&self) -> Duration {
        let mono = self.mono.saturating_duration_since(Instant::now());
        let boot = self.boot.saturating_sub(boottime());
        mono.min(boot)
    }

    /// True when the two clocks disagree: CLOCK_BOOTTIME says the deadline
    /// passed while CLOCK_MONOTONIC says it has not, i.e. the host was
    /// suspended in between.
    pub fn passed_by_suspend(&self) -> bool {
        Instant::now() < self.mono && boottime() >= self.boot
    }

    /// The later of two deadlines (each clock separately).
    pub fn max(self, other: Deadline) -> Deadline {
        Deadline {
            mono: self.mono.max(other.mono),
            boot: self.boot.max(other.boot),
        }
    }

    /// The earlier of two deadlines (each clock separately).
    pub fn min(self, other: Deadline) -> Deadline {
        Deadline {
            mono: self.mono.min(other.mono),
            boot: self.boot.min(other.boot),
        }
    }

    /// This deadline moved earlier by `d`.
    pub fn before(self, d: Duration) -> Deadline {
        Deadline {
            mono: self.mono.checked_sub(d).unwrap_or(self.mono),
            boot: self.boot.saturating_sub(d),
        }
    }

    /// Resolves once the deadline has passed by either clock. Wakes at
    /// least every [`SUSPEND_CHECK`] to read CLOCK_BOOTTIME.
    pub async fn wait(&self) {
        loop {
            if self.has_passed() {
                return;
            }
            let next = self.mono.min(Instant::now() + SUSPEND_CHECK);
            sleep_until(next).await;
        }
    }
}

/// Tests cannot suspend the host; they move CLOCK_BOOTTIME forward instead,
/// which is exactly what a suspend looks like to this process.
#[cfg(test)]
pub(crate) mod test_hook {
    use std::cell::Cell;
    use std::time::Duration;

    // Per thread, so that one test's suspend does not leak into tests
    // running beside it (a `#[tokio::test]` runs on one thread).
    thread_local! {
        static SUSPENDED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    pub fn suspend(d: Duration) {
        SUSPENDED.with(|s| s.set(s.get() + d));
    }

    pub fn suspended() -> Duration {
        SUSPENDED.with(|s| s.get())
    }
}

#[cfg(not(test))]
mod test_hook {
    use std::time::Duration;

    #[inline]
    pub fn suspended() -> Duration {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_suspend_passes_the_deadline_though_the_monotonic_clock_did_not_move() {
        let d = Stamp::now().after(Duration::from_secs(30));
        assert!(!d.has_passed());
        assert!(d.remaining() > Duration::from_secs(29));
        let waiter = crate::task::spawn("deadline waiter", async move {
            let started = Instant::now();
            d.wait().await;
            started.elapsed()
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The host "sleeps" for 40 s: CLOCK_BOOTTIME runs on, MONOTONIC not.
        test_hook::suspend(Duration::from_secs(40));
        assert!(d.has_passed());
        assert!(d.passed_by_suspend());
        assert_eq!(d.remaining(), Duration::ZERO);
        let waited = waiter.await.expect("waiter");
        assert!(
            waited < SUSPEND_CHECK + Duration::from_millis(300),
            "the waiter noticed the suspend after {waited:?}"
        );
    }
}
