//! Waiting, the only way tests synchronise with the bridge: a bound on every wait
//! ([`within`]) and one poll for what can only be asked again ([`eventually`]). Nothing sleeps
//! to let something happen.

use std::time::Duration;

/// Upper bound for any single wait. Generous: CI machines are shared and slow, and a passing
/// test never waits this long.
pub const WAIT: Duration = Duration::from_secs(20);

/// How often [`eventually`] asks again: short next to any wait a test has, long enough that
/// polling an HTTP endpoint on loopback costs nothing.
const POLL: Duration = Duration::from_millis(20);

/// Run `future` with the [`WAIT`] bound, failing the test with `what` if it takes longer.
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// What a check of [`eventually`] answers: `true`/`false`, or `Some(value)` once there is one.
pub trait Settled {
    type Value;
    fn settled(self) -> Option<Self::Value>;
}

impl Settled for bool {
    type Value = ();
    fn settled(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Settled for Option<T> {
    type Value = T;
    fn settled(self) -> Option<T> {
        self
    }
}

/// Ask `check` until it answers `true` (or `Some(value)`, which is returned), within [`WAIT`];
/// the test fails with "timed out: {what}" otherwise. For state that can only be polled (a
/// metric, `/readyz`, the demo's `cancellations` list), never for events a stream delivers.
pub async fn eventually<S: Settled, F: Future<Output = S>>(
    what: &str,
    check: impl FnMut() -> F,
) -> S::Value {
    eventually_within(WAIT, what, check).await
}

/// [`eventually`] with another bound, for the rare wait that is longer by nature (a thousand
/// readers opening on a two-core machine).
pub async fn eventually_within<S: Settled, F: Future<Output = S>>(
    bound: Duration,
    what: &str,
    mut check: impl FnMut() -> F,
) -> S::Value {
    let poll = async {
        loop {
            if let Some(value) = check().await.settled() {
                return value;
            }
            tokio::time::sleep(POLL).await;
        }
    };
    tokio::time::timeout(bound, poll)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}
