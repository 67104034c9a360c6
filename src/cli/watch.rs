//! `mcp-progress-bridge watch <events_url>`: follow a job's event stream until its terminal
//! event, with a progress bar, then print the result. A dropped connection is resumed with
//! `Last-Event-ID` (reqwest-eventsource sends it), so no step is lost or shown twice. A
//! question the job's tool asks (`input_required`) is printed with how to answer it: the
//! `curl` for the handle's `input_url` (given with `--input-url`, or by `call`), the jobs page,
//! or the MCP tool `answer_job_input`.

use std::{process::ExitCode, time::Duration};

use futures::StreamExt;
use reqwest_eventsource::{Error as SseError, Event, EventSource, retry::RetryPolicy};
use serde_json::Value;

use super::{
    CliError, EXIT_CANNOT_FOLLOW, Outcome,
    display::{Display, Shown},
    result_text,
};

/// Consecutive failed reconnections (no stream opened in between) before `watch` gives up:
/// about a minute at the bridge's 2 s reconnection time.
const MAX_RECONNECT_FAILURES: u32 = 30;
/// Reconnection delay until the stream names its own (`retry:`).
const DEFAULT_RECONNECT: Duration = Duration::from_secs(1);

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The job's events_url, exactly as the job handle gave it (keep any ?token=).
    #[arg(value_name = "EVENTS_URL")]
    pub events_url: String,
    /// The job's input_url from the same handle: printed in the command that answers a
    /// question the tool asks.
    #[arg(long, value_name = "INPUT_URL")]
    pub input_url: Option<String>,
}

/// Run the command: the outcome's exit code (0, 1, 130), or 2 when the job cannot be followed.
pub async fn run(args: WatchArgs) -> ExitCode {
    match watch(&args.events_url, args.input_url.as_deref()).await {
        Ok(outcome) => {
            report(&outcome);
            outcome.exit_code()
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_CANNOT_FOLLOW)
        }
    }
}

/// Print how the job ended: the result on stdout, failures and cancellations on stderr.
pub fn report(outcome: &Outcome) {
    match outcome {
        Outcome::Completed(data) => println!("{}", result_text(&data["result"])),
        Outcome::Failed(data) => {
            let reason = data["reason"].as_str().unwrap_or("failed");
            let message = data["message"].as_str().unwrap_or("the job failed");
            eprintln!("failed ({reason}): {message}");
            if data["result"].is_object() {
                println!("{}", result_text(&data["result"]));
            }
        }
        Outcome::Cancelled(data) => {
            let reason = data["reason"].as_str().unwrap_or("no reason given");
            eprintln!("cancelled: {reason}");
        }
    }
}

/// Reconnect at the stream's own `retry:` interval, without growing it: the bridge is either
/// back or not, and `watch` counts the failures itself (reqwest-eventsource's retry counter
/// does not advance). HTTP errors and non-SSE answers end the source before this is asked.
struct Reconnect(Duration);

impl RetryPolicy for Reconnect {
    fn retry(&self, _error: &SseError, _last: Option<(usize, Duration)>) -> Option<Duration> {
        Some(self.0)
    }

    fn set_reconnection_time(&mut self, duration: Duration) {
        self.0 = duration;
    }
}

/// Follow `events_url` to the job's terminal event; `input_url` goes into the answer command
/// printed with a question.
pub async fn watch(events_url: &str, input_url: Option<&str>) -> Result<Outcome, CliError> {
    let url = reqwest::Url::parse(events_url).map_err(|e| {
        CliError::Usage(format!(
            "{events_url:?} is not a URL ({e}): pass the events_url from a job handle, e.g. http://127.0.0.1:8080/jobs/<job_id>/events"
        ))
    })?;
    let request = reqwest::Client::new()
        .get(url)
        .header("accept", "text/event-stream");
    let mut source = EventSource::new(request)
        .map_err(|e| CliError::Usage(format!("cannot build the request: {e}")))?;
    source.set_retry_policy(Box::new(Reconnect(DEFAULT_RECONNECT)));

    let display = Display::for_stderr();
    let answering = Answering {
        input_url: input_url.map(str::to_string),
        page: page_url(events_url),
    };
    let outcome = follow(&mut source, &display, events_url, answering).await;
    display.finish();
    source.close();
    outcome
}

