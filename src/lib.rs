//! mcp-progress-bridge: an MCP gateway that turns each `tools/call` into a job and republishes
//! the upstream's `notifications/progress` on a per-job SSE channel, for agent platforms that
//! drop progress and cut long tool calls off.
//!
//! Data flows one way: [`front`] (the MCP server the agent calls) → [`jobs`] (lifecycle) →
//! [`store`] (snapshots, history, fan-out, behind the [`events`] traits) → [`http`] (REST and
//! SSE). [`upstream`] holds the connections to the real tool servers; [`app`] wires it all
//! together; [`cli`] holds the client commands (`watch`, `call`). Beneath them: [`model`] (the
//! shared vocabulary, a leaf), [`config`], [`auth`], [`metrics`], [`shutdown`], [`wait`],
//! [`traces`], [`tls`], [`redact`] (what every printed text goes through). `tests/architecture.rs` keeps the layering and forbids cycles;
//! docs/design/README.md draws it.

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
pub mod redact;
pub mod rmcp_ext;
pub mod shutdown;
pub mod store;
pub mod tls;
pub mod traces;
pub mod upstream;
pub mod wait;
