//! The demo tools themselves.
//!
//! Each one is a case the bridge must handle: steady progress, a burst of
//! progress before anything else, a tool error, logs during a call, a tool
//! that ignores cancellation, one that never answers, one that kills its own
//! process, one that answers with a JSON-RPC error, one that shows the `_meta`
//! it got. One more, `bench_progress`, exists for the benchmark harness
//! (`crates/bench`): it stamps each progress message with its send time.
//! Every tool that waits also watches the call's cancellation token
//! (`RequestContext::ct`, fired by the client's `notifications/cancelled`, and
//! by rmcp when the connection or session ends).

use std::time::Duration;

// `sample` and `roots` use sampling and roots, deprecated by SEP-2577 but still sent.
#[allow(deprecated)]
use rmcp::{
    RoleServer,
    handler::server::{
        tool::{InputResponses, RequestState},
        wrapper::Parameters,
    },
    model::{
        CallToolResponse, CallToolResult, ClientResult, ContentBlock, CreateMessageRequest,
        CreateMessageRequestParams, ElicitRequest, ElicitRequestParams, ElicitationAction,
        ElicitationSchema, ListRootsRequest, SamplingMessage, ServerRequest,
    },
    service::RequestContext,
    tool, tool_router,
};

use super::{
    DemoTools,
    args::{
        ArgumentError, AskArgs, BURST, BenchProgressArgs, CrashArgs, DELAY_MS, ECHO_BYTES,
        EchoArgs, FailAfterArgs, INTERVAL_US, IgnoreCancelArgs, InstantProgressArgs,
        LogAndCountArgs, NoTotalArgs, RoundsArgs, SECONDS, STEPS, SampleArgs, SlowCountArgs, check,
    },
    report::CallReporter,
};

/// What a tool returns: a result (which may itself be a tool error), or an
/// argument out of range (also sent as a tool error, see [`ArgumentError`]).
type ToolOutcome = Result<CallToolResult, ArgumentError>;

/// One run of a counting loop.
struct Count {
    tool: &'static str,
    steps: u32,
    delay: Duration,
    /// Send `total` with each progress notification (false: indeterminate).
    with_total: bool,
    /// Send a log message before each progress notification.
    with_log: bool,
}

/// How a counting loop ended.
enum Counted {
    All,
    Cancelled { at_step: u64 },
}

