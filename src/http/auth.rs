//! Who may use which endpoint, checked before any handler runs.
//!
//! - `/mcp`: a configured bearer token (`auth.mcp_tokens`), else 401 with `WWW-Authenticate`;
//!   then the caller's request rate (429). The verified caller travels on in the request's
//!   extensions (for per-caller job limits); the `Authorization` header does not.
//! - Job and correlation URLs: the capability token of that one job or correlation
//!   (`?token=`), or an MCP bearer token. A missing or wrong token answers exactly like an
//!   unknown job (404), so nobody can probe which IDs exist. Event streams then take a
//!   subscriber place (503 with `Retry-After` when full).
//! - Operational endpoints (`/upstreams`, `/metrics`): a bearer token, unless they are served
//!   on the separate admin listener.

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::{
    Json,
    body::Body,
    extract::{MatchedPath, Path, Query, Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;

use super::{
    ApiError,
    limits::{CallRates, SUBSCRIBER_RETRY_AFTER, Subscribers},
};
use crate::{
    auth::{BearerError, JobTokens, McpTokens, TokenScope},
    config::Config,
};

/// The realm named in `WWW-Authenticate`.
const REALM: &str = "mcp-progress-bridge";

/// Everything the access checks need; a cheap handle.
#[derive(Clone)]
pub struct Guard {
    pub mcp_tokens: Arc<McpTokens>,
    pub job_tokens: JobTokens,
    pub require_job_tokens: bool,
    pub rates: Arc<CallRates>,
    pub subscribers: Arc<Subscribers>,
    /// CORS for the job routes (`server.cors_origins`); none by default.
    pub cors: Option<tower_http::cors::CorsLayer>,
}

impl Guard {
    pub fn new(config: &Config, job_tokens: JobTokens) -> Self {
        Self {
            mcp_tokens: Arc::new(McpTokens::new(&config.auth.mcp_tokens)),
            job_tokens,
            require_job_tokens: config.auth.require_job_tokens,
            rates: CallRates::new(&config.limits),
            subscribers: Subscribers::new(&config.limits),
            cors: super::origins::cors(&config.server),
        }
    }

    fn authorization(headers: &HeaderMap) -> Option<&[u8]> {
        headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes)
    }
}

/// 401 with the challenge a client needs (RFC 6750).
fn unauthorized(error: BearerError) -> Response {
    let challenge = match error {
        BearerError::Missing => format!("Bearer realm=\"{REALM}\""),
        BearerError::Invalid => format!("Bearer realm=\"{REALM}\", error=\"invalid_token\""),
    };
    let body = json!({ "error": { "code": "unauthorized", "message": error.to_string() } });
    let mut response = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// A refusal that says when to come back.
fn retry_later(status: StatusCode, code: &str, message: String, after: Duration) -> Response {
    let secs = after.as_secs_f64().ceil().max(1.0) as u64;
    let body = json!({ "error": { "code": code, "message": message, "retry_after_secs": secs } });
    let mut response = (status, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}

/// In front of `/mcp`: bearer token, then rate.
pub async fn mcp_guard(State(guard): State<Guard>, mut request: Request, next: Next) -> Response {
    let caller = match guard
        .mcp_tokens
        .check(Guard::authorization(request.headers()))
    {
        Ok(caller) => caller,
        Err(error) => return unauthorized(error),
    };
    if let Err(wait) = guard.rates.check(caller) {
        return retry_later(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many requests for this token (limits.calls_per_minute); slow down and retry after the time in Retry-After".into(),
            wait,
        );
    }
    // The token has done its job: nothing downstream (handlers, logs, upstreams) sees it.
    request.headers_mut().remove(header::AUTHORIZATION);
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// In front of `/upstreams` and `/metrics` on the main listener.
pub async fn admin_guard(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    match guard
        .mcp_tokens
        .check(Guard::authorization(request.headers()))
    {
        Ok(_) => next.run(request).await,
        Err(error) => unauthorized(error),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct TokenQuery {
    token: Option<String>,
}

/// What a job route opens, from the route that matched.
fn scope_of(route: &str) -> Option<(TokenScope, &'static str, bool)> {
    // (scope, path parameter, is an event stream)
    match route {
        "/jobs/{id}" => Some((TokenScope::JobRead, "id", false)),
        "/jobs/{id}/events" => Some((TokenScope::JobRead, "id", true)),
        "/jobs/{id}/cancel" => Some((TokenScope::JobCancel, "id", false)),
        "/correlations/{cid}/events" => Some((TokenScope::Correlation, "cid", true)),
        _ => None,
    }
}

/// In front of the job and correlation routes (a route layer: it runs after routing, so it
/// knows which route and which ID).
pub async fn job_guard(
    State(guard): State<Guard>,
    route: Option<MatchedPath>,
    path: Result<Path<HashMap<String, String>>, axum::extract::rejection::PathRejection>,
    query: Result<Query<TokenQuery>, axum::extract::rejection::QueryRejection>,
    request: Request,
    next: Next,
) -> Response {
    let Some((scope, param, stream)) = route.as_ref().and_then(|r| scope_of(r.as_str())) else {
        return ApiError::NotFound.into_response();
    };
    // A path that does not decode to text names no job: the answer for unknown ones.
    let Some(id) = path.ok().and_then(|Path(mut p)| p.remove(param)) else {
        return ApiError::NotFound.into_response();
    };
    let Ok(Query(query)) = query else {
        return ApiError::BadRequest(
            "the query string is malformed: use ?token=...&last_event_id=... with each at most once"
                .into(),
        )
        .into_response();
    };
    let allowed = !guard.require_job_tokens
        || guard
            .mcp_tokens
            .admits(Guard::authorization(request.headers()))
        || query
            .token
            .as_deref()
            .is_some_and(|token| guard.job_tokens.verify(scope, &id, token));
    if !allowed {
        return ApiError::NotFound.into_response();
    }
    if !stream {
        return next.run(request).await;
    }
    serve_stream(&guard, format!("{}:{id}", scope.label()), request, next).await
}

/// Serve an SSE route holding one of `channel`'s subscriber places for as long as the stream's
/// body lives; with no place left, tell the client to come back later.
async fn serve_stream(guard: &Guard, channel: String, request: Request, next: Next) -> Response {
    let permit = match guard.subscribers.try_open(channel) {
        Ok(permit) => permit,
        Err(full) => {
            return retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_subscribers",
                full.to_string(),
                SUBSCRIBER_RETRY_AFTER,
            );
        }
    };
    let response = next.run(request).await;
    if !response.status().is_success() {
        return response;
    }
    // The place is held for as long as the stream's body is.
    let (parts, body) = response.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _held = &permit;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}
