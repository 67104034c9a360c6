//! The resources and resource templates the agent sees, and which upstream a URI leads to.
//!
//! URIs are kept as the upstream gives them while no other upstream lists the same one (so
//! clients see what a direct connection shows). A URI (or template) that two upstreams list is
//! rewritten for both, to `mcp-progress-bridge://<upstream>/<the upstream's URI, verbatim>`:
//! reversible, and accepted for any upstream's resource at any time. A bare URI routes to the
//! one upstream that lists it, else to the one whose template matches it, else to the only
//! upstream that offers resources. Anything else, or a URI the operator hid
//! (`expose.resources`), is "resource not found", the same answer for hidden and unknown.

use std::{collections::HashMap, sync::Arc};

use rmcp::{
    ErrorData,
    model::{ReadResourceResponse, Resource, ResourceContents, ResourceTemplate},
};

use crate::upstream::{Upstream, Upstreams};

/// The scheme and authority of a rewritten URI: `mcp-progress-bridge://<upstream>/<uri>`.
pub const URI_PREFIX: &str = "mcp-progress-bridge://";

/// Templates are matched against URIs at most this long (longer ones match no template).
const MAX_TEMPLATE_MATCH_LEN: usize = 8192;

/// Where a URI the agent named leads.
pub struct Route<'a> {
    pub upstream: &'a Upstream,
    /// The upstream's own URI.
    pub uri: String,
    /// Whether the agent used the rewritten form (answers then use it too).
    pub rewritten: bool,
}

pub fn rewrite(upstream: &str, uri: &str) -> String {
    format!("{URI_PREFIX}{upstream}/{uri}")
}

/// Split a rewritten URI into the upstream name and its own URI.
pub fn unwrite(uri: &str) -> Option<(&str, &str)> {
    uri.strip_prefix(URI_PREFIX)?
        .split_once('/')
        .filter(|(upstream, _)| !upstream.is_empty())
}

fn offers_resources(upstream: &Upstream) -> bool {
    upstream
        .capabilities()
        .is_some_and(|c| c.resources.is_some())
}

fn exposed(upstream: &Upstream, uri: &str) -> bool {
    upstream.config().expose.resources.allows(uri)
}

/// Every exposed resource of every upstream, colliding URIs rewritten.
pub fn list(upstreams: &Upstreams) -> Vec<Resource> {
    merged(upstreams, |u| u.resources())
}

/// Every exposed resource template of every upstream, colliding templates rewritten.
pub fn list_templates(upstreams: &Upstreams) -> Vec<ResourceTemplate> {
    merged(upstreams, |u| u.resource_templates())
}

/// A resource or a resource template, by the URI (or template) it is listed under.
trait Listed: Clone {
    fn uri(&self) -> &str;
    fn set_uri(&mut self, uri: String);
}

impl Listed for Resource {
    fn uri(&self) -> &str {
        &self.uri
    }
    fn set_uri(&mut self, uri: String) {
        self.uri = uri;
    }
}

impl Listed for ResourceTemplate {
    fn uri(&self) -> &str {
        &self.uri_template
    }
    fn set_uri(&mut self, uri: String) {
        self.uri_template = uri;
    }
}

/// The exposed `items` of every upstream, the URIs two upstreams list rewritten.
fn merged<T: Listed>(upstreams: &Upstreams, items: impl Fn(&Upstream) -> Arc<Vec<T>>) -> Vec<T> {
    let per_upstream: Vec<(&Upstream, Vec<T>)> = upstreams
        .iter()
        .map(|u| {
            let kept = items(u)
                .iter()
                .filter(|item| exposed(u, item.uri()))
                .cloned()
                .collect();
            (u, kept)
        })
        .collect();
    let mut counts = HashMap::new();
    for item in per_upstream.iter().flat_map(|(_, items)| items) {
        *counts.entry(item.uri()).or_insert(0) += 1;
    }
    let mut out = Vec::new();
    for (upstream, items) in &per_upstream {
        for item in items {
            let mut item = item.clone();
            if counts[item.uri()] > 1 {
                item.set_uri(rewrite(upstream.name(), item.uri()));
            }
            out.push(item);
        }
    }
    out
}

pub fn not_found(uri: &str) -> ErrorData {
    ErrorData::resource_not_found(
        format!(
            "no upstream offers resource {uri:?}: call resources/list and \
             resources/templates/list for the resources this bridge offers"
        ),
        Some(serde_json::json!({ "uri": uri })),
    )
}

fn ambiguous(uri: &str, owners: &[&Upstream]) -> ErrorData {
    let names: Vec<&str> = owners.iter().map(|u| u.name()).collect();
    ErrorData::invalid_params(
        format!(
            "resource {uri:?} is offered by several upstreams ({}): name one as \
             {URI_PREFIX}<upstream>/{uri}",
            names.join(", ")
        ),
        None,
    )
}

/// The upstream that owns `uri` (a resource URI, as the agent names it).
pub fn route<'a>(upstreams: &'a Upstreams, uri: &str) -> Result<Route<'a>, ErrorData> {
    if let Some((name, own)) = unwrite(uri) {
        return match upstreams.get(name) {
            Some(upstream) if exposed(upstream, own) && offers_resources(upstream) => Ok(Route {
                upstream,
                uri: own.to_string(),
                rewritten: true,
            }),
            _ => Err(not_found(uri)),
        };
    }
    let candidates: Vec<&Upstream> = upstreams
        .iter()
        .filter(|u| offers_resources(u) && exposed(u, uri))
        .collect();
    let bare = |upstream| Route {
        upstream,
        uri: uri.to_string(),
        rewritten: false,
    };
    let listed: Vec<&Upstream> = candidates
        .iter()
        .copied()
        .filter(|u| u.resources().iter().any(|r| r.uri == uri))
        .collect();
    match listed.as_slice() {
        [one] => return Ok(bare(one)),
        [] => {}
        many => return Err(ambiguous(uri, many)),
    }
    let templated: Vec<&Upstream> = candidates
        .iter()
        .copied()
        .filter(|u| {
            u.resource_templates()
                .iter()
                .any(|t| template_matches(&t.uri_template, uri))
        })
        .collect();
    match templated.as_slice() {
        [one] => return Ok(bare(one)),
        [] => {}
        many => return Err(ambiguous(uri, many)),
    }
    match candidates.as_slice() {
        [only] if upstreams.iter().filter(|u| offers_resources(u)).count() == 1 => Ok(bare(only)),
        _ => Err(not_found(uri)),
    }
}

