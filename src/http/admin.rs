//! Operational endpoints: `/upstreams` (each upstream's name, transport, state, tools,
//! restarts, last error) and `/metrics` (Prometheus text). They say more than a stranger
//! should know, so they are served behind the bearer token on the main listener, or only on
//! the admin listener (`server.admin_listen`), which operators keep off the public network.
//! On the main listener `/upstreams` lists a caller the tools its `[[auth.policies]]` allow.

use std::sync::Arc;

use axum::{
    Extension, Json, Router,
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::Value;

use crate::{auth::Identity, metrics::Metrics};

/// What `/upstreams` lists; handed in, since this module never talks to an upstream.
pub trait UpstreamsReport: Send + Sync + 'static {
    fn statuses(&self) -> Value;
}

#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub upstreams: Arc<dyn UpstreamsReport>,
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/upstreams", get(upstreams))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn upstreams(
    State(state): State<AdminState>,
    caller: Option<Extension<Arc<Identity>>>,
) -> Json<Value> {
    let mut statuses = state.upstreams.statuses();
    if let Some(Extension(caller)) = caller
        && !caller.admin
    {
        only_usable_tools(&mut statuses, &caller);
    }
    Json(serde_json::json!({ "upstreams": statuses }))
}

/// Each upstream's `tools` cut to those `caller` may use (`<upstream>__<tool>` by its
/// policies), so that `/upstreams` shows no more than `tools/list` does.
fn only_usable_tools(statuses: &mut Value, caller: &Identity) {
    for upstream in statuses.as_array_mut().into_iter().flatten() {
        let name = upstream["name"].as_str().unwrap_or_default().to_string();
        if let Some(tools) = upstream.get_mut("tools").and_then(Value::as_array_mut) {
            tools.retain(|tool| {
                let tool = tool.as_str().unwrap_or_default();
                caller.may_use_tool(&format!("{name}__{tool}"))
            });
        }
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}
