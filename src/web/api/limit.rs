//! The campaign rate limit: one token bucket for all clients, so etcd's
//! write rate stays bounded.

use crate::task::Locked;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A global token bucket: campaigns beyond the rate get 429.
pub struct RateLimiter {
    per_second: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(per_second: u32) -> Self {
        let per_second = f64::from(per_second.max(1));
        Self {
            per_second,
            state: Mutex::new((per_second, Instant::now())),
        }
    }

    /// Takes one token; `Err(retry_after)` when none is left.
    pub fn take(&self) -> Result<(), Duration> {
        let mut s = self.state.locked();
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() * self.per_second;
        s.0 = (s.0 + refill).min(self.per_second);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - s.0) / self.per_second))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limiter_refuses_past_the_rate() {
        let r = RateLimiter::new(10);
        let ok = (0..20).filter(|_| r.take().is_ok()).count();
        assert!((10..=11).contains(&ok), "{ok}");
    }
}
