//! The job handle an async answer carries, and the `_meta` a sync answer carries.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    auth::JobTokens,
    model::{JobId, JobStatus, meta::JOB_META_KEY},
};

/// Builds the URLs a job handle points to, each with the capability token it needs
/// (`?token=`, see `auth::JobTokens`): the read token on the status and events URLs, the
/// cancel token on the cancel URL.
#[derive(Debug, Clone)]
pub struct Links {
    public_url: String,
    tokens: JobTokens,
}

impl Links {
    /// `public_url` without a trailing slash.
    pub fn new(public_url: &str, tokens: JobTokens) -> Self {
        Self {
            public_url: public_url.trim_end_matches('/').to_string(),
            tokens,
        }
    }

    pub fn status_url(&self, id: JobId) -> String {
        format!(
            "{}/jobs/{id}?token={}",
            self.public_url,
            self.tokens.job(id)
        )
    }

    pub fn events_url(&self, id: JobId) -> String {
        format!(
            "{}/jobs/{id}/events?token={}",
            self.public_url,
            self.tokens.job(id)
        )
    }

    pub fn input_url(&self, id: JobId) -> String {
        format!(
            "{}/jobs/{id}/input?token={}",
            self.public_url,
            self.tokens.input(id)
        )
    }

    pub fn cancel_url(&self, id: JobId) -> String {
        format!(
            "{}/jobs/{id}/cancel?token={}",
            self.public_url,
            self.tokens.cancel(id)
        )
    }
}

/// What an `async` answer (or a slow `auto` one) gives the agent.
#[derive(Debug, Clone, Serialize)]
pub struct JobHandleBody {
    pub job_id: JobId,
    pub status: JobStatus,
    pub events_url: String,
    pub status_url: String,
    /// `POST` here cancels the job: a separate capability, for whoever may stop it.
    pub cancel_url: String,
    /// `POST` an answer here when the tool asks a question (status `input_required`): a
    /// capability of its own, for whoever may answer.
    pub input_url: String,
    pub tool: String,
    pub instructions: String,
}

impl JobHandleBody {
    pub fn new(links: &Links, id: JobId, tool: &str) -> Self {
        Self {
            job_id: id,
            status: JobStatus::Running,
            events_url: links.events_url(id),
            status_url: links.status_url(id),
            cancel_url: links.cancel_url(id),
            input_url: links.input_url(id),
            tool: tool.to_string(),
            instructions: format!(
                "The tool is running as job {id}. Call wait_for_job with job_id \"{id}\" to get \
                 its result; live progress streams at events_url."
            ),
        }
    }

    /// The handle as a tool result: `structuredContent` is the handle, `content[0].text` the
    /// same object as JSON text (platforms such as Foundry pass only the text on).
    pub fn into_result(self, links: &Links) -> CallToolResult {
        let value = serde_json::to_value(&self).unwrap_or_default();
        let mut result = CallToolResult::structured(value);
        attach_job_meta(&mut result, links, self.job_id);
        result
    }
}

/// Name the job in a result's `_meta`, so a sync caller can still find the job channel.
pub fn attach_job_meta(result: &mut CallToolResult, links: &Links, id: JobId) {
    let meta = result.meta.get_or_insert_with(Default::default);
    meta.insert(
        JOB_META_KEY.to_string(),
        json!({ "job_id": id, "events_url": links.events_url(id) }),
    );
}

/// A tool error result with one text line.
pub fn error_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text.into())])
}

/// A successful tool result whose structured content is `value`, with the JSON as text.
pub fn json_result(value: Value) -> CallToolResult {
    CallToolResult::structured(value)
}
