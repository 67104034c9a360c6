//! Who may do what: the bearer tokens that admit an agent to `/mcp`, and the capability tokens
//! that open one job's (or one correlation's) URLs. Pure functions of secrets and IDs; the HTTP
//! side that asks them lives in `http::auth`.

mod bearer;
mod job_tokens;

pub use bearer::{BearerError, Caller, McpTokens};
pub use job_tokens::{JobTokens, TokenScope};