#[tool_router(vis = "pub(super)")]
impl DemoTools {
    #[tool(
        description = "Counts from 1 up to `to` (default 10), waiting `delay_ms` milliseconds (default 500) before each step, and reports progress after every step (progress = step, total = to). Returns \"counted to N\". Use it to watch live progress of a slow job or to try cancelling one."
    )]
    async fn slow_count(
        &self,
        Parameters(args): Parameters<SlowCountArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolOutcome {
        let to = check("to", args.to, STEPS)?;
        let delay_ms = check("delay_ms", args.delay_ms, DELAY_MS)?;
        let count = Count {
            tool: "slow_count",
            steps: to,
            delay: Duration::from_millis(delay_ms),
            with_total: true,
            with_log: false,
        };
        self.counted_to(count, &context).await
    }

    #[tool(
        description = "Sends `steps` progress notifications (default 5) immediately, back-to-back, before doing anything else, then returns \"sent N progress notifications\". Tests that fast progress right at the start of a call is not lost."
    )]
    async fn instant_progress(
        &self,
        Parameters(args): Parameters<InstantProgressArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolOutcome {
        let steps = check("steps", args.steps, BURST)?;
        let reporter = CallReporter::new(&context);
        if !reporter.wants_progress() {
            return Ok(text_result(
                "sent 0 progress notifications: the request carried no progress token".to_owned(),
            ));
        }
        for step in 1..=steps {
            reporter
                .progress(
                    step.into(),
                    Some(steps.into()),
                    format!("burst {step} of {steps}"),
                )
                .await;
        }
        Ok(text_result(format!("sent {steps} progress notifications")))
    }

    #[tool(
        description = "Reports progress for `steps` steps (default 3), waiting `delay_ms` milliseconds (default 100) before each, then fails on purpose with a tool error \"failed after N steps as asked\". Use it to see how a failed job looks."
    )]
    async fn fail_after(
        &self,
        Parameters(args): Parameters<FailAfterArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolOutcome {
        let steps = check("steps", args.steps, STEPS)?;
        let delay_ms = check("delay_ms", args.delay_ms, DELAY_MS)?;
        let count = Count {
            tool: "fail_after",
            steps,
            delay: Duration::from_millis(delay_ms),
            with_total: true,
            with_log: false,
        };
        Ok(match self.count(count, &context).await {
            Counted::All => CallToolResult::error(vec![ContentBlock::text(format!(
                "failed after {steps} steps as asked"
            ))]),
            Counted::Cancelled { at_step } => cancelled_result(at_step),
        })
    }

    #[tool(
        description = "Reports progress for `steps` steps (default 3), waiting `delay_ms` milliseconds (default 100) before each, then answers with a JSON-RPC error (-32603, \"failed with a protocol error as asked\") instead of a tool result. Use it to see how a call whose server answers with an error looks."
    )]
    async fn fail_rpc(
        &self,
        Parameters(args): Parameters<FailAfterArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let steps = check("steps", args.steps, STEPS).map_err(ArgumentError::into_rpc)?;
        let delay_ms =
            check("delay_ms", args.delay_ms, DELAY_MS).map_err(ArgumentError::into_rpc)?;
        let count = Count {
            tool: "fail_rpc",
            steps,
            delay: Duration::from_millis(delay_ms),
            with_total: true,
            with_log: false,
        };
        match self.count(count, &context).await {
            Counted::All => Err(rmcp::ErrorData::internal_error(
                "failed with a protocol error as asked",
                None,
            )),
            Counted::Cancelled { at_step } => Ok(cancelled_result(at_step)),
        }
    }

    #[tool(
        description = "Asks the person behind the client `question` (default \"What is your name?\") with elicitation/create: a form with one required text field `answer`; `times` times over (default 1, at most 100), one after the other; with `deaf_ms`, only after that long, deaf to a cancel until the first question is answered (a server that notices a cancel late). Reports progress before and after, and returns \"you said: <answer>\", or \"no answer: declined\" / \"no answer: cancelled\" / \"no answer: <why>\" when there is none (several: each, joined by \"; \")."
    )]
    async fn ask(
        &self,
        Parameters(AskArgs {
            question,
            times,
            deaf_ms,
        }): Parameters<AskArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let reporter = CallReporter::new(&context);
        let times = times.clamp(1, 100);
        let total = u64::from(times) + 1;
        reporter.progress(1, Some(total), "asking".to_owned()).await;
        let schema = match ElicitationSchema::builder()
            .required_string("answer")
            .build()
        {
            Ok(schema) => schema,
            Err(why) => return text_result(format!("no answer: {why}")),
        };
        let mut said_all = Vec::new();
        let deaf = Duration::from_millis(deaf_ms.min(60_000));
        tokio::time::sleep(deaf).await;
        for step in 0..times {
            let request = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: question.clone(),
                requested_schema: schema.clone(),
            };
            let request = ServerRequest::ElicitRequest(ElicitRequest::new(request));
            let said = if step == 0 && !deaf.is_zero() {
                context.peer.send_request(request).await
            } else {
                tokio::select! {
                    biased;
                    () = context.ct.cancelled() => {
                        self.cancel_log.record("ask", &context.id, u64::from(step) + 1);
                        return cancelled_result(u64::from(step) + 1);
                    }
                    answer = context.peer.send_request(request) => answer,
                }
            };
            said_all.push(match said {
                Ok(ClientResult::ElicitResult(answer)) => match (answer.action, answer.content) {
                    (ElicitationAction::Accept, Some(content)) => {
                        format!(
                            "you said: {}",
                            content["answer"].as_str().unwrap_or_default()
                        )
                    }
                    (ElicitationAction::Accept, None) => {
                        "no answer: accepted without content".into()
                    }
                    (ElicitationAction::Decline, _) => "no answer: declined".into(),
                    _ => "no answer: cancelled".into(),
                },
                Ok(_) => "no answer: the client answered something else".into(),
                Err(e) => format!("no answer: {e}"),
            });
        }
        reporter
            .progress(total, Some(total), "answered".to_owned())
            .await;
        text_result(said_all.join("; "))
    }

    #[tool(
        description = "At protocol 2026-07-28 only: asks for input in input_required answers (SEP-2322), `rounds` rounds (default 1) of `per_round` questions (default 1) each, every question a form with one required text field `answer`; with `sample` also a sample of the client's model, with `roots` also the client's roots, in the first round; with `forever` it never stops asking. `state_padding` pads requestState. Returns \"answers: a, b; the model said: …; roots: …\"."
    )]
    fn ask_in_rounds(
        &self,
        Parameters(args): Parameters<RoundsArgs>,
        RequestState(state): RequestState,
        InputResponses(responses): InputResponses,
        context: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        super::rounds::ask_in_rounds(args, state, responses, &context)
    }

    #[tool(
        description = "Asks the client's model `prompt` (default \"Say hello.\") with sampling/createMessage (at most 100 tokens), and returns \"the model said: <text>\", or \"no sample: <error>\" when the client does not sample."
    )]
    #[allow(deprecated)]
    async fn sample(
        &self,
        Parameters(SampleArgs { prompt }): Parameters<SampleArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], 100);
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        let text = match context.peer.send_request(request).await {
            Ok(ClientResult::CreateMessageResult(result)) => {
                let said = serde_json::to_value(&result.message.content).unwrap_or_default();
                let said = said["text"]
                    .as_str()
                    .or_else(|| said[0]["text"].as_str())
                    .unwrap_or_default()
                    .to_string();
                format!("the model said: {said}")
            }
            Ok(_) => "no sample: the client answered something else".into(),
            Err(e) => format!("no sample: {e}"),
        };
        text_result(text)
    }

    #[tool(
        description = "Asks the client for its roots (roots/list) and returns \"roots: <uri>, …\", \"roots: none\", or \"no roots: <error>\"."
    )]
    #[allow(deprecated)]
    async fn roots(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        let text = match context.peer.send_request(request).await {
            Ok(ClientResult::ListRootsResult(result)) if result.roots.is_empty() => {
                "roots: none".to_string()
            }
            Ok(ClientResult::ListRootsResult(result)) => {
                let uris: Vec<&str> = result.roots.iter().map(|r| r.uri.as_str()).collect();
                format!("roots: {}", uris.join(", "))
            }
            Ok(_) => "no roots: the client answered something else".into(),
            Err(e) => format!("no roots: {e}"),
        };
        text_result(text)
    }

    #[tool(
        description = "Returns `text` unchanged, at once, with no progress; `repeat` times over if given (a large result for testing limits)."
    )]
    fn echo(&self, Parameters(EchoArgs { text, repeat }): Parameters<EchoArgs>) -> ToolOutcome {
        let most = u32::try_from(ECHO_BYTES / text.len().max(1)).unwrap_or(u32::MAX);
        let repeat = check("repeat", repeat, 1..=most.max(1))?;
        Ok(text_result(text.repeat(repeat as usize)))
    }

    #[tool(
        description = "Like slow_count (default to = 3, delay_ms = 100), but before each progress notification also sends a log message (level info, logger \"demo\", \"working on step i\"). Use it to see a tool's log lines next to its progress. With `late_log_ms`, one more line comes that long after the answer."
    )]
    async fn log_and_count(
        &self,
        Parameters(args): Parameters<LogAndCountArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolOutcome {
        let to = check("to", args.to, STEPS)?;
        let delay_ms = check("delay_ms", args.delay_ms, DELAY_MS)?;
        let late_log_ms = check("late_log_ms", args.late_log_ms, DELAY_MS)?;
        let count = Count {
            tool: "log_and_count",
            steps: to,
            delay: Duration::from_millis(delay_ms),
            with_total: true,
            with_log: true,
        };
        let answer = self.counted_to(count, &context).await;
        if late_log_ms > 0 {
            let reporter = CallReporter::new(&context);
            // Outlives the call on purpose: the misbehaviour the bridge must not pin on
            // whichever call is in flight when the line comes.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(late_log_ms)).await;
                reporter.log("after the answer".to_owned()).await;
            });
        }
        answer
    }

    #[tool(
        description = "Runs for `seconds` seconds (default 3) and IGNORES cancellation: it notes the cancel but keeps going, and keeps reporting progress once per second, then returns \"finished anyway\". Simulates a badly behaved tool server."
    )]
    async fn ignore_cancel(
        &self,
        Parameters(args): Parameters<IgnoreCancelArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolOutcome {
        let seconds = check("seconds", args.seconds, SECONDS)?;
        let reporter = CallReporter::new(&context);
        let mut saw_cancel = false;
        for second in 1..=seconds {
            // One sleep per second, not restarted by a cancel, so the tool
            // takes `seconds` whatever happens.
            let tick = tokio::time::sleep(Duration::from_secs(1));
            tokio::pin!(tick);
            loop {
                tokio::select! {
                    () = context.ct.cancelled(), if !saw_cancel => {
                        saw_cancel = true;
                        self.cancel_log.record("ignore_cancel", &context.id, second - 1);
                    }
                    () = &mut tick => break,
                }
            }
            // Deliberately still sent after a cancel: that is the misbehaviour
            // a bridge must survive (progress for a call that is over).
            reporter
                .progress(
                    second,
                    Some(seconds),
                    format!("second {second} of {seconds}"),
                )
                .await;
        }
        let mut result = text_result("finished anyway".to_owned());
        result.structured_content = Some(serde_json::json!({ "saw_cancel": saw_cancel }));
        Ok(result)
    }

    #[tool(
        description = "Never returns and sends nothing, until the call is cancelled. Use it to test cancellation and timeouts."
    )]
    async fn hang(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        context.ct.cancelled().await;
        self.cancel_log.record("hang", &context.id, 0);
        cancelled_result(0)
    }

    #[tool(
        description = "Reports one progress notification, then after `after_ms` milliseconds (default 200) makes the whole tool server process exit with code 3, in the middle of the call. Simulates a tool server crash. A cancel that arrives first stops it from crashing."
    )]
    async fn crash(
        &self,
        Parameters(args): Parameters<CrashArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolOutcome {
        let after_ms = check("after_ms", args.after_ms, DELAY_MS)?;
        CallReporter::new(&context)
            .progress(1, None, format!("crashing in {after_ms} ms"))
            .await;
        tokio::select! {
            biased;
            () = context.ct.cancelled() => {
                self.cancel_log.record("crash", &context.id, 1);
                return Ok(cancelled_result(1));
            }
            () = tokio::time::sleep(Duration::from_millis(after_ms)) => {}
        }
        tracing::warn!("crash tool: exiting the process with code 3, as asked");
        // The point of the tool: no unwinding, no response, no clean shutdown.
        std::process::exit(3)
    }

    #[tool(
        description = "Lists the tool calls this server has seen cancelled (tool, request_id, at_step = steps finished when the cancel arrived), oldest first. Use it to check that a cancel reached this server."
    )]
    fn cancellations(&self) -> Result<CallToolResult, rmcp::ErrorData> {
        let records = self.cancel_log.snapshot();
        let cancelled = serde_json::to_value(records).map_err(|error| {
            rmcp::ErrorData::internal_error(format!("could not encode the record: {error}"), None)
        })?;
        // `structured` also puts the same JSON in a text block, for clients
        // that read only text content.
        Ok(CallToolResult::structured(
            serde_json::json!({ "cancelled": cancelled }),
        ))
    }

    #[tool(
        description = "Returns the `_meta` this call arrived with, as structured content ({\"meta\": {...}, \"traceparent_header\": ...}): the progress token, a W3C traceparent and whatever else the client (or a bridge in between) put there; served over HTTP, also the request's traceparent header. Use it to check what reaches a tool server."
    )]
    async fn echo_meta(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let meta = serde_json::to_value(&context.meta).map_err(|error| {
            rmcp::ErrorData::internal_error(format!("could not encode the _meta: {error}"), None)
        })?;
        // Served over HTTP, the request's `traceparent` header too (null on stdio).
        let header = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get("traceparent"))
            .and_then(|value| value.to_str().ok());
        Ok(CallToolResult::structured(
            serde_json::json!({ "meta": meta, "traceparent_header": header }),
        ))
    }

    #[tool(
        description = "Like slow_count (default to = 5, delay_ms = 100), but its progress notifications carry no total: indeterminate progress, as from a tool that cannot know how long it will take."
    )]
    async fn slow_count_no_total(
        &self,
        Parameters(args): Parameters<NoTotalArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolOutcome {
        let to = check("to", args.to, STEPS)?;
        let delay_ms = check("delay_ms", args.delay_ms, DELAY_MS)?;
        let count = Count {
            tool: "slow_count_no_total",
            steps: to,
            delay: Duration::from_millis(delay_ms),
            with_total: false,
            with_log: false,
        };
        self.counted_to(count, &context).await
    }

    #[tool(
        description = "For benchmarks: waits `delay_ms` (default 0), then sends `count` progress notifications (default 10) on a fixed schedule `interval_us` microseconds apart (default 0: back-to-back). Each message is `sent_at_us=T`, T being the Unix time in microseconds just before the send, so a reader can time the delivery. Returns \"sent N progress notifications\", padded with `x` up to `result_bytes` if given (a large result after many events)."
    )]
    async fn bench_progress(
        &self,
        Parameters(args): Parameters<BenchProgressArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolOutcome {
        let count = check("count", args.count, STEPS)?;
        let interval = Duration::from_micros(check("interval_us", args.interval_us, INTERVAL_US)?);
        let delay = Duration::from_millis(check("delay_ms", args.delay_ms, DELAY_MS)?);
        let result_bytes =
            check("result_bytes", args.result_bytes, 0..=ECHO_BYTES as u64)? as usize;
        let reporter = CallReporter::new(&context);
        // A fixed schedule (not a sleep after each send), so a slow send does not stretch it.
        let start = tokio::time::Instant::now() + delay;
        for step in 1..=count {
            let due = start + interval * (step - 1);
            if due > tokio::time::Instant::now() {
                tokio::select! {
                    biased;
                    () = context.ct.cancelled() => {
                        self.cancel_log.record("bench_progress", &context.id, u64::from(step - 1));
                        return Ok(cancelled_result(u64::from(step - 1)));
                    }
                    () = tokio::time::sleep_until(due) => {}
                }
            }
            let sent_at_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros());
            reporter
                .progress(
                    step.into(),
                    Some(count.into()),
                    format!("sent_at_us={sent_at_us}"),
                )
                .await;
        }
        let mut text = format!("sent {count} progress notifications");
        if text.len() < result_bytes {
            text.push_str(&"x".repeat(result_bytes - text.len()));
        }
        Ok(text_result(text))
    }
}

