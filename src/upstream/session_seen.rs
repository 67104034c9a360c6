//! The upstream session a Streamable HTTP connection uses, as its HTTP client sees it: the
//! `Mcp-Session-Id` and `MCP-Protocol-Version` of its latest POST. rmcp keeps both inside its
//! transport worker and offers no way to read them (nor to give a new client an existing
//! session), so the bridge's HTTP client (`http_client.rs`) notes them for the re-attach
//! record of a call made as an upstream task (`model::Reattach`).

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use http::{HeaderName, HeaderValue};
use parking_lot::Mutex;

/// The header rmcp sends the negotiated revision in, after `initialize`.
pub(super) const PROTOCOL_HEADER: &str = "mcp-protocol-version";

/// The session of one connection; shared by its client (which writes it) and its calls.
#[derive(Clone, Default)]
pub(super) struct SessionSeen {
    latest: Arc<Mutex<Option<Seen>>>,
    /// A re-attachable task of this session was left unfinished (its job was handed over, or
    /// adopted after a pause): another replica follows it in this session, so the connection
    /// must not end the session (`DELETE`) when it closes.
    keep: Arc<AtomicBool>,
}

/// One session, as a POST carried it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    pub session_id: Arc<str>,
    pub protocol: Option<String>,
}

impl SessionSeen {
    /// Note the session of a POST about to be sent (none: the handshake, or a session-less
    /// upstream, which leaves the last one noted).
    pub(super) fn note(
        &self,
        session_id: Option<&Arc<str>>,
        headers: &HashMap<HeaderName, HeaderValue>,
    ) {
        let Some(session_id) = session_id else {
            return;
        };
        let protocol = headers
            .get(PROTOCOL_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut latest = self.latest.lock();
        if latest
            .as_ref()
            .is_none_or(|s| s.session_id != *session_id || s.protocol != protocol)
        {
            *latest = Some(Seen {
                session_id: session_id.clone(),
                protocol,
            });
        }
    }

    /// The session of the latest POST.
    pub(super) fn get(&self) -> Option<Seen> {
        self.latest.lock().clone()
    }

    /// Leave the session to the upstream's own expiry: another replica follows a task in it.
    pub(super) fn keep(&self) {
        self.keep.store(true, Ordering::Release);
    }

    /// Whether closing the connection must leave its session open ([`SessionSeen::keep`]).
    pub(super) fn kept(&self) -> bool {
        self.keep.load(Ordering::Acquire)
    }
}
