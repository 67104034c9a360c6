//! The REST and SSE API for frontends and operators, and the whole HTTP surface ([`assemble`]):
//! `/mcp` behind its one layer (`mcp_layer`), the job API behind its guard, the admin routes
//! behind the bearer token (or apart, on the admin listener), the request log around it all.
//! Handlers are thin: extract, ask the store, map the result. This module reads jobs from the
//! store and never talks to an upstream; what it needs to know about upstreams (for `/readyz`)
//! it is handed. The jobs page (`/`) and the JavaScript client (`/client.js`) are served from
//! files compiled in.

pub mod access_log;
pub mod admin;
pub mod auth;
mod error;
pub mod limits;
pub mod mcp_layer;
pub mod origins;
mod page;
pub mod serve;
pub mod sessions;
mod sse;
mod state;
mod subscriber;

use std::sync::Arc;

use axum::{
    Extension, Json, Router,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};

pub use error::ApiError;
use mcp_layer::McpLayer;
pub use state::{
    ApiState, InputAnswers, InputRefusal, NOT_READY_DRAINING, NOT_READY_STARTING, NOT_READY_STORE,
    NOT_READY_UPSTREAM, Readiness,
};

use crate::model::{CancelAck, Channel, CorrelationId, InputAnswer, JobId, Seq};

/// The job and correlation routes behind their access check (and CORS, when configured), and
/// the health routes, open to all. `/upstreams` and `/metrics` are in `admin`.
pub fn router(state: ApiState) -> Router {
    let mut jobs = Router::new()
        .route("/jobs/{id}", get(job_snapshot))
        .route("/jobs/{id}/events", get(job_events))
        .route("/jobs/{id}/cancel", post(job_cancel))
        .route("/jobs/{id}/input", post(job_input))
        .route("/correlations/{cid}/events", get(correlation_events))
        .route_layer(axum::middleware::from_fn_with_state(
            auth::JobGate {
                guard: state.guard.clone(),
                broker: state.broker.clone(),
            },
            auth::job_guard,
        ));
    if let Some(cors) = state.guard.cors.clone() {
        jobs = jobs.layer(cors);
    }
    let metadata = Router::new()
        .route(
            crate::auth::resource::METADATA_PATH,
            get(auth::protected_resource),
        )
        .route(
            crate::auth::resource::METADATA_PATH_MCP,
            get(auth::protected_resource),
        )
        .with_state(state.guard.clone());
    jobs.route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(page::router())
        .with_state(state)
        .merge(metadata)
}

#[derive(Debug, Default, Deserialize)]
struct StreamQuery {
    last_event_id: Option<String>,
}

/// The query of a stream route, or the API's JSON 400 (axum's own rejection is plain text).
type StreamQueryResult = Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>;

fn stream_query(query: StreamQueryResult) -> Result<StreamQuery, ApiError> {
    query.map(|Query(q)| q).map_err(|_| {
        ApiError::BadRequest(
            "the query string is malformed: use ?token=...&last_event_id=... with each at most once"
                .into(),
        )
    })
}

/// A job ID from the path. Anything that is not one this bridge could have made answers like
/// an unknown job.
fn job_id(raw: &str) -> Result<JobId, ApiError> {
    raw.parse().map_err(|_| ApiError::NotFound)
}

/// The reader's position: the `Last-Event-ID` header (what a reconnecting EventSource sends),
/// else the `last_event_id` query parameter (for clients that cannot set headers).
fn last_event_id(headers: &HeaderMap, query: &StreamQuery) -> Result<Option<Seq>, ApiError> {
    let raw = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| bad_last_event_id("not text"))?
                .to_string(),
        ),
        None => query.last_event_id.clone(),
    };
    let Some(raw) = raw.map(|r| r.trim().to_string()).filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    if !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad_last_event_id(&raw));
    }
    raw.parse().map(Some).map_err(|_| bad_last_event_id(&raw))
}

fn bad_last_event_id(raw: &str) -> ApiError {
    let shown: String = raw.chars().take(40).collect();
    ApiError::BadRequest(format!(
        "Last-Event-ID must be the decimal id: of an event this stream sent, got {shown:?}"
    ))
}