impl DemoTools {
    /// The three counting tools: count, then "counted to N" with
    /// `{"counted": N}` as structured content.
    async fn counted_to(&self, count: Count, context: &RequestContext<RoleServer>) -> ToolOutcome {
        let to = count.steps;
        Ok(match self.count(count, context).await {
            Counted::All => {
                let mut result = text_result(format!("counted to {to}"));
                result.structured_content = Some(serde_json::json!({ "counted": to }));
                result
            }
            Counted::Cancelled { at_step } => cancelled_result(at_step),
        })
    }

    /// Counts `1..=steps`, waiting before each step and reporting after it.
    /// Stops at the first wait that a cancel interrupts, and records it.
    async fn count(&self, count: Count, context: &RequestContext<RoleServer>) -> Counted {
        let reporter = CallReporter::new(context);
        let total = count.with_total.then_some(u64::from(count.steps));
        for step in 1..=count.steps {
            tokio::select! {
                // A cancel that has already arrived wins, even over a zero delay.
                biased;
                () = context.ct.cancelled() => {
                    let at_step = u64::from(step - 1);
                    self.cancel_log.record(count.tool, &context.id, at_step);
                    return Counted::Cancelled { at_step };
                }
                () = tokio::time::sleep(count.delay) => {}
            }
            if count.with_log {
                reporter.log(format!("working on step {step}")).await;
            }
            let message = match total {
                Some(total) => format!("step {step} of {total}"),
                None => format!("step {step}"),
            };
            reporter.progress(step.into(), total, message).await;
        }
        Counted::All
    }
}

fn text_result(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// The result of a cancelled call. The client has stopped waiting for it (and
/// rmcp may not even send it), but a handler has to return something.
fn cancelled_result(at_step: u64) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "cancelled by the client after {at_step} steps"
    ))])
}
