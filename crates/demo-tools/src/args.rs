//! Tool arguments: their JSON schemas, defaults and bounds.
//!
//! Every numeric argument has a default (so `{}` is a valid call for every
//! tool but `echo`) and an inclusive range. The schema advertises the range so
//! a model can read it; [`check`] enforces it, because a schema is advice, not
//! validation: a caller may send anything.

use std::{fmt::Display, ops::RangeInclusive};

use rmcp::{
    handler::server::tool::IntoCallToolResult,
    model::{CallToolResponse, CallToolResult, ContentBlock},
};
use schemars::JsonSchema;
use serde::Deserialize;

/// How far a counting tool may count. Large enough for any demo, small enough
/// that a typo cannot keep a server busy (or flood a bridge) for days.
pub const STEPS: RangeInclusive<u32> = 1..=100_000;
/// How long a tool may sleep between steps, in milliseconds (one minute).
pub const DELAY_MS: RangeInclusive<u64> = 0..=60_000;
/// How long `ignore_cancel` may run, in seconds (ten minutes).
pub const SECONDS: RangeInclusive<u64> = 0..=600;
/// How many back-to-back notifications `instant_progress` may send. Lower than
/// [`STEPS`]: these go out with no delay at all.
pub const BURST: RangeInclusive<u32> = 1..=10_000;
/// The largest `echo` result, in bytes (256 MiB): big enough to pass any bridge limit.
pub const ECHO_BYTES: usize = 256 * 1024 * 1024;
/// `bench_progress`: time between notifications, in microseconds (one minute).
pub const INTERVAL_US: RangeInclusive<u64> = 0..=60_000_000;

/// A tool argument outside its valid range.
///
/// Returned to the caller as a tool error (`isError: true`), not a protocol
/// error: the MCP spec wants input mistakes in the result, where a model can
/// read them and correct its call.
#[derive(Debug, thiserror::Error)]
#[error(
    "argument `{name}` is {value}, but it must be between {min} and {max} (inclusive); fix it and call again"
)]
pub struct ArgumentError {
    name: &'static str,
    value: String,
    min: String,
    max: String,
}

impl IntoCallToolResult for ArgumentError {
    fn into_call_tool_result(self) -> Result<CallToolResponse, rmcp::ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(self.to_string())]).into())
    }
}

impl ArgumentError {
    /// The error as a JSON-RPC invalid-params error, for a tool that answers with those.
    pub fn into_rpc(self) -> rmcp::ErrorData {
        rmcp::ErrorData::invalid_params(self.to_string(), None)
    }
}

/// Returns `value` if `range` holds it, else an error naming the argument and
/// the valid range.
pub fn check<T>(name: &'static str, value: T, range: RangeInclusive<T>) -> Result<T, ArgumentError>
where
    T: PartialOrd + Display,
{
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(ArgumentError {
            name,
            value: value.to_string(),
            min: range.start().to_string(),
            max: range.end().to_string(),
        })
    }
}

/// Arguments of `slow_count`: by default ten steps of half a second, long
/// enough to watch and to cancel.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SlowCountArgs {
    /// Count from 1 up to this number (1 to 100000); one progress notification per step.
    #[serde(default = "ten")]
    #[schemars(range(min = 1, max = 100_000))]
    pub to: u32,
    /// Milliseconds to wait before each step (0 to 60000).
    #[serde(default = "five_hundred")]
    #[schemars(range(min = 0, max = 60_000))]
    pub delay_ms: u64,
}

/// Arguments of `log_and_count`: a short run by default.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LogAndCountArgs {
    /// Count from 1 up to this number (1 to 100000); one log message and one progress notification per step.
    #[serde(default = "three")]
    #[schemars(range(min = 1, max = 100_000))]
    pub to: u32,
    /// Milliseconds to wait before each step (0 to 60000).
    #[serde(default = "one_hundred")]
    #[schemars(range(min = 0, max = 60_000))]
    pub delay_ms: u64,
    /// After answering, send one more log line ("after the answer") this many milliseconds
    /// later (0 to 60000; 0, the default: none), as a server that logs late would.
    #[serde(default)]
    #[schemars(range(min = 0, max = 60_000))]
    pub late_log_ms: u64,
}

/// Arguments of `slow_count_no_total`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NoTotalArgs {
    /// Count from 1 up to this number (1 to 100000); progress is sent without a total.
    #[serde(default = "five")]
    #[schemars(range(min = 1, max = 100_000))]
    pub to: u32,
    /// Milliseconds to wait before each step (0 to 60000).
    #[serde(default = "one_hundred")]
    #[schemars(range(min = 0, max = 60_000))]
    pub delay_ms: u64,
}