async fn job_snapshot(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    let snapshot = state.broker.snapshot(id).await?.ok_or(ApiError::NotFound)?;
    Ok(Json(snapshot).into_response())
}

async fn job_events(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: StreamQueryResult,
    outflow: Option<Extension<Arc<serve::Outflow>>>,
    place: Option<Extension<auth::StreamPlace>>,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    let after = last_event_id(&headers, &stream_query(query)?)?;
    let held = sse::Held {
        outflow: outflow.map(|Extension(o)| o),
        place: place.and_then(|Extension(p)| p.take()),
    };
    sse::respond(&state, Channel::Job(id), after, None, held).await
}

/// A correlation's stream. Opened with a credential, it shows the caller's own jobs of that
/// correlation only: another caller's jobs with the same correlation ID are not there, and its
/// ids are the caller's own ([`crate::auth::Positions`]; an admin, who sees every job, gets the
/// channel's positions).
async fn correlation_events(
    State(state): State<ApiState>,
    Path(cid): Path<String>,
    headers: HeaderMap,
    query: StreamQueryResult,
    access: Option<Extension<auth::JobAccess>>,
    outflow: Option<Extension<Arc<serve::Outflow>>>,
    place: Option<Extension<auth::StreamPlace>>,
) -> Result<Response, ApiError> {
    let cid: CorrelationId = cid.parse().map_err(|_| ApiError::NotFound)?;
    let mut after = last_event_id(&headers, &stream_query(query)?)?;
    let only = match access {
        Some(Extension(auth::JobAccess::Caller(identity))) => {
            let ids = (!identity.admin)
                .then(|| state.guard.job_tokens.positions(&identity.principal, &cid));
            if let Some(ids) = &ids {
                after = after.map(|id| ids.position(id));
            }
            Some(subscriber::Only { identity, ids })
        }
        _ => None,
    };
    let held = sse::Held {
        outflow: outflow.map(|Extension(o)| o),
        place: place.and_then(|Extension(p)| p.take()),
    };
    sse::respond(&state, Channel::Correlation(cid), after, only, held).await
}

async fn job_cancel(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    let reason = "cancelled through POST /jobs/{id}/cancel".to_string();
    match state.bus.request_cancel(id, reason).await? {
        CancelAck::Requested(snapshot) => {
            Ok((StatusCode::ACCEPTED, Json(snapshot)).into_response())
        }
        CancelAck::AlreadyTerminal(snapshot) => {
            Ok((StatusCode::CONFLICT, Json(snapshot)).into_response())
        }
        CancelAck::Unknown => Err(ApiError::NotFound),
    }
}

