//! What the bridge adds around rmcp 3.11 for what it does not do yet; each item names the gap
//! whose closing in rmcp would delete it:
//! - [`envelope`]: rmcp's transports read a message of any size whole; to refuse an oversized
//!   answer and still end the call it answers, the bridge reads its `id` as the bytes stream.
//! - [`task_support`]: rmcp's `Tool` drops `execution.taskSupport` (2025-11-25 tasks), so the
//!   bridge reads a `tools/list` line for it before rmcp parses it.
//! - [`sse_events`]: rmcp's server writes no 2025-11-25 task fields and no `taskIds` in a listen
//!   acknowledgment, so the bridge rewrites the messages of a response as they stream.
//!
//! Others are still in `upstream/` (the stdio line cap, the oversize answer, the progress tap,
//! the HTTP client's event checks): they keep upstream state.

pub mod envelope;
pub mod sse_events;
pub mod task_support;
