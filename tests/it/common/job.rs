//! Jobs as a test sees them: the handle an async call answers with, typed, and the URLs of a
//! job whose ID a test learned some other way (signed as the handle's would be).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    bridge::job_tokens,
    mcp::{McpClient, call, first_text, structured},
    wait::within,
};

/// The job handle of an async answer (the contract's fields; `raw` is the whole object).
#[derive(Debug, Clone, Deserialize)]
pub struct JobHandle {
    pub job_id: String,
    pub status: String,
    pub tool: String,
    pub events_url: String,
    pub status_url: String,
    pub cancel_url: String,
    pub instructions: String,
    #[serde(skip)]
    pub raw: Value,
}

impl JobHandle {
    /// Read a handle from a tool answer's JSON; panics, showing it, if it is not one.
    pub fn from_value(value: Value) -> Self {
        let mut handle: Self = serde_json::from_value(value.clone())
            .unwrap_or_else(|e| panic!("not a job handle ({e}): {value}"));
        handle.raw = value;
        handle
    }

    /// The `?token=` value of its events (and status) URL: the job's read token.
    pub fn read_token(&self) -> &str {
        token_of(&self.events_url)
    }

    /// The `?token=` value of its cancel URL.
    pub fn cancel_token(&self) -> &str {
        token_of(&self.cancel_url)
    }

    /// The path of its events URL on the bridge at `base` (for a raw-socket reader).
    pub fn events_path(&self, base: &str) -> &str {
        self.events_url
            .strip_prefix(base)
            .unwrap_or_else(|| panic!("{} is not on {base}", self.events_url))
    }

    /// Where a person answers the job's question (`POST`), with the job-input token.
    pub fn input_url(&self) -> &str {
        self.raw["input_url"]
            .as_str()
            .expect("the handle has input_url")
    }
}

/// A running `demo__bench_progress` job: after `delay_ms`, `steps` progress steps 1 ms apart,
/// then a result of `result_bytes` bytes of text.
pub async fn large_result_job(
    client: &McpClient,
    steps: u64,
    delay_ms: u64,
    result_bytes: usize,
) -> JobHandle {
    let arguments = json!({
        "count": steps,
        "interval_us": 1000,
        "delay_ms": delay_ms,
        "result_bytes": result_bytes,
    });
    running_job(client, "demo__bench_progress", arguments).await
}

/// POST an answer to a job's input URL: the status and the JSON body (`null` if none).
pub async fn post_answer(url: &str, body: Value) -> (u16, Value) {
    let response = within(
        "POST an answer",
        reqwest::Client::new().post(url).json(&body).send(),
    )
    .await
    .expect("POST");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The job tool `answer_job_input` on job `job_id`, whose question wants a string `answer`:
/// `stranger` (another principal) finds no job; `owner`'s answer that does not fit is a tool
/// error naming the field; its answer `8080` is taken; a second answer is refused.
pub async fn answer_job_input_once(owner: &McpClient, stranger: &McpClient, job_id: &str) {
    let answer = |content: Value| json!({"job_id": job_id, "action": "accept", "content": content});
    let foreign = call(
        stranger,
        "answer_job_input",
        answer(json!({"answer": "80"})),
    )
    .await;
    assert_eq!(foreign.is_error, Some(true));
    assert!(
        first_text(&foreign).contains("no job"),
        "{}",
        first_text(&foreign)
    );
    let bad = call(owner, "answer_job_input", answer(json!({"answer": 80}))).await;
    assert_eq!(bad.is_error, Some(true));
    assert!(
        first_text(&bad).contains("content.answer"),
        "{}",
        first_text(&bad)
    );
    let good = call(owner, "answer_job_input", answer(json!({"answer": "8080"}))).await;
    assert_ne!(good.is_error, Some(true), "{}", first_text(&good));
    assert_eq!(structured(&good)["answered"], true);
    let again = call(owner, "answer_job_input", answer(json!({"answer": "1"}))).await;
    assert_eq!(again.is_error, Some(true));
    assert!(
        first_text(&again).contains("no question waiting"),
        "{}",
        first_text(&again)
    );
}

/// The `token=` value of a URL.
pub fn token_of(url: &str) -> &str {
    url.split("token=")
        .nth(1)
        .unwrap_or_else(|| panic!("no token in {url}"))
}

/// Call a tool that must answer with a job handle (async mode, or a slow auto call), and
/// return the handle; fails the test if the answer is not a running job's handle.
pub async fn running_job(client: &McpClient, tool: &str, arguments: Value) -> JobHandle {
    let answer = structured(&call(client, tool, arguments).await);
    assert_eq!(
        answer["status"], "running",
        "a job handle (the call answered with its handle): {answer}"
    );
    JobHandle::from_value(answer)
}

/// A job's URLs on a test bridge, signed with the test job secret (what the job handle would
/// carry), for tests that learn a job's ID some other way than from its handle.
pub fn job_events_url(base: &str, job_id: &str) -> String {
    let token = job_tokens().job(job_id.parse().expect("a job ID"));
    format!("{base}/jobs/{job_id}/events?token={token}")
}

pub fn job_status_url(base: &str, job_id: &str) -> String {
    let token = job_tokens().job(job_id.parse().expect("a job ID"));
    format!("{base}/jobs/{job_id}?token={token}")
}

pub fn job_cancel_url(base: &str, job_id: &str) -> String {
    let token = job_tokens().cancel(job_id.parse().expect("a job ID"));
    format!("{base}/jobs/{job_id}/cancel?token={token}")
}
