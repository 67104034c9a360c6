//! The MCP server the agent talks to: the tool catalog, the call modes, the job tools, what
//! upstreams ask during a call, tasks, and the resources, prompts and completions of every
//! upstream (namespaced, routed to the owner). `server.rs` is the entry: rmcp's handler,
//! dispatching each method to the file that handles it.

mod adoption;
mod ask_router;
mod call_answer;
mod caller;
mod caller_retry;
mod capabilities;
mod catalog;
mod core;
pub mod handle;
mod job_tools;
mod listen_tasks;
mod listeners;
mod prompts;
mod resources;
mod round_requests;
mod server;
mod task_questions;
mod tasks;
mod tasks_2025;
mod tool_call;
mod upstream_requests;
mod wait_bound;

pub use adoption::carry_on_adopted;
pub use handle::Links;
pub use job_tools::{ANSWER_JOB_INPUT, CANCEL_JOB, GET_JOB_STATUS, WAIT_FOR_JOB};
pub use resources::URI_PREFIX;
pub use server::Front;
pub use tasks_2025::adapt as adapt_the_wire;
pub use tool_call::SEPARATOR;
pub use wait_bound::WaitBounds;
