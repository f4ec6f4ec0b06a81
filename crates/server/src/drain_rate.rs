//! How fast the server finishes requests, for the `Retry-After` of a 429: the time the
//! requests queued ahead need to drain at the measured rate, instead of a constant that
//! sends every refused client back after one second whatever the load.

use std::sync::Mutex;
use std::time::Instant;

/// Bounds of `Retry-After`, seconds.
pub const MIN_RETRY_S: u64 = 1;
pub const MAX_RETRY_S: u64 = 60;

/// Weight of the newest interval in the moving average.
const ALPHA: f64 = 0.2;

/// An exponentially weighted moving average of the interval between finished requests.
#[derive(Debug, Default)]
pub struct DrainRate {
    inner: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last: Option<Instant>,
    /// Seconds between finishes (EWMA); `None` until two finishes were seen.
    interval: Option<f64>,
}

impl DrainRate {
    /// One request finished at `now`.
    pub fn record(&self, now: Instant) {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = s.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            s.interval = Some(match s.interval {
                None => dt,
                Some(m) => ALPHA * dt + (1.0 - ALPHA) * m,
            });
        }
        s.last = Some(now);
    }

    /// Requests finished per second at `now`; a silence longer than the average interval
    /// counts as that long an interval (a stalled server drains slowly). `None` before
    /// any measurement.
    pub fn per_second(&self, now: Instant) -> Option<f64> {
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let m = s.interval?;
        let quiet = s
            .last
            .map_or(0.0, |l| now.saturating_duration_since(l).as_secs_f64());
        let m = m.max(quiet).max(1e-3);
        Some(1.0 / m)
    }

    /// Seconds until `ahead` requests have drained at the measured rate, in
    /// [`MIN_RETRY_S`, `MAX_RETRY_S`]; the minimum before any measurement.
    pub fn retry_after(&self, ahead: usize, now: Instant) -> u64 {
        match self.per_second(now) {
            None => MIN_RETRY_S,
            Some(r) => ((ahead as f64 / r).ceil() as u64).clamp(MIN_RETRY_S, MAX_RETRY_S),
        }
    }
}

#[cfg(test)]
fn after(t: Instant, ms: u64) -> Instant {
    t + std::time::Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_follows_the_measured_rate() {
        let r = DrainRate::default();
        let t = Instant::now();
        assert_eq!(r.retry_after(100, t), 1, "no measurement yet");
        r.record(t);
        assert_eq!(r.retry_after(100, t), 1, "one finish is no interval");
        // A finish every 500 ms: 2 per second; 10 ahead drain in 5 s.
        for i in 1..=5 {
            r.record(after(t, 500 * i));
        }
        let now = after(t, 2500);
        assert_eq!(r.per_second(now), Some(2.0));
        assert_eq!(r.retry_after(10, now), 5);
        assert_eq!(r.retry_after(1, now), 1);
        assert_eq!(r.retry_after(1000, now), 60);
        // Faster finishes (every 100 ms) pull the average interval down: 0.2·0.1 + 0.8·0.5.
        r.record(after(t, 2600));
        let now = after(t, 2600);
        assert!((r.per_second(now).unwrap() - 1.0 / 0.42).abs() < 1e-9);
        assert_eq!(r.retry_after(10, now), 5); // 4.2 s, rounded up
                                               // Silence: 4 s since the last finish counts as a 4 s interval.
        assert_eq!(r.retry_after(10, after(t, 6600)), 40);
    }
}
