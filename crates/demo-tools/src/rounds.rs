//! `ask_in_rounds`: a tool that asks for input the 2026-07-28 way, in `input_required`
//! answers (SEP-2322), round after round.
//!
//! Stateless, as the revision wants: what it has been told so far travels in `requestState`
//! (JSON, with optional padding), and each retry's `inputResponses` add to it. Every round asks
//! `per_round` form questions (keys `r<round>q<n>`, one required text field `answer`); the
//! first round may also ask for a sample (key `sample`) and the roots (key `roots`). At the end
//! it returns `answers: …; the model said: …; roots: …`. A caller below 2026-07-28 gets a tool
//! error: there the way to ask is a request of its own (see `ask`).

// Sampling and roots are deprecated by SEP-2577 but still asked for.
#![allow(deprecated)]

use rmcp::{
    RoleServer,
    model::{
        CallToolResponse, CallToolResult, ContentBlock, CreateMessageRequest,
        CreateMessageRequestParams, ElicitRequest, ElicitRequestParams, ElicitationSchema,
        InputRequest, InputRequests, InputRequiredResult, InputResponses, ListRootsRequest,
        ProtocolVersion, SamplingMessage,
    },
    service::RequestContext,
};
use serde::{Deserialize, Serialize};

use super::args::{RoundsArgs, check};

/// What the tool has been told, carried in `requestState`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Told {
    /// The round last asked (0: none yet).
    round: u32,
    answers: Vec<String>,
    model: Option<String>,
    roots: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    padding: String,
}

pub(super) fn ask_in_rounds(
    args: RoundsArgs,
    state: Option<String>,
    responses: Option<InputResponses>,
    context: &RequestContext<RoleServer>,
) -> CallToolResponse {
    match step(args, state, responses, context) {
        Ok(response) => response,
        Err(why) => CallToolResult::error(vec![ContentBlock::text(why)]).into(),
    }
}

fn step(
    args: RoundsArgs,
    state: Option<String>,
    responses: Option<InputResponses>,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, String> {
    let version = context.protocol_version();
    if !version
        .as_ref()
        .is_some_and(|v| *v >= ProtocolVersion::V_2026_07_28)
    {
        return Err(format!(
            "ask_in_rounds asks in input_required rounds, which need protocol 2026-07-28; this \
             caller is at {}",
            version.map_or_else(|| "an unknown revision".into(), |v| v.to_string())
        ));
    }
    let rounds = check("rounds", args.rounds, 1..=20).map_err(|e| e.to_string())?;
    let per_round = check("per_round", args.per_round, 1..=100).map_err(|e| e.to_string())?;
    let padding =
        check("state_padding", args.state_padding, 0..=1_048_576).map_err(|e| e.to_string())?;
    let mut told: Told = match &state {
        Some(state) => serde_json::from_str(state)
            .map_err(|e| format!("requestState is not one this tool gave: {e}"))?,
        None => Told::default(),
    };
    if told.round > 0 {
        let responses = responses.unwrap_or_default();
        let get = |key: &str| {
            responses
                .get(key)
                .ok_or_else(|| format!("no input response for {key:?}"))
        };
        for n in 1..=per_round {
            let answer = get(&format!("r{}q{n}", told.round))?;
            told.answers.push(match answer["action"].as_str() {
                Some("accept") => answer["content"]["answer"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                Some(other) => format!("({other})"),
                None => "(no action)".into(),
            });
        }
        if told.round == 1 && args.sample {
            let said = &get("sample")?["content"];
            let text = said["text"].as_str().or_else(|| said[0]["text"].as_str());
            told.model = Some(text.unwrap_or_default().to_string());
        }
        if told.round == 1 && args.roots {
            let uris: Vec<&str> = get("roots")?["roots"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["uri"].as_str())
                .collect();
            told.roots = Some(if uris.is_empty() {
                "none".into()
            } else {
                uris.join(", ")
            });
        }
    }
    if told.round >= rounds && !args.forever {
        let mut text = format!("answers: {}", told.answers.join(", "));
        if let Some(model) = &told.model {
            text.push_str(&format!("; the model said: {model}"));
        }
        if let Some(roots) = &told.roots {
            text.push_str(&format!("; roots: {roots}"));
        }
        return Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into());
    }
    told.round += 1;
    told.padding = "x".repeat(padding);
    let mut requests = InputRequests::new();
    let schema = ElicitationSchema::builder()
        .required_string("answer")
        .build()
        .map_err(|e| e.to_string())?;
    for n in 1..=per_round {
        let request = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: format!("Round {}, question {n}: what is your answer?", told.round),
            requested_schema: schema.clone(),
        };
        requests.insert(
            format!("r{}q{n}", told.round),
            InputRequest::Elicitation(ElicitRequest::new(request)),
        );
    }
    if told.round == 1 && args.sample {
        let params =
            CreateMessageRequestParams::new(vec![SamplingMessage::user_text("Say hello.")], 100);
        requests.insert(
            "sample".into(),
            InputRequest::CreateMessage(CreateMessageRequest::new(params)),
        );
    }
    if told.round == 1 && args.roots {
        requests.insert(
            "roots".into(),
            InputRequest::ListRoots(ListRootsRequest::default()),
        );
    }
    let state = serde_json::to_string(&told).map_err(|e| e.to_string())?;
    Ok(InputRequiredResult::new(Some(requests), Some(state)).into())
}
