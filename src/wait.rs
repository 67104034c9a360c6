//! How the bridge waits: a pause before trying again ([`Backoff`]), and a sleep until an
//! optional deadline for `select!` loops ([`sleep_until`]).
//!
//! One definition for every retry loop (an upstream reconnecting, a Redis link reconnecting, an
//! SSE reader catching up on history), so they all behave alike: the pause doubles after each
//! failure up to a cap, and is jittered so that many of them failing together (replicas that
//! lost Redis at the same moment, readers of one job) do not all retry in the same instant.
//! A leaf: it imports nothing of the bridge.

use std::time::Duration;

use tokio::time::Instant;

/// A capped, jittered exponential backoff policy. Written out where it is used, so the
/// numbers a retry loop runs on are in front of whoever reads it:
///
/// ```
/// # use std::time::Duration;
/// # use mcp_progress_bridge::wait::Backoff;
/// const RECONNECT: Backoff = Backoff {
///     first: Duration::from_millis(500),
///     cap: Duration::from_secs(30),
/// };
/// let mut pauses = RECONNECT.pauses();
/// assert!(pauses.next_pause() <= Duration::from_millis(500));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The pause after the first failure (before jitter).
    pub first: Duration,
    /// No pause is longer than this.
    pub cap: Duration,
}

impl Backoff {
    /// The pauses of one run of failures, starting from the first.
    pub fn pauses(self) -> Pauses {
        Pauses {
            policy: self,
            failures: 0,
        }
    }

    /// The pause after `failures` failures in a row have already been waited out (0: the
    /// first pause): `first * 2^failures`, capped, then scaled by a random factor in
    /// [0.5, 1.0]. The cap is a true upper bound, and a pause is never under half its nominal
    /// value, so a run of failures still slows down.
    pub fn pause(self, failures: u32) -> Duration {
        let nominal = self
            .first
            .saturating_mul(1u32 << failures.min(20))
            .min(self.cap);
        let half = nominal / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

/// The state of one retry loop: how many pauses it has taken since its last success.
#[derive(Debug, Clone)]
pub struct Pauses {
    policy: Backoff,
    failures: u32,
}

impl Pauses {
    /// The next pause to take (each one about twice the one before, up to the cap).
    pub fn next_pause(&mut self) -> Duration {
        let pause = self.policy.pause(self.failures);
        self.failures = self.failures.saturating_add(1);
        pause
    }

    /// A success: the next failure starts again from the first pause.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Sleep until `deadline`, or forever when there is none. For a `select!` branch guarded by
/// `if deadline.is_some()`, which then never polls the `None` case; without the guard a `None`
/// deadline is simply a branch that never fires.
pub async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Backoff = Backoff {
        first: Duration::from_millis(100),
        cap: Duration::from_secs(2),
    };

    #[test]
    fn pauses_double_from_first_up_to_the_cap_with_jitter_below_nominal() {
        for _ in 0..200 {
            let mut pauses = POLICY.pauses();
            let mut nominal = POLICY.first;
            for _ in 0..12 {
                let pause = pauses.next_pause();
                assert!(
                    pause >= nominal / 2 && pause <= nominal,
                    "{pause:?} outside [{:?}, {nominal:?}]",
                    nominal / 2
                );
                nominal = (nominal * 2).min(POLICY.cap);
            }
            assert_eq!(nominal, POLICY.cap, "twelve doublings reach the cap");
        }
    }

    #[test]
    fn reset_starts_again_from_the_first_pause() {
        let mut pauses = POLICY.pauses();
        for _ in 0..10 {
            pauses.next_pause();
        }
        assert!(pauses.next_pause() >= POLICY.cap / 2);
        pauses.reset();
        assert!(pauses.next_pause() <= POLICY.first);
    }

    #[test]
    fn jitter_spreads_pauses() {
        let distinct: std::collections::HashSet<Duration> =
            (0..50).map(|_| POLICY.pause(3)).collect();
        assert!(
            distinct.len() > 10,
            "50 pauses should not bunch together: {distinct:?}"
        );
    }

    #[test]
    fn many_failures_do_not_overflow() {
        let huge = Backoff {
            first: Duration::MAX / 3,
            cap: Duration::MAX,
        };
        assert!(huge.pause(u32::MAX) >= Duration::MAX / 2);
        let mut pauses = POLICY.pauses();
        for _ in 0..100 {
            assert!(pauses.next_pause() <= POLICY.cap);
        }
    }

    #[tokio::test]
    async fn sleep_until_a_deadline_or_forever() {
        let start = Instant::now();
        sleep_until(Some(start + Duration::from_millis(30))).await;
        assert!(Instant::now() - start >= Duration::from_millis(30));
        let never = tokio::time::timeout(Duration::from_millis(50), sleep_until(None)).await;
        assert!(never.is_err(), "no deadline never wakes");
    }
}
