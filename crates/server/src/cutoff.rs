//! When the server ends a request that is still running.

use std::time::{Duration, Instant};

/// When the server ends a request that is still running, and the finish reason its
/// unfinished choices then get. The request timeout and `deadline_ms` are one mechanism:
/// at the earlier of the two, `Choices::abort` aborts the engine requests (freeing their
/// KV) and the text so far is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cutoff {
    pub at: Instant,
    /// `timeout` or `deadline`.
    pub reason: &'static str,
}

impl Cutoff {
    /// The earlier of the server's request timeout and the request's `deadline_ms`, both
    /// counted from `arrival` (on a tie, the request's own deadline names it).
    pub fn earliest(
        timeout: Option<Duration>,
        deadline_ms: Option<u64>,
        arrival: Instant,
    ) -> Option<Cutoff> {
        let timeout = timeout.map(|t| Cutoff {
            at: arrival + t,
            reason: crate::choice_state::TIMEOUT,
        });
        let deadline = deadline_ms.map(|ms| Cutoff {
            at: arrival + Duration::from_millis(ms),
            reason: crate::choice_state::DEADLINE,
        });
        match (timeout, deadline) {
            (Some(t), Some(d)) => Some(if t.at < d.at { t } else { d }),
            (t, d) => d.or(t),
        }
    }
}

/// Resolves at `deadline`; never without one.
pub async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earlier_cutoff_names_the_finish_reason() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(Cutoff::earliest(None, None, t0), None);
        let c = Cutoff::earliest(Some(s(10)), None, t0).unwrap();
        assert_eq!((c.at, c.reason), (t0 + s(10), "timeout"));
        let c = Cutoff::earliest(None, Some(500), t0).unwrap();
        assert_eq!(
            (c.at, c.reason),
            (t0 + Duration::from_millis(500), "deadline")
        );
        let c = Cutoff::earliest(Some(s(10)), Some(500), t0).unwrap();
        assert_eq!(c.reason, "deadline");
        let c = Cutoff::earliest(Some(s(1)), Some(5000), t0).unwrap();
        assert_eq!((c.at, c.reason), (t0 + s(1), "timeout"));
        assert_eq!(
            Cutoff::earliest(Some(s(1)), Some(1000), t0).unwrap().reason,
            "deadline"
        );
    }
}
