//! The `_meta` keys of the MCP contract: what a caller may set on a `tools/call`, and what the
//! bridge sets on its answers. `packages/client/src/index.ts` repeats them for browsers.

/// The `_meta` key under which results name their job (`{job_id, events_url}`).
pub const JOB_META_KEY: &str = "mcp-progress-bridge/job";
/// The request `_meta` key with which a caller picks the call mode for one `tools/call`
/// (`"async"`, `"sync"` or `"auto"`), over the configured one.
pub const MODE_META_KEY: &str = "mcp-progress-bridge/mode";
/// The `_meta` key of a tool error that the caller may retry as it is, elsewhere or later:
/// `{"reason": "draining", "retry_after_ms": N}` (the replica is shutting down).
pub const RETRY_META_KEY: &str = "mcp-progress-bridge/retry";
