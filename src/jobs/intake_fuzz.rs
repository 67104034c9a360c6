//! Property tests of progress notification handling: whatever an upstream sends as a
//! `notifications/progress` (any JSON at all), rmcp's parsing plus the [`Intake`] never panic,
//! and what reaches the job's log is strictly increasing, finite and non-negative, with a
//! finite positive total or none, a bounded message, and a bounded queue.
//!
//! Default 256 cases; longer: `PROPTEST_CASES=100000 cargo test --release --lib intake_fuzz`.

use std::sync::Arc;

use proptest::prelude::*;
use rmcp::model::{ServerJsonRpcMessage, ServerNotification};
use serde_json::{Value, json};

use super::runner::{Intake, MAX_MESSAGE_BYTES};
use crate::{metrics::Metrics, model::EventBody};

/// Numbers of every awkward kind, and things that are not numbers.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        Just(json!(1e308)),
        Just(json!(-0.0)),
        Just(json!("5")),
        Just(Value::Null),
        Just(json!([1])),
        Just(json!({"n": 1})),
    ]
}

fn token() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(7)),
        Just(json!("7")),
        Just(json!(1.5)),
        Just(json!(true)),
        Just(Value::Null),
        Just(json!({"t": 7})),
    ]
}

fn notification() -> impl Strategy<Value = Value> {
    (
        token(),
        prop::option::of(number()),
        prop::option::of(number()),
        prop::option::of(prop_oneof![
            "\\PC{0,64}".prop_map(Value::from),
            (0usize..3_000).prop_map(|n| Value::from("é".repeat(n))),
            Just(json!(42)),
        ]),
    )
        .prop_map(|(token, progress, total, message)| {
            let mut params = serde_json::Map::new();
            params.insert("progressToken".into(), token);
            if let Some(p) = progress {
                params.insert("progress".into(), p);
            }
            if let Some(t) = total {
                params.insert("total".into(), t);
            }
            if let Some(m) = message {
                params.insert("message".into(), m);
            }
            json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        })
}

proptest! {
    #[test]
    fn whatever_arrives_only_sane_increasing_progress_is_kept(messages in prop::collection::vec(notification(), 0..100)) {
        let intake = Intake::new("fuzz".into(), Arc::new(Metrics::new()));
        for message in &messages {
            let text = serde_json::to_string(message).unwrap();
            // What rmcp's reader does with the line; a line it cannot parse never reaches us.
            let Ok(parsed) = serde_json::from_str::<ServerJsonRpcMessage>(&text) else {
                continue;
            };
            if let ServerJsonRpcMessage::Notification(n) = parsed
                && let ServerNotification::ProgressNotification(p) = n.notification
            {
                intake.progress(p.params.progress, p.params.total, p.params.message);
            }
        }
        let queued = intake.take();
        prop_assert!(queued.len() <= 256);
        let mut last = f64::NEG_INFINITY;
        for body in queued {
            let EventBody::Progress(update) = body else {
                return Err(TestCaseError::fail("only progress was sent"));
            };
            prop_assert!(update.progress.is_finite() && update.progress >= 0.0);
            prop_assert!(update.progress > last, "{} after {}", update.progress, last);
            last = update.progress;
            if let Some(total) = update.total {
                prop_assert!(total.is_finite() && total > 0.0);
            }
            if let Some(message) = update.message {
                prop_assert!(message.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
            }
        }
    }
}
