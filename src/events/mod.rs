//! The events wing's interface: the [`Broker`] that numbers, keeps and publishes a job's
//! events and hands readers a consistent cut of a channel ([`Opened`]) with its live tail, and
//! the [`Bus`] that carries cancels and answers between replicas. A store (`crate::store`:
//! memory or Redis) implements both; the HTTP side reads through a `Broker` and never names
//! a store.

mod broker;
mod bus;
mod error;
pub mod sse_frame;
mod stored_event;

pub use broker::{Broker, ChannelSnapshot, LiveItem, LiveStream, Opened, Replay};
pub use bus::{Adopted, AnswerRequest, Bus, CancelRequest, Relay, Relayed, RelayedAnswer, ReplyTo};
pub use error::StoreError;
pub use stored_event::StoredEvent;
