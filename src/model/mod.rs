//! The job vocabulary every layer shares: identifiers, statuses, events, snapshots, failure
//! reasons, the `_meta` keys, and the wire form of events.
//!
//! A leaf: it imports nothing of the bridge (std, serde and the like only), so every other
//! module may use it without forming a cycle; `tests/architecture.rs` keeps it so. What is
//! here is either part of the external contract (event names, failure reasons, `_meta` keys,
//! the JSON of snapshots and events) or passed between layers (`front` → `jobs` → `store` →
//! `http`). What only a store needs (how it delivers events, its trait) is in `store`.

mod channel;
mod clock;
mod durability;
mod event;
mod failure;
mod ids;
mod input;
mod mcp_message;
pub mod meta;
mod outcomes;
mod principal;
mod snapshot;
mod status;
pub mod wire;

pub use channel::{Channel, Seq};
pub use clock::{iso8601, now_ms};
pub use durability::{Durability, Reattach, StreamCursor};
pub use event::{EventBody, EventKind, Heartbeat, ProgressUpdate};
pub use failure::{FailureReason, JobFailure};
pub use ids::{CorrelationId, InvalidId, JobId};
pub use input::{InputAction, InputAnswer, InputMismatch, InputQuestion};
pub use mcp_message::McpMessage;
pub use outcomes::{AnswerVerdict, CancelAck};
pub use principal::Principal;
pub use snapshot::{JobSnapshot, NewJob};
pub use status::JobStatus;
