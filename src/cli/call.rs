//! `mcp-progress-bridge call <tool> --args JSON [--url URL]`: call a tool through a bridge with
//! rmcp's MCP client, as an agent would, and watch the job it starts.

use std::{collections::HashMap, process::ExitCode};

use rmcp::{
    ServiceExt,
    model::{CallToolRequestParams, CallToolResult, JsonObject, RequestMetaObject},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::Value;

use super::{CliError, EXIT_CANNOT_FOLLOW, Outcome, result_text, watch};
use crate::{
    config::CallMode,
    model::{FailureReason, meta::MODE_META_KEY},
};

#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The tool's name as the bridge lists it, e.g. demo__slow_count.
    #[arg(value_name = "TOOL")]
    pub tool: String,
    /// The tool's arguments as a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    pub args: String,
    /// The bridge's MCP endpoint.
    #[arg(
        long,
        env = "BRIDGE_URL",
        value_name = "URL",
        default_value = "http://127.0.0.1:8080/mcp"
    )]
    pub url: String,
    /// Bearer token for /mcp, when the bridge requires one.
    #[arg(
        long,
        env = "BRIDGE_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Call mode for this call (sent as _meta["mcp-progress-bridge/mode"]): async returns a job
    /// handle at once, so the call can be watched; sync and auto may answer with the result.
    #[arg(long, value_enum, default_value = "async")]
    pub mode: ModeArg,
    /// Correlation ID sent as the X-Correlation-Id header.
    #[arg(long, value_name = "ID")]
    pub correlation_id: Option<String>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ModeArg {
    Async,
    Sync,
    Auto,
    /// Send no mode: the one configured for the tool applies.
    Configured,
}

impl ModeArg {
    fn mode(self) -> Option<CallMode> {
        match self {
            ModeArg::Async => Some(CallMode::Async),
            ModeArg::Sync => Some(CallMode::Sync),
            ModeArg::Auto => Some(CallMode::Auto),
            ModeArg::Configured => None,
        }
    }
}

pub async fn run(args: CallArgs) -> ExitCode {
    match call(&args).await {
        Ok(outcome) => {
            watch::report(&outcome);
            outcome.exit_code()
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_CANNOT_FOLLOW)
        }
    }
}

/// Call the tool; when the answer is a job handle, watch the job to its end.
pub async fn call(args: &CallArgs) -> Result<Outcome, CliError> {
    let arguments = parse_arguments(&args.args)?;
    let result = call_tool(args, arguments).await?;
    let value = serde_json::to_value(&result).unwrap_or_default();
    match job_handle(&result) {
        Some((job_id, events_url)) => {
            eprintln!("{} is running as job {job_id}", args.tool);
            eprintln!("events: {events_url}");
            let input_url = value["structuredContent"]["input_url"]
                .as_str()
                .map(str::to_string);
            watch::watch(&events_url, input_url.as_deref()).await
        }
        // Answered directly (sync, or auto within its budget): the result is the outcome.
        None if result.is_error == Some(true) => Ok(Outcome::Failed(serde_json::json!({
            "reason": FailureReason::ToolError,
            "message": result_text(&value),
        }))),
        None => Ok(Outcome::Completed(serde_json::json!({ "result": value }))),
    }
}

fn parse_arguments(text: &str) -> Result<JsonObject, CliError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(CliError::Usage(format!(
            "--args must be a JSON object like '{{\"to\": 10}}', got {other}"
        ))),
        Err(e) => Err(CliError::Usage(format!(
            "--args is not valid JSON ({e}); quote it for the shell, e.g. --args '{{\"to\": 10}}'"
        ))),
    }
}

async fn call_tool(args: &CallArgs, arguments: JsonObject) -> Result<CallToolResult, CliError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(args.url.clone());
    if let Some(token) = &args.token {
        config = config.auth_header(token.clone());
    }
    if let Some(cid) = &args.correlation_id {
        let value = http::HeaderValue::from_str(cid).map_err(|_| {
            CliError::Usage(format!(
                "--correlation-id {cid:?} cannot be sent as a header: use letters, digits and . _ : -"
            ))
        })?;
        config = config.custom_headers(HashMap::from([(
            http::HeaderName::from_static("x-correlation-id"),
            value,
        )]));
    }
    crate::tls::use_ring();
    let transport = StreamableHttpClientTransport::from_config(config);
    let client = ().serve(transport).await.map_err(|e| {
        let text = e.to_string();
        let hint = if text.contains("401") || text.to_lowercase().contains("auth") {
            "the bridge wants a bearer token: pass --token or set BRIDGE_TOKEN"
        } else {
            "is the bridge running there? start one with `cargo run` or pass --url"
        };
        CliError::Mcp(format!(
            "cannot open an MCP session at {}: {text} ({hint})",
            args.url
        ))
    })?;

    let mut params = CallToolRequestParams::new(args.tool.clone()).with_arguments(arguments);
    if let Some(mode) = args.mode.mode() {
        let mut meta = RequestMetaObject::new();
        meta.insert(MODE_META_KEY.into(), Value::String(mode.to_string()));
        params.meta = Some(meta);
    }
    let answer = client.call_tool(params).await;
    // Closing the session does not cancel the job: it runs on in the bridge.
    let _ = client.cancel().await;
    answer.map_err(|e| CliError::Mcp(format!("calling {} failed: {e}", args.tool)))
}

/// The job a tool result hands back, when it is a job handle: (job_id, events_url).
fn job_handle(result: &CallToolResult) -> Option<(String, String)> {
    let handle = result.structured_content.as_ref()?;
    let job_id = handle["job_id"].as_str()?;
    let events_url = handle["events_url"].as_str()?;
    (handle["status"] == "running").then(|| (job_id.to_string(), events_url.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_a_json_object() {
        assert!(parse_arguments(r#"{"to": 3}"#).is_ok());
        let err = parse_arguments("[1]").unwrap_err().to_string();
        assert!(err.contains("JSON object"), "{err}");
        let err = parse_arguments("{to: 3}").unwrap_err().to_string();
        assert!(err.contains("not valid JSON"), "{err}");
    }
}
