//! Operational endpoints: `/upstreams` (each upstream's name, transport, state, tools,
//! restarts, last error) and `/metrics` (Prometheus text). They say more than a stranger
//! should know, so they are served behind the bearer token on the main listener, or only on
//! the admin listener (`server.admin_listen`), which operators keep off the public network.

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::Value;

use crate::metrics::Metrics;

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

async fn upstreams(State(state): State<AdminState>) -> Json<Value> {
    Json(serde_json::json!({ "upstreams": state.upstreams.statuses() }))
}

async fn metrics(State(state): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}
