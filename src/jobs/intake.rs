//! Where an upstream's reports about a running job enter: checked, bounded, queued in order.
//!
//! Called synchronously from the upstream connection's read path, so it only takes a short
//! lock and wakes the job's runner, which does the (possibly slow) store writes.

use std::{collections::VecDeque, sync::Arc, time::Instant};

use parking_lot::{Mutex, MutexGuard};
use serde_json::Value;
use tokio::sync::Notify;

use crate::{
    metrics::Metrics,
    model::{EventBody, ProgressUpdate, Reattach},
};

/// Events waiting for the runner. Past this, consecutive progress is merged into the newest
/// and log lines are dropped (counted), so an upstream that floods cannot grow memory.
const MAX_QUEUED: usize = 256;
/// Longest progress message kept, in bytes; longer ones are cut with an ellipsis.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// Largest log payload kept, in bytes of JSON; a larger one is replaced by its cut text.
pub const MAX_LOG_BYTES: usize = 16 * 1024;

pub struct Intake {
    upstream: String,
    state: Mutex<State>,
    pub(super) wake: Notify,
    metrics: Arc<Metrics>,
}

/// A report as queued: what the upstream said, and when it reached the bridge (where the
/// delivery lag counts from).
pub(super) struct Report {
    pub body: EventBody,
    pub received: Instant,
}

#[derive(Default)]
struct State {
    last_progress: Option<f64>,
    closed: bool,
    queue: VecDeque<Report>,
    /// How another replica can re-attach to the call, as it now stands.
    reattach: Option<Reattach>,
    /// Bumped at each change of `reattach` (the runner keeps the version it wrote).
    reattach_version: u64,
}

impl Intake {
    pub(super) fn new(upstream: String, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            upstream,
            state: Mutex::default(),
            wake: Notify::new(),
            metrics,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    fn dropped(&self, reason: &str) {
        self.metrics
            .progress_dropped
            .with_label_values(&[reason])
            .inc();
    }

    /// A progress notification from the upstream. MCP requires progress to increase with
    /// every notification; one that does not, or is not a finite non-negative number, is
    /// dropped and counted. `total` is kept only when it is a finite positive number.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if !progress.is_finite() || progress < 0.0 {
            self.dropped("invalid");
            tracing::debug!(upstream = %self.upstream, progress, "progress is not a finite non-negative number: dropped");
            return;
        }
        let total = total.filter(|t| t.is_finite() && *t > 0.0);
        let message = message.map(|m| truncate(m, MAX_MESSAGE_BYTES));
        let update = ProgressUpdate {
            progress,
            total,
            message,
        };
        {
            let mut state = self.lock();
            if state.closed {
                drop(state);
                self.dropped("after_end");
                return;
            }
            if state.last_progress.is_some_and(|last| progress <= last) {
                drop(state);
                self.dropped("non_increasing");
                return;
            }
            state.last_progress = Some(progress);
            let full = state.queue.len() >= MAX_QUEUED;
            let received = Instant::now();
            match state.queue.back_mut() {
                Some(Report {
                    body: EventBody::Progress(newest),
                    received: when,
                }) if full => {
                    (*newest, *when) = (update, received);
                    drop(state);
                    self.dropped("coalesced");
                }
                _ => state.queue.push_back(Report {
                    body: EventBody::Progress(update),
                    received,
                }),
            }
        }
        self.wake.notify_one();
    }

    /// A `notifications/message` attributed to this job.
    pub fn log(&self, level: String, logger: Option<String>, data: Value) {
        let data = bound_log(data);
        {
            let mut state = self.lock();
            if state.closed || state.queue.len() >= MAX_QUEUED {
                drop(state);
                self.metrics
                    .log_dropped
                    .with_label_values(&["overflow"])
                    .inc();
                return;
            }
            state.queue.push_back(Report {
                body: EventBody::Log {
                    level,
                    logger,
                    data,
                },
                received: Instant::now(),
            });
        }
        self.wake.notify_one();
    }

    /// The call became an upstream task another replica can re-attach to: the runner keeps
    /// the record in the store before the reports that follow it.
    pub fn reattach(&self, record: Reattach) {
        {
            let mut state = self.lock();
            if state.closed {
                return;
            }
            state.reattach = Some(record);
            state.reattach_version += 1;
        }
        self.wake.notify_one();
    }

    /// The call's resumable stream reached event `event_id`, after the report it carried was
    /// queued: the record's cursor moves there (the runner keeps it once that report is
    /// written). Bounded by the upstream's `max_event_id_bytes` check.
    pub fn stream_cursor(&self, event_id: &str) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        if let Some(cursor) = state.reattach.as_mut().and_then(|r| r.stream.as_mut())
            && cursor.last_event_id != event_id
        {
            cursor.last_event_id.clear();
            cursor.last_event_id.push_str(event_id);
            state.reattach_version += 1;
        }
    }

    /// An adopted job's intake: progress up to `progress` is the job's already (a resumed
    /// stream replays from a cursor that may be behind it), so it is dropped as not
    /// increasing.
    pub(super) fn resume_after(&self, progress: Option<f64>) {
        self.lock().last_progress = progress;
    }

    /// The re-attach record and its version, if it changed since version `kept`. A stream's
    /// cursor names only reports queued before this call.
    pub(super) fn reattach_since(&self, kept: u64) -> Option<(Reattach, u64)> {
        let state = self.lock();
        if state.reattach_version == kept {
            return None;
        }
        Some((state.reattach.clone()?, state.reattach_version))
    }

    /// Everything queued so far, oldest first.
    #[cfg(test)]
    pub(super) fn take(&self) -> VecDeque<EventBody> {
        let queue = std::mem::take(&mut self.lock().queue);
        queue.into_iter().map(|report| report.body).collect()
    }

    /// Swap everything queued so far into `out` (which must be empty), oldest first. The two
    /// buffers trade places and both keep their capacity, so a steady stream of reports
    /// allocates no queue at all (a fresh `VecDeque` per drain showed in the ingest profile).
    pub(super) fn take_into(&self, out: &mut VecDeque<Report>) {
        debug_assert!(out.is_empty());
        std::mem::swap(&mut self.lock().queue, out);
    }

    /// The call is over (answered or cancelled): later reports are dropped.
    pub(super) fn close(&self) {
        self.lock().closed = true;
    }
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let cut = text.floor_char_boundary(max);
        text.truncate(cut);
        text.push('…');
    }
    text
}