async fn follow(
    source: &mut EventSource,
    display: &Display,
    events_url: &str,
    answering: Answering,
) -> Result<Outcome, CliError> {
    let mut job = JobView {
        answering,
        ..JobView::default()
    };
    let mut failures = 0u32;
    let mut opened_once = false;
    while let Some(item) = source.next().await {
        match item {
            Ok(Event::Open) => {
                if failures > 0 || opened_once {
                    display.note(&format!(
                        "reconnected; resuming after event {}",
                        job.last.map_or("(none)".into(), |s| s.to_string())
                    ));
                }
                opened_once = true;
                failures = 0;
            }
            Ok(Event::Message(message)) => {
                let seq = message.id.parse::<u64>().ok();
                let data: Value = serde_json::from_str(&message.data).unwrap_or(Value::Null);
                if let Some(outcome) = job.apply(&message.event, seq, data, display) {
                    return Ok(outcome);
                }
            }
            Err(SseError::InvalidStatusCode(status, response)) => {
                return Err(refused(events_url, status, response).await);
            }
            Err(SseError::InvalidContentType(value, _)) => {
                return Err(CliError::Stream(format!(
                    "{events_url} is not an event stream (Content-Type {value:?}): pass a job's events_url"
                )));
            }
            Err(error) => {
                // Dropped, refused, or ended without a terminal event: reconnect (with
                // Last-Event-ID) unless it keeps failing.
                failures += 1;
                if failures > MAX_RECONNECT_FAILURES {
                    return Err(CliError::Stream(format!(
                        "lost the event stream at {events_url} and could not get it back ({error}); run watch again to resume"
                    )));
                }
                if failures == 1 {
                    display.note(&format!("connection lost ({error}); reconnecting…"));
                }
            }
        }
    }
    Err(CliError::Stream(format!(
        "the event stream at {events_url} closed without saying how the job ended"
    )))
}

/// The bridge answered the stream's request with an error status: say what it means, with
/// the bridge's own message.
async fn refused(
    events_url: &str,
    status: reqwest::StatusCode,
    response: reqwest::Response,
) -> CliError {
    let body = response.text().await.unwrap_or_default();
    let detail = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or(body);
    let hint = match status.as_u16() {
        404 if token_expired(events_url) => {
            "the URL's token has expired (auth.job_token_ttl_secs): get a fresh one with \
             `mcp-progress-bridge token job ID --url`, or open the job with a bearer token"
        }
        404 => "the job is unknown or expired, or the URL's token is wrong",
        400 => "the bridge refused the request",
        _ => "the bridge answered with an error",
    };
    CliError::Stream(format!(
        "{events_url}: HTTP {status}: {hint} ({})",
        detail.trim()
    ))
}

/// Whether the URL's `?token=` says it expired. The bridge answers an expired token exactly as
/// a wrong one (no oracle), but the token's own expiry is readable here, where it helps.
fn token_expired(events_url: &str) -> bool {
    let Ok(url) = url::Url::parse(events_url) else {
        return false;
    };
    let Some((_, token)) = url.query_pairs().find(|(k, _)| k == "token") else {
        return false;
    };
    let now = crate::model::now_ms() / 1000;
    crate::auth::claimed_expiry(&token).is_some_and(|expires| expires <= now)
}

/// What `watch` knows about the job, folded from its events.
#[derive(Debug, Default)]
struct JobView {
    /// The id of the last stored event applied: replays at or before it are skipped.
    last: Option<u64>,
    /// The job's `seq` in the latest snapshot (`status` or `reset`): events up to it are
    /// history the stream replays, so their timestamps say nothing of the time left now.
    history_end: Option<u64>,
    created_at: Option<u64>,
    shown: Shown,
    answering: Answering,
    /// The questions already printed (a snapshot and a replayed event may both carry one).
    asked: std::collections::HashSet<String>,
}

/// Where a question can be answered.
#[derive(Debug, Default)]
struct Answering {
    input_url: Option<String>,
    /// The jobs page of the bridge the events URL is on.
    page: Option<String>,
}

/// The jobs page (`/`) of the bridge that serves `events_url`.
fn page_url(events_url: &str) -> Option<String> {
    let mut url = reqwest::Url::parse(events_url).ok()?;
    url.set_path("/");
    url.set_query(None);
    Some(url.to_string())
}

