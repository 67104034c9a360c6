//! The prompts the agent sees (`<upstream>__<prompt>`, like tools), and completions, which
//! refer to a prompt or a resource template and so go to the upstream that owns it.

use rmcp::{
    ErrorData,
    model::{CompleteRequestParams, Prompt, Reference},
};

use super::{resources, tool_call};
use crate::upstream::{Upstream, Upstreams};

fn exposed(upstream: &Upstream, name: &str) -> bool {
    upstream.config().expose.prompts.allows(name)
}

/// Every exposed prompt of every connected upstream, in config order.
pub fn list(upstreams: &Upstreams) -> Vec<Prompt> {
    let mut out = Vec::new();
    for upstream in upstreams.iter() {
        for prompt in upstream.prompts().iter() {
            if !exposed(upstream, &prompt.name) {
                continue;
            }
            let mut prompt = prompt.clone();
            prompt.name = format!("{}{}{}", upstream.name(), tool_call::SEPARATOR, prompt.name);
            out.push(prompt);
        }
    }
    out
}

pub fn unknown(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("unknown prompt {name:?}: call prompts/list for the prompts this bridge offers"),
        None,
    )
}

/// The upstream and its own name for the prompt the agent calls `name`. A prompt the operator
/// hid, or one the upstream does not list, is refused alike.
pub fn route<'a>(
    upstreams: &'a Upstreams,
    name: &str,
) -> Result<(&'a Upstream, String), ErrorData> {
    let (upstream_name, prompt) = tool_call::split(name).ok_or_else(|| unknown(name))?;
    let upstream = upstreams.get(upstream_name).ok_or_else(|| unknown(name))?;
    if !exposed(upstream, prompt) || !upstream.prompts().iter().any(|p| p.name == prompt) {
        return Err(unknown(name));
    }
    Ok((upstream, prompt.to_string()))
}

/// The upstream a completion goes to, with its reference rewritten to the upstream's terms.
pub fn route_completion(
    upstreams: &Upstreams,
    mut params: CompleteRequestParams,
) -> Result<(&Upstream, CompleteRequestParams), ErrorData> {
    let upstream = match &mut params.r#ref {
        Reference::Prompt(prompt) => {
            let (upstream, own) = route(upstreams, &prompt.name)?;
            prompt.name = own;
            upstream
        }
        Reference::Resource(template) => {
            let route = resources::route_template(upstreams, &template.uri)?;
            template.uri = route.uri;
            route.upstream
        }
        _ => {
            return Err(ErrorData::invalid_params(
                "completion/complete: ref must be ref/prompt or ref/resource",
                None,
            ));
        }
    };
    let completes = upstream
        .capabilities()
        .is_some_and(|c| c.completions.is_some());
    if !completes {
        return Err(ErrorData::invalid_params(
            format!(
                "upstream {} offers no completions; completion/complete works for the \
                 prompts and resource templates of upstreams that do",
                upstream.name()
            ),
            None,
        ));
    }
    Ok((upstream, params))
}