/// The upstream that owns a resource template (a completion's `ref/resource`).
pub fn route_template<'a>(upstreams: &'a Upstreams, uri: &str) -> Result<Route<'a>, ErrorData> {
    if unwrite(uri).is_some() {
        return route(upstreams, uri);
    }
    let owners: Vec<&Upstream> = upstreams
        .iter()
        .filter(|u| exposed(u, uri) && u.resource_templates().iter().any(|t| t.uri_template == uri))
        .collect();
    match owners.as_slice() {
        [one] => Ok(Route {
            upstream: one,
            uri: uri.to_string(),
            rewritten: false,
        }),
        [] => route(upstreams, uri),
        many => Err(ambiguous(uri, many)),
    }
}

/// A read answer in the agent's terms: when it named the resource in the rewritten form, the
/// contents' URIs are rewritten the same way.
pub fn answer(route: &Route<'_>, mut response: ReadResourceResponse) -> ReadResourceResponse {
    if route.rewritten
        && let ReadResourceResponse::Complete(result) = &mut response
    {
        for content in &mut result.contents {
            if let ResourceContents::TextResourceContents { uri, .. }
            | ResourceContents::BlobResourceContents { uri, .. } = content
            {
                *uri = rewrite(route.upstream.name(), uri);
            }
        }
    }
    response
}

/// Whether `uri` could be an expansion of the RFC 6570 `template`. Literal text must match
/// exactly; an expression matches any run of characters, except that a simple `{var}` (or a
/// `{.var}`, `{;var}`, `{/var}` one) does not cross `/`, `?` or `#`. Linear in the URI's length
/// per expression, so a hostile URI or template costs little.
pub fn template_matches(template: &str, uri: &str) -> bool {
    if uri.len() > MAX_TEMPLATE_MATCH_LEN {
        return false;
    }
    let bytes = uri.as_bytes();
    // reachable[i]: the template so far can match exactly uri[..i].
    let mut reachable = vec![false; bytes.len() + 1];
    reachable[0] = true;
    let mut rest = template;
    while !rest.is_empty() {
        let (literal, expression, after) = match rest.find('{') {
            Some(0) => match rest.find('}') {
                Some(end) => ("", Some(&rest[1..end]), &rest[end + 1..]),
                None => (rest, None, ""),
            },
            Some(start) => (&rest[..start], None, &rest[start..]),
            None => (rest, None, ""),
        };
        rest = after;
        if !literal.is_empty() {
            let mut next = vec![false; bytes.len() + 1];
            for i in 0..=bytes.len() {
                if reachable[i] && uri[i..].starts_with(literal) {
                    next[i + literal.len()] = true;
                }
            }
            reachable = next;
        }
        if let Some(expression) = expression {
            let crosses_slashes = expression.starts_with(['+', '#', '?', '&']);
            let mut open = false;
            for i in 0..=bytes.len() {
                if reachable[i] {
                    open = true;
                } else if open {
                    reachable[i] = true;
                }
                if open && i < bytes.len() && !crosses_slashes && b"/?#".contains(&bytes[i]) {
                    open = false;
                }
            }
        }
        if !reachable.iter().any(|r| *r) {
            return false;
        }
    }
    reachable[bytes.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewritten_uris_go_back() {
        let uri = rewrite("docs", "file:///a/b.md");
        assert_eq!(uri, "mcp-progress-bridge://docs/file:///a/b.md");
        assert_eq!(unwrite(&uri), Some(("docs", "file:///a/b.md")));
        assert_eq!(unwrite("file:///a"), None);
        assert_eq!(unwrite("mcp-progress-bridge:///x"), None);
    }

    #[test]
    fn templates_match_their_expansions() {
        let t = "demo://resource/dynamic/text/{resourceId}";
        assert!(template_matches(t, "demo://resource/dynamic/text/42"));
        assert!(template_matches(t, "demo://resource/dynamic/text/"));
        assert!(!template_matches(t, "demo://resource/dynamic/text/4/2"));
        assert!(!template_matches(t, "demo://resource/dynamic/blob/42"));
        assert!(template_matches("file:///{+path}", "file:///a/b/c"));
        assert!(template_matches("x://{a}/{b}", "x://1/2"));
        assert!(!template_matches("x://{a}/{b}", "x://1"));
        assert!(template_matches("x://{a}-{b}.txt", "x://1-2-3.txt"));
        assert!(template_matches(
            "x://search{?q,lang}",
            "x://search?q=a&lang=b"
        ));
        assert!(template_matches("plain://exact", "plain://exact"));
        assert!(!template_matches("plain://exact", "plain://exactly"));
    }

    #[test]
    fn hostile_inputs_stay_cheap() {
        let template = "{a}".repeat(200);
        let uri = "a".repeat(MAX_TEMPLATE_MATCH_LEN);
        assert!(template_matches(&template, &uri));
        assert!(!template_matches(
            "x{a}",
            &"a".repeat(MAX_TEMPLATE_MATCH_LEN + 1)
        ));
    }
}
