//! A prompt and a resource that ask for input the 2026-07-28 way (`input_required` answers to
//! `prompts/get` and `resources/read`, SEP-2322): served only with `demo-tools --asking`, so
//! the demo server's plain surface (tools only) stays what every other test expects.
//!
//! Both ask one question (key `name`, a form with one required text field `answer`) and answer
//! with what they were told: the prompt `introduce` gives one user message
//! `Please introduce <name>.`, the resource `demo://asking/greeting` the text `Hello, <name>!`
//! (a declined question: `someone`). Stateless: `requestState` is `asked:<round>` plus
//! padding. The prompt's arguments make it misbehave on request: `forever` (`"true"`: it asks
//! again every time) and `state_padding` (bytes of padding in `requestState`). A caller below
//! 2026-07-28 gets an error: there is no way to ask it in an answer.

use rmcp::{
    ErrorData, RoleServer,
    model::{
        ElicitRequest, ElicitRequestParams, ElicitationSchema, GetPromptRequestParams,
        GetPromptResponse, GetPromptResult, InputRequest, InputRequests, InputRequiredResult,
        InputResponses, Prompt, PromptArgument, PromptMessage, ProtocolVersion,
        ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
        ResourceContents, Role,
    },
    service::RequestContext,
};

pub const PROMPT: &str = "introduce";
pub const RESOURCE: &str = "demo://asking/greeting";
/// The largest `state_padding` the prompt accepts.
const MAX_PADDING: usize = 1_048_576;

pub fn prompts() -> Vec<Prompt> {
    vec![Prompt::new(
        PROMPT,
        Some(
            "At protocol 2026-07-28 only: asks for a name (input_required), then asks the \
             model to introduce that person. `forever`: \"true\" to ask without end; \
             `state_padding`: bytes of padding in requestState.",
        ),
        Some(vec![
            PromptArgument::new("forever"),
            PromptArgument::new("state_padding"),
        ]),
    )]
}

pub fn resources() -> Vec<Resource> {
    vec![
        Resource::new(RESOURCE, "greeting")
            .with_description("At protocol 2026-07-28 only: asks for a name, then greets it."),
    ]
}

pub fn get_prompt(
    request: GetPromptRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<GetPromptResponse, ErrorData> {
    if request.name != PROMPT {
        return Err(ErrorData::invalid_params(
            format!("unknown prompt {:?}", request.name),
            None,
        ));
    }
    let argument = |name: &str| {
        request
            .arguments
            .as_ref()
            .and_then(|a| a.get(name))
            .and_then(|v| v.as_str().map(str::to_string))
    };
    let forever = argument("forever").is_some_and(|v| v == "true");
    let padding = match argument("state_padding") {
        Some(n) => n
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= MAX_PADDING)
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("state_padding must be a number of bytes up to {MAX_PADDING}"),
                    None,
                )
            })?,
        None => 0,
    };
    Ok(
        match ask(
            context,
            request.request_state,
            request.input_responses,
            forever,
            padding,
        )? {
            Ok(name) => {
                GetPromptResponse::Complete(GetPromptResult::new(vec![PromptMessage::new_text(
                    Role::User,
                    format!("Please introduce {name}."),
                )]))
            }
            Err(asked) => GetPromptResponse::InputRequired(asked),
        },
    )
}

pub fn read_resource(
    request: ReadResourceRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<ReadResourceResponse, ErrorData> {
    if request.uri != RESOURCE {
        return Err(ErrorData::resource_not_found(
            format!("unknown resource {:?}", request.uri),
            None,
        ));
    }
    Ok(
        match ask(
            context,
            request.request_state,
            request.input_responses,
            false,
            0,
        )? {
            Ok(name) => ReadResourceResponse::Complete(ReadResourceResult::new(vec![
                ResourceContents::text(format!("Hello, {name}!"), RESOURCE),
            ])),
            Err(asked) => ReadResourceResponse::InputRequired(asked),
        },
    )
}

/// The name given (`Ok`), or the question to ask (`Err`).
fn ask(
    context: &RequestContext<RoleServer>,
    state: Option<String>,
    responses: Option<InputResponses>,
    forever: bool,
    padding: usize,
) -> Result<Result<String, InputRequiredResult>, ErrorData> {
    let version = context.protocol_version();
    if !version
        .as_ref()
        .is_some_and(|v| *v >= ProtocolVersion::V_2026_07_28)
    {
        return Err(ErrorData::invalid_request(
            "this asks for input in an input_required answer, which needs protocol 2026-07-28",
            None,
        ));
    }
    let round: usize = match &state {
        Some(state) => state
            .strip_prefix("asked:")
            .and_then(|rest| rest.split(':').next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                ErrorData::invalid_params("requestState is not one this server gave", None)
            })?,
        None => 0,
    };
    if round > 0 && !forever {
        let answer = responses
            .as_ref()
            .and_then(|r| r.get("name"))
            .ok_or_else(|| ErrorData::invalid_params("no input response for \"name\"", None))?;
        let name = match answer["action"].as_str() {
            Some("accept") => answer["content"]["answer"]
                .as_str()
                .unwrap_or("someone")
                .to_string(),
            _ => "someone".to_string(),
        };
        return Ok(Ok(name));
    }
    let schema = ElicitationSchema::builder()
        .required_string("answer")
        .build()
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let question = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: "What is your name?".into(),
        requested_schema: schema,
    };
    let mut requests = InputRequests::new();
    requests.insert(
        "name".into(),
        InputRequest::Elicitation(ElicitRequest::new(question)),
    );
    let state = format!("asked:{}:{}", round + 1, "x".repeat(padding));
    Ok(Err(InputRequiredResult::new(Some(requests), Some(state))))
}