/// Arguments of `instant_progress`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct InstantProgressArgs {
    /// How many progress notifications to send back-to-back (1 to 10000).
    #[serde(default = "five")]
    #[schemars(range(min = 1, max = 10_000))]
    pub steps: u32,
}

/// Arguments of `bench_progress`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BenchProgressArgs {
    /// How many progress notifications to send (1 to 100000).
    #[serde(default = "ten")]
    #[schemars(range(min = 1, max = 100_000))]
    pub count: u32,
    /// Microseconds between notifications, on a fixed schedule (0 to 60000000; 0: back-to-back).
    #[serde(default)]
    #[schemars(range(min = 0, max = 60_000_000))]
    pub interval_us: u64,
    /// Milliseconds to wait before the first notification (0 to 60000).
    #[serde(default)]
    #[schemars(range(min = 0, max = 60_000))]
    pub delay_ms: u64,
    /// Pad the result text with `x` up to this many bytes (0 to 268435456; 0: no padding),
    /// for a large result after many progress events.
    #[serde(default)]
    #[schemars(range(min = 0, max = 268_435_456))]
    pub result_bytes: u64,
}

/// Arguments of `fail_after`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FailAfterArgs {
    /// How many steps to report before failing (1 to 100000).
    #[serde(default = "three")]
    #[schemars(range(min = 1, max = 100_000))]
    pub steps: u32,
    /// Milliseconds to wait before each step (0 to 60000).
    #[serde(default = "one_hundred")]
    #[schemars(range(min = 0, max = 60_000))]
    pub delay_ms: u64,
}

/// Arguments of `sample`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SampleArgs {
    /// What to ask the client's model.
    #[serde(default = "say_hello")]
    pub prompt: String,
}

fn say_hello() -> String {
    "Say hello.".into()
}

/// Arguments of `ask_in_rounds`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RoundsArgs {
    /// Rounds of questions (1 to 20), one `input_required` answer each.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 20))]
    pub rounds: u32,
    /// Questions in each round (1 to 100).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 100))]
    pub per_round: u32,
    /// Also ask the client's model (sampling/createMessage) in the first round.
    #[serde(default)]
    pub sample: bool,
    /// Also ask for the client's roots (roots/list) in the first round.
    #[serde(default)]
    pub roots: bool,
    /// Ask again after every answer, never finishing (for testing a client's bound on rounds).
    #[serde(default)]
    pub forever: bool,
    /// Bytes of padding added to `requestState` (0 to 1048576), for testing a client's bound.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1_048_576))]
    pub state_padding: usize,
}

/// Arguments of `ask`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AskArgs {
    /// The question to ask the person behind the client.
    #[serde(default = "what_is_your_name")]
    pub question: String,
    /// How many times to ask it, one after the other (default 1, at most 100).
    #[serde(default = "once")]
    pub times: u32,
    /// Wait this long (ms, at most 60,000) before the first question, deaf to a cancel
    /// meanwhile and while it is sent: a server that notices `notifications/cancelled` late,
    /// so its question arrives after its call was cancelled.
    #[serde(default)]
    pub deaf_ms: u64,
}

fn once() -> u32 {
    1
}

fn what_is_your_name() -> String {
    "What is your name?".into()
}

/// Arguments of `echo`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EchoArgs {
    /// The text to send back unchanged.
    pub text: String,
    /// Send the text back this many times over, joined (default 1; at most 256 MiB in all):
    /// a result as large as a test needs.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 268_435_456))]
    pub repeat: u32,
}

/// Arguments of `ignore_cancel`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct IgnoreCancelArgs {
    /// How many seconds to run, cancelled or not (0 to 600).
    #[serde(default = "three_u64")]
    #[schemars(range(min = 0, max = 600))]
    pub seconds: u64,
}

/// Arguments of `crash`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CrashArgs {
    /// Milliseconds between the one progress notification and the process exit (0 to 60000).
    #[serde(default = "two_hundred")]
    #[schemars(range(min = 0, max = 60_000))]
    pub after_ms: u64,
}

// serde's `default = "..."` wants a function path; these are the defaults the
// tool descriptions promise.
fn one() -> u32 {
    1
}
fn three() -> u32 {
    3
}
fn five() -> u32 {
    5
}
fn ten() -> u32 {
    10
}
fn three_u64() -> u64 {
    3
}
fn one_hundred() -> u64 {
    100
}
fn two_hundred() -> u64 {
    200
}
fn five_hundred() -> u64 {
    500
}
