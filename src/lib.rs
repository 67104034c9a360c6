//! mcp-progress-bridge: an MCP gateway that turns each `tools/call` into a job and republishes
//! the upstream's `notifications/progress` on a per-job SSE channel, for agent platforms that
//! drop progress and cut long tool calls off.
//!
//! Data flows one way: [`front`] (the MCP server the agent calls) → [`jobs`] (lifecycle) →
//! [`store`] (snapshots, history, fan-out) → [`http`] (REST and SSE). [`upstream`] holds the
//! connections to the real tool servers; [`app`] wires it all together. [`cli`] holds the
//! client-side commands (`watch`, `call`) that follow jobs from a terminal.
//!
//! [`model`] is the vocabulary they all share (job IDs, statuses, events, snapshots, failure
//! reasons, `_meta` keys, the wire form of events): a leaf that imports nothing of the bridge.
//! [`config`] is the one typed configuration, imported by the others. [`shutdown`] owns every
//! background task and stops them in order (a leaf too); [`wait`] is the one way to back off
//! before a retry and to sleep until a deadline (a leaf); [`traces`] exports the spans of tool
//! calls over OpenTelemetry when the `OTEL_*` variables ask for it (it references only
//! [`shutdown`]); [`tls`] sets up TLS for the clients to upstreams (a leaf). No modules import
//! each other,
//! directly or around a loop: `tests/architecture.rs` checks both.

pub mod app;
pub mod auth;
pub mod cli;
pub mod config;
pub mod events;
pub mod front;
pub mod http;
pub mod jobs;
pub mod metrics;
pub mod model;
pub mod shutdown;
pub mod store;
pub mod tls;
pub mod traces;
pub mod upstream;
pub mod wait;
