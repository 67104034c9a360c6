//! Shared helpers for the integration tests, one file per concern:
//! - `wait`: the bound on every wait, and the one poll for state that can only be asked again;
//! - `bridge`: a real bridge in this process on a free port (or as a child process), with the
//!   demo tool server as a real child process or over Streamable HTTP;
//! - `process`: the bridge binary as a child process (shared with the benchmark);
//! - `mcp`: rmcp's own client to drive it, tool calls, and a raw Streamable HTTP client;
//! - `job`: the job handle, typed, and job URLs;
//! - `sse`: an SSE reader built on reqwest-eventsource;
//! - `faulty_store`: the memory store with faults on demand (lost live events, failing
//!   history reads, slow appends), for the tests that drive a `Store` directly;
//! - `http`: plain HTTP (JSON, metrics, a raw request line);
//! - `proxy`: a proxy that cuts connections on demand;
//! - `tls`: an https front (a private CA, tokio-rustls) for a plain-HTTP server;
//! - `redis`: the test Redis, per-test key prefixes, a private `redis-server`;
//! - `cluster`: a Redis Cluster of a test's own (three `redis-server` primaries);
//! - `idp`: a real OpenID Connect provider (npm `oidc-provider`) that issues JWT access tokens;
//! - `kube`: deploy/ rendered by kustomize and run by `podman kube play`;
//! - `otlp`: an OTLP/HTTP trace receiver, for a bridge process that exports traces;
//! - `prereq`: prerequisites outside Rust (Python, node, Chromium) and running them;
//! - `task_server`: the TypeScript SDK server whose tool runs as an upstream task (HTTP);
//! - `resumable_server`: the Python SDK server whose SSE events carry ids (HTTP);
//! - `replica_pair`: bridge processes sharing one store and one HTTP upstream (adoption);
//! - `listen`: the TCP ports a child process listens on (children bind port 0);
//! - `alone`: a test that needs a process of its own (its RSS, its environment variables).
//!
//! The modules are private and their items re-exported, so `use common::*` brings the helpers
//! and not module names that would clash with crates (`http`, `redis`).
//!
//! Every wait has a timeout; nothing sleeps to synchronise.

mod alone;
mod bridge;
mod cluster;
mod faulty_store;
mod http;
mod idp;
mod job;
mod kube;
mod listen;
mod mcp;
mod otlp;
mod prereq;
// Shared with the benchmark (crates/bench): what only the benchmark uses is unused here.
#[allow(dead_code)]
mod process;
mod proxy;
mod redis;
mod replica_pair;
mod resumable_server;
mod sse;
mod task_server;
mod tls;
mod wait;

pub use self::{
    alone::*, bridge::*, cluster::*, faulty_store::*, http::*, idp::*, job::*, kube::*, listen::*,
    mcp::*, otlp::*, prereq::*, process::BridgeProcess, proxy::*, redis::*, replica_pair::*,
    resumable_server::*, sse::*, task_server::*, tls::*, wait::*,
};