/// `POST /jobs/{id}/input` (the handle's `input_url`): `{"action": "accept", "content": {…}}`,
/// or `decline` / `cancel`; `key` picks one of several waiting questions. 200 when the tool
/// got it, 400 naming the field that does not fit, 409 when nothing waits for an answer, 413
/// past `jobs.max_input_bytes`, 503 when the job runs on another replica that did not confirm
/// the answer in time or cannot be reached (the answer is passed on through Redis).
async fn job_input(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    let inputs = state.inputs.as_ref().ok_or(ApiError::NotFound)?;
    let limit = inputs.max_bytes();
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
        state
            .metrics
            .limit_hits
            .with_label_values(&["max_input_bytes"])
            .inc();
        ApiError::TooLarge(format!(
            "the answer is larger than jobs.max_input_bytes ({limit} bytes)"
        ))
    })?;
    let answer: InputAnswer = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::BadRequest(format!(
            "the body must be {{\"action\": \"accept\"|\"decline\"|\"cancel\", \"content\": {{…}}}}: {e}"
        ))
    })?;
    match inputs.answer(id, answer).await {
        Ok(()) => Ok(Json(json!({ "job_id": id, "answered": true })).into_response()),
        Err(InputRefusal::UnknownJob) => Err(ApiError::NotFound),
        Err(InputRefusal::NothingToAnswer(m)) => Err(ApiError::Conflict(m)),
        Err(InputRefusal::Mismatch { message, field }) => Err(ApiError::Unfit { message, field }),
        Err(InputRefusal::TooLarge(m)) => Err(ApiError::TooLarge(m)),
        Err(InputRefusal::Undelivered(m)) => Err(ApiError::Undelivered(m)),
    }
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(state): State<ApiState>) -> Response {
    let store = match state.broker.ping().await {
        Ok(()) => json!({ "ready": true }),
        // The error may name internals (addresses, credentials in URLs): it goes to the log.
        Err(e) => {
            tracing::warn!(error = %e, "readiness: the store does not answer");
            json!({ "ready": false, "error": "the store is unreachable and the bridge is reconnecting; the reason is in its log" })
        }
    };
    let (parts_unready, parts) = state.readiness.report();
    let reason = if state.readiness.draining() {
        // Shutting down: a load balancer stops sending it calls; it will not be ready again.
        Some(NOT_READY_DRAINING)
    } else if store["ready"] != true {
        Some(NOT_READY_STORE)
    } else {
        parts_unready
    };
    let status = match reason {
        None => StatusCode::OK,
        Some(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let mut body = json!({ "ready": reason.is_none(), "store": store, "upstreams": parts });
    if let Some(reason) = reason {
        body["reason"] = json!(reason);
    }
    (status, Json(body)).into_response()
}

/// The routers to serve: the main one, and the admin one when it has a listener of its own.
pub struct Surface {
    pub main: Router,
    pub admin: Option<Router>,
}

/// `mcp` is the MCP service nested at `/mcp`, behind `layer`; `api` the job API; `admin` the
/// operational routes, merged behind the bearer token unless `admin_apart`.
pub fn assemble(
    mcp: Router,
    api: Router,
    admin: Router,
    layer: McpLayer,
    admin_apart: bool,
) -> Surface {
    let guard = layer.guard.clone();
    let mcp = mcp.route_layer(axum::middleware::from_fn_with_state(
        layer,
        mcp_layer::layer,
    ));
    let mut main = mcp.merge(api);
    let admin = if admin_apart {
        Some(admin.layer(axum::middleware::from_fn(access_log::log_request)))
    } else {
        main = main.merge(admin.route_layer(axum::middleware::from_fn_with_state(
            guard,
            auth::admin_guard,
        )));
        None
    };
    Surface {
        main: main.layer(axum::middleware::from_fn(access_log::log_request)),
        admin,
    }
}

/// Say at start what is open: loudly, when `/mcp` takes anyone.
pub fn announce(guard: &auth::Guard, config: &crate::config::Config) {
    if guard.authn.is_open() {
        tracing::warn!(
            listen = %config.server.listen,
            "/mcp IS OPEN: no auth.mcp_tokens or auth.issuers are configured, so anyone who \
             can reach this address can call every tool. Set one before exposing the bridge. \
             Meanwhile /upstreams and /metrics answer loopback clients only (or serve them on \
             server.admin_listen)"
        );
    }
    if let Some(resource) = &guard.resource {
        tracing::info!(
            resource = %resource.resource,
            metadata = %resource.metadata_url,
            issuers = config.auth.issuers.len(),
            "JWT access tokens accepted on /mcp; Protected Resource Metadata served"
        );
    }
    if guard.job_tokens.is_random() {
        tracing::info!(
            "no auth.job_secret: job URLs are signed with a key of this process alone; set \
             auth.job_secret to keep them valid across restarts and replicas"
        );
    }
    if !config.auth.require_job_tokens {
        tracing::warn!(
            "auth.require_job_tokens = false: anyone who knows a job ID can read and cancel it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(header: Option<&str>, query: Option<&str>) -> Result<Option<Seq>, ApiError> {
        let mut headers = HeaderMap::new();
        if let Some(h) = header {
            headers.insert("last-event-id", h.parse().unwrap());
        }
        last_event_id(
            &headers,
            &StreamQuery {
                last_event_id: query.map(str::to_string),
            },
        )
    }

    #[test]
    fn last_event_id_sources_and_errors() {
        assert_eq!(parse(None, None).unwrap(), None);
        assert_eq!(parse(Some("7"), Some("3")).unwrap(), Some(7));
        assert_eq!(parse(None, Some("3")).unwrap(), Some(3));
        assert_eq!(parse(Some(" "), None).unwrap(), None);
        for bad in ["-1", "1.5", "abc", "99999999999999999999999"] {
            assert!(
                matches!(parse(Some(bad), None), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
    }
}