impl JobView {
    /// Apply one event; `Some` when it ended the job.
    fn apply(
        &mut self,
        kind: &str,
        seq: Option<u64>,
        data: Value,
        display: &Display,
    ) -> Option<Outcome> {
        let duplicate = matches!((seq, self.last), (Some(s), Some(l)) if s <= l);
        if duplicate && matches!(kind, "progress" | "log") {
            return None;
        }
        if kind != "heartbeat"
            && let Some(seq) = seq
        {
            self.last = Some(seq);
        }
        match kind {
            "status" | "reset" => {
                self.restart(kind == "reset", &data, display);
                None
            }
            "progress" => {
                self.progress(seq, &data, display);
                None
            }
            "log" => {
                let level = data["level"].as_str().unwrap_or("info");
                let text = match &data["data"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                display.note(&format!("log {level}: {text}"));
                None
            }
            "heartbeat" => {
                if let Some(quiet) = data["since_progress_ms"].as_u64() {
                    display.note(&format!(
                        "still running, no progress for {}",
                        super::display::duration(quiet)
                    ));
                }
                None
            }
            "input_required" => {
                self.ask(&data, display);
                None
            }
            "input_answered" => {
                let key = data["key"].as_str().unwrap_or("?");
                let action = data["action"].as_str().unwrap_or("?");
                let by = data["by"].as_str().unwrap_or("?");
                display.note(&format!("question {key} answered: {action} (by {by})"));
                None
            }
            "completed" => Some(Outcome::Completed(data)),
            "failed" => Some(Outcome::Failed(data)),
            "cancelled" => Some(Outcome::Cancelled(data)),
            _ => None,
        }
    }
}

impl JobView {
    /// A `status` (the stream's first event) or `reset` (history lost the gap): start over
    /// from the snapshot it carries.
    fn restart(&mut self, reset: bool, data: &Value, display: &Display) {
        self.created_at = data["created_at"].as_u64();
        self.history_end = data["seq"].as_u64();
        self.shown = Shown {
            progress: data["progress"].as_f64(),
            total: data["total"].as_f64(),
            message: data["message"].as_str().map(str::to_string),
            eta_ms: data["eta_ms"].as_u64(),
        };
        if reset {
            display.note("history no longer covers the gap: resumed from the current state");
        }
        display.snapshot(data["status"].as_str().unwrap_or("running"), &self.shown);
        for question in data["input_requests"].as_array().into_iter().flatten() {
            self.ask(question, display);
        }
    }

    /// Print a question the tool asks, its fields, and how to answer it.
    fn ask(&mut self, question: &Value, display: &Display) {
        let key = question["key"].as_str().unwrap_or_default();
        if !self.asked.insert(key.to_string()) {
            return;
        }
        let message = question["message"].as_str().unwrap_or("(no message)");
        let mut text = format!("the tool asks (question {key}): {message}");
        let schema = &question["requested_schema"];
        let required: Vec<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut example = serde_json::Map::new();
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            let kind = property["type"].as_str().unwrap_or("string");
            let mut line = format!("\n  field {name}: {kind}");
            if required.contains(&name.as_str()) {
                line.push_str(", required");
            }
            if let Some(allowed) = property["enum"].as_array() {
                line.push_str(&format!(", one of {}", Value::Array(allowed.clone())));
            }
            if let Some(description) = property["description"].as_str() {
                line.push_str(&format!(" ({description})"));
            }
            text.push_str(&line);
            let value = match (property["enum"].get(0), kind) {
                (Some(first), _) => first.clone(),
                (None, "number" | "integer") => Value::from(0),
                (None, "boolean") => Value::Bool(true),
                _ => Value::from("…"),
            };
            example.insert(name.clone(), value);
        }
        let body = serde_json::json!({"action": "accept", "content": example, "key": key});
        let url = self
            .answering
            .input_url
            .as_deref()
            .unwrap_or("<the input_url of the job handle>");
        text.push_str(&format!(
            "\nanswer it (unanswered, it is declined after the bridge's jobs.input_timeout_secs):\n  \
             curl -X POST -H 'Content-Type: application/json' -d '{body}' '{url}'\n  \
             (or {{\"action\": \"decline\"}} / {{\"action\": \"cancel\"}})"
        ));
        if let Some(page) = &self.answering.page {
            text.push_str(&format!(
                "\n  or on the jobs page {page} (follow the job there), or with the MCP tool \
                 answer_job_input"
            ));
        }
        display.note(&text);
    }

