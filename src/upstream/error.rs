//! Why an upstream cannot take a call, or could not be reached. Each message is whole (it
//! names the upstream and what to do); the typed error behind it (an I/O error starting a
//! child, the MCP SDK's handshake or send error) is also its `source()`, so logs keep the
//! detail when a client-facing message stops showing it.

use std::{sync::Arc, time::Duration};

use rmcp::{
    service::{ClientInitializeError, ServiceError},
    transport::streamable_http_client::StreamableHttpError,
};

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream {name} is not connected ({reason}); try again shortly")]
    NotConnected {
        name: String,
        #[source]
        reason: Unreachable,
    },
    #[error("upstream {name} did not accept the call: {source}")]
    Send {
        name: String,
        #[source]
        source: ServiceError,
    },
    /// A job adopted from another replica whose upstream task this replica cannot follow.
    #[error("the upstream task of this job cannot be followed from this replica: {why}")]
    NotReattachable { why: String },
}

/// Why an upstream has no connection right now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unreachable {
    #[error("the bridge is shutting down")]
    ShuttingDown,
    #[error("still connecting")]
    Connecting,
    #[error("connection lost")]
    Lost,
    /// The last attempt failed, or the last session ended, for this reason.
    #[error("{0}")]
    Failed(#[source] Arc<SessionError>),
}

/// Why a session with an upstream could not be started, or why it ended.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{0}")]
    Spawn(#[source] std::io::Error),
    #[error("MCP initialize failed: {source} (process {status})")]
    Initialize {
        status: String,
        #[source]
        source: Box<ClientInitializeError>,
    },
    #[error("MCP initialize timed out after {0:?}")]
    InitializeTimeout(Duration),
    /// `detail`: the error and its causes (see [`with_causes`]): the cause is what says what to
    /// fix (a refused connection, a certificate the bridge does not trust).
    #[error("cannot connect to {url}: {detail}")]
    Connect {
        url: String,
        detail: String,
        #[source]
        source: Box<ClientInitializeError>,
    },
    #[error("connecting to {url} timed out after {timeout:?}")]
    ConnectTimeout { url: String, timeout: Duration },
    #[error("cannot set up an HTTP client: {0}")]
    HttpClient(#[source] reqwest_rmcp::Error),
    #[error("ca_file: {0}")]
    CaFile(#[source] crate::tls::CaFileError),
    /// A session that was up ended: the child exited, the connection closed, a health check
    /// failed, or the bridge stopped it. The bridge's own account of it.
    #[error("{0}")]
    Ended(String),
}

/// Why a Streamable HTTP handshake failed, down to the cause: for a transport error, the HTTP
/// client's error and its causes, without rmcp's wrappers (which name the transport's Rust
/// type, and hide the causes: neither `TransportError`'s `error` nor
/// `StreamableHttpError::Client` is marked as the source).
pub(super) fn initialize_detail(error: &ClientInitializeError) -> String {
    let ClientInitializeError::TransportError { error, context } = error else {
        return with_causes(error);
    };
    let transport = error.error.as_ref();
    let detail = match transport.downcast_ref::<StreamableHttpError<reqwest_rmcp::Error>>() {
        Some(StreamableHttpError::Client(client)) => with_causes(client),
        _ => with_causes(transport),
    };
    format!("{detail} (when {context})")
}

/// `error`'s message followed by those of its causes that it does not already include: the
/// HTTP client's "error sending request" says nothing of why, its causes do ("invalid peer
/// certificate: UnknownIssuer").
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let message = e.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn the_message_is_whole_and_the_cause_is_reachable() {
        let spawn = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file: mcp-x");
        let error = UpstreamError::NotConnected {
            name: "files".into(),
            reason: Unreachable::Failed(Arc::new(SessionError::Spawn(spawn))),
        };
        assert_eq!(
            error.to_string(),
            "upstream files is not connected (no such file: mcp-x); try again shortly"
        );
        let io = error
            .source()
            .and_then(|unreachable| unreachable.source())
            .and_then(|session| session.source())
            .and_then(|io| io.downcast_ref::<std::io::Error>())
            .expect("the I/O error is the source at the end of the chain");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);

        let connecting = UpstreamError::NotConnected {
            name: "files".into(),
            reason: Unreachable::Connecting,
        };
        assert_eq!(
            connecting.to_string(),
            "upstream files is not connected (still connecting); try again shortly"
        );
    }
}
