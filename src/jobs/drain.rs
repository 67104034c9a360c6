//! The drain: from the first shutdown signal no new job starts in this replica (a call is told
//! to try again, another replica will take it), while the jobs running here go on. It ends when
//! the last of them has ended, when `jobs.drain_secs` has passed, or when a second signal cuts
//! it short; the jobs still running then are cancelled, each with a `cancelled` event whose
//! reason says which. Timing and order: docs/design/shutdown.md.

use std::{
    future::Future,
    sync::atomic::{AtomicBool, Ordering},
};

use prometheus::{IntCounter, IntGauge};

/// The `reason` of the `cancelled` event of a job still running when `jobs.drain_secs` passed.
pub const DRAIN_TIME_PASSED: &str =
    "the bridge is shutting down: its drain time (jobs.drain_secs) passed before the job ended";
/// The `reason` of the `cancelled` event of a job still running when a second signal came.
pub const DRAIN_CUT_SHORT: &str =
    "the bridge is shutting down: a second SIGTERM/SIGINT cut its drain short";

/// Whether this replica drains, and its two metrics: `bridge_draining` (0, then 1 for good)
/// and `bridge_calls_refused_draining_total`.
pub(super) struct DrainState {
    on: AtomicBool,
    gauge: IntGauge,
    refused: IntCounter,
}

impl DrainState {
    pub(super) fn new(gauge: IntGauge, refused: IntCounter) -> Self {
        Self {
            on: AtomicBool::new(false),
            gauge,
            refused,
        }
    }

    /// From now on no new job starts. There is no way back: a drain ends with the process.
    pub(super) fn begin(&self) {
        self.on.store(true, Ordering::Release);
        self.gauge.set(1);
    }

    pub(super) fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// A call that would have started a job was refused.
    pub(super) fn refused(&self) {
        self.refused.inc();
    }
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainEnd {
    /// Every job running here ended by itself.
    Emptied,
    /// `jobs.drain_secs` passed with jobs still running.
    TimePassed,
    /// A second signal came with jobs still running.
    CutShort,
}

impl DrainEnd {
    /// The reason the jobs left are cancelled with (none left: none).
    pub fn cancel_reason(self) -> Option<&'static str> {
        match self {
            DrainEnd::Emptied => None,
            DrainEnd::TimePassed => Some(DRAIN_TIME_PASSED),
            DrainEnd::CutShort => Some(DRAIN_CUT_SHORT),
        }
    }

    /// Whether a job's cancel `reason` is a drain's: the job did not end, the replica did.
    pub fn cancelled_by_drain(reason: &str) -> bool {
        reason == DRAIN_TIME_PASSED || reason == DRAIN_CUT_SHORT
    }
}

/// Wait for the drain to end: `emptied` says whether the jobs all ended within the drain time,
/// `cut_short` resolves on a second signal.
pub(super) async fn ending(
    emptied: impl Future<Output = bool>,
    cut_short: impl Future<Output = ()>,
) -> DrainEnd {
    tokio::select! {
        emptied = emptied => if emptied { DrainEnd::Emptied } else { DrainEnd::TimePassed },
        () = cut_short => DrainEnd::CutShort,
    }
}