    fn progress(&mut self, seq: Option<u64>, data: &Value, display: &Display) {
        let progress = data["progress"].as_f64();
        let total = data["total"].as_f64();
        self.shown.progress = progress;
        self.shown.total = total;
        if let Some(message) = data["message"].as_str() {
            self.shown.message = Some(message.to_string());
        }
        // A replayed step's ETA was the time left back then: on a finished job it would
        // count down for a job that is over. Only live steps estimate.
        let replayed = matches!((seq, self.history_end), (Some(s), Some(end)) if s <= end);
        self.shown.eta_ms = if replayed {
            None
        } else {
            eta(self.created_at, data["ts"].as_u64(), progress, total)
        };
        display.show(&self.shown);
    }
}

/// Time left at the job's average rate so far, from the bridge's own timestamps.
fn eta(
    start: Option<u64>,
    now: Option<u64>,
    progress: Option<f64>,
    total: Option<f64>,
) -> Option<u64> {
    let (start, now, progress, total) = (start?, now?, progress?, total?);
    if progress <= 0.0 || progress >= total || now <= start {
        return None;
    }
    let eta = (now - start) as f64 * (total - progress) / progress;
    eta.is_finite().then(|| eta.round() as u64)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn replayed_events_are_skipped_and_terminal_events_end_the_watch() {
        let display = Display::Lines;
        let mut job = JobView::default();
        let status = json!({"created_at": 1000, "progress": null, "total": null});
        assert!(job.apply("status", Some(0), status, &display).is_none());
        let step = |n: u64| json!({"progress": n as f64, "total": 4.0, "ts": 1000 + n * 100});
        assert!(job.apply("progress", Some(1), step(1), &display).is_none());
        assert_eq!(job.shown.eta_ms, Some(300));
        assert!(job.apply("progress", Some(2), step(2), &display).is_none());
        // A replay of step 1 after a reconnect changes nothing.
        job.apply("progress", Some(1), step(1), &display);
        assert_eq!(job.shown.progress, Some(2.0));
        // A heartbeat carries the last id again and does not move the position.
        job.apply(
            "heartbeat",
            Some(2),
            json!({"since_progress_ms": 5000}),
            &display,
        );
        assert_eq!(job.last, Some(2));
        let end = job.apply("cancelled", Some(3), json!({"reason": "x"}), &display);
        assert_eq!(end.unwrap().exit_code(), ExitCode::from(130));
    }

    #[test]
    fn replayed_history_shows_no_eta_and_live_steps_do() {
        let display = Display::Lines;
        let step = |n: u64| json!({"progress": n as f64, "total": 4.0, "ts": 1000 + n * 100});
        // A finished job: the snapshot's seq covers every step the stream replays.
        let mut done = JobView::default();
        let status = json!({"status": "completed", "created_at": 1000, "progress": 4.0, "total": 4.0, "seq": 5});
        done.apply("status", Some(0), status, &display);
        for n in 1..=3 {
            done.apply("progress", Some(n), step(n), &display);
            assert_eq!(done.shown.eta_ms, None, "replayed step {n}");
        }
        assert_eq!(done.shown.progress, Some(3.0));
        // A running job: steps up to the snapshot are history, later ones are live.
        let mut running = JobView::default();
        let status = json!({"status": "running", "created_at": 1000, "progress": 1.0, "total": 4.0, "seq": 1});
        running.apply("status", Some(0), status, &display);
        running.apply("progress", Some(1), step(1), &display);
        assert_eq!(running.shown.eta_ms, None);
        running.apply("progress", Some(2), step(2), &display);
        assert_eq!(running.shown.eta_ms, Some(200));
    }

    #[test]
    fn eta_needs_a_total_and_some_progress() {
        assert_eq!(eta(Some(0), Some(1000), Some(1.0), Some(4.0)), Some(3000));
        assert_eq!(eta(Some(0), Some(1000), Some(1.0), None), None);
        assert_eq!(eta(Some(0), Some(1000), Some(0.0), Some(4.0)), None);
    }
}
