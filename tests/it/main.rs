//! The integration tests, one module per concern, linked into one binary (`cargo test --test it`;
//! `cargo test --test it sse_tail::` runs one module). Shared helpers are in `common`, one file
//! per concern. The tests of this binary run beside each other in one process: a test that
//! reads or changes what is process-wide (resident memory, environment variables) runs alone in
//! a process of its own (`common::in_own_process`). `tests/architecture.rs` is a binary of its
//! own: it reads the source, not the bridge.

mod common;

mod adoption;
mod adoption_resume;
mod agents;
mod bad_input;
mod bridge;
mod cli;
mod config;
mod config_reference;
mod connections;
mod container;
mod correlation_privacy;
mod demo_tools;
mod drain;
mod fair_shares;
mod foundry;
mod fuzz;
mod hostile_input;
mod input;
mod input_order;
mod interop_everything;
mod interop_python;
mod interop_surface;
mod kube_play;
mod lifecycle;
mod listen_tasks;
mod log_attribution;
mod memory_soak;
mod oauth;
mod observability;
mod proxy;
mod redaction;
mod redis_store;
mod reload;
mod replicas;
mod security;
mod sessions;
mod shutdown;
mod sse_buffer;
mod sse_direct;
mod sse_tail;
mod sse_writers;
mod store_conformance;
mod surface_limits;
mod tasks;
mod tasks_2025;
mod traces;
mod upstream_asking;
mod upstream_faults;
mod upstream_limits;
mod upstream_probe;
mod upstream_rounds;
mod upstream_tasks;
mod upstream_tls;
mod wait_bounds;
mod web;