fn bound_log(data: Value) -> Value {
    let size = serde_json::to_vec(&data)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size <= MAX_LOG_BYTES {
        return data;
    }
    let text = match data {
        Value::String(s) => s,
        other => other.to_string(),
    };
    Value::String(truncate(text, MAX_LOG_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intake() -> Arc<Intake> {
        Intake::new("t".into(), Arc::new(Metrics::new()))
    }

    fn stream_record(cursor: &str) -> Reattach {
        Reattach {
            upstream: "u".into(),
            session_id: Some("s".into()),
            protocol: None,
            task_id: String::new(),
            stream: Some(crate::model::StreamCursor {
                request_id: Value::from(1),
                last_event_id: cursor.into(),
                progress_token: None,
            }),
        }
    }

    #[test]
    fn a_stream_cursor_moves_the_record_and_each_change_is_taken_once() {
        let i = intake();
        assert!(i.reattach_since(0).is_none());
        // No record yet: a cursor alone is not kept.
        i.stream_cursor("3");
        assert!(i.reattach_since(0).is_none());
        i.reattach(stream_record("4"));
        let (record, version) = i.reattach_since(0).unwrap();
        assert_eq!(record.stream.unwrap().last_event_id, "4");
        assert!(i.reattach_since(version).is_none());
        i.stream_cursor("4");
        assert!(
            i.reattach_since(version).is_none(),
            "the same id is no change"
        );
        i.stream_cursor("9");
        let (record, _) = i.reattach_since(version).unwrap();
        assert_eq!(record.stream.unwrap().last_event_id, "9");
    }

    #[test]
    fn an_adopted_intake_drops_replayed_progress() {
        let i = intake();
        i.resume_after(Some(5.0));
        for p in [4.0, 5.0, 6.0] {
            i.progress(p, None, None);
        }
        assert_eq!(progress_values(&i), vec![6.0]);
    }

    fn progress_values(i: &Intake) -> Vec<f64> {
        i.take()
            .into_iter()
            .filter_map(|b| match b {
                EventBody::Progress(p) => Some(p.progress),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn keeps_only_increasing_finite_progress() {
        let i = intake();
        for p in [1.0, 1.0, 0.5, f64::NAN, f64::INFINITY, -1.0, 2.5, 3.0] {
            i.progress(p, None, None);
        }
        assert_eq!(progress_values(&i), vec![1.0, 2.5, 3.0]);
    }

    #[test]
    fn drops_everything_after_close() {
        let i = intake();
        i.progress(1.0, None, None);
        i.close();
        i.progress(2.0, None, None);
        i.log("info".into(), None, Value::Null);
        assert_eq!(i.take().len(), 1);
    }

    #[test]
    fn a_flood_is_bounded_and_keeps_the_newest() {
        let i = intake();
        for p in 1..=10_000 {
            i.progress(p as f64, Some(10_000.0), None);
        }
        let values = progress_values(&i);
        assert_eq!(values.len(), MAX_QUEUED);
        assert_eq!(values.last(), Some(&10_000.0));
    }

    #[test]
    fn cuts_long_messages_and_rejects_bad_totals() {
        let i = intake();
        i.progress(1.0, Some(f64::NAN), Some("é".repeat(MAX_MESSAGE_BYTES)));
        let EventBody::Progress(p) = i.take().pop_front().unwrap() else {
            panic!()
        };
        assert_eq!(p.total, None);
        let m = p.message.unwrap();
        assert!(m.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8() && m.ends_with('…'));
    }
}
