//! MCP sessions as the HTTP side sees them, around rmcp's session handling: who may use a
//! session, how many there may be, and telling the front door when one ends
//! (docs/design/auth.md).
//!
//! - **Bound to a principal.** `Mcp-Session-Id` is `<nonce>.<tag>`, the tag a capability token
//!   (scope `mcp-session`) for `<nonce>:<principal>` minted in [`BridgeSessions::create_session`]
//!   under [`SessionGate::pass`]; another principal's credential gets 404, as for an unknown session.
//! - **Bounded.** At `limits.max_sessions`, or `limits.max_sessions_per_principal` of the
//!   caller's, an `initialize` gets 503; one larger than `limits.max_initialize_bytes` gets 413.
//! - **Freed.** On `DELETE` (200; 404 for an unknown session), after `server.session_idle_secs`
//!   idle, or at shutdown; [`SessionEnded`] tells the front door *before* rmcp cancels the
//!   session's requests, so a sync call cut off leaves its job running.

use std::{
    collections::HashMap,
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Json,
    extract::Request,
    http::{HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures::Stream;
use prometheus::IntCounterVec;
use rmcp::{
    RoleServer,
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::{
        Transport, WorkerTransport,
        streamable_http_server::session::{
            RestoreOutcome, ServerSseMessage, SessionId, SessionManager, SessionStore,
            local::{
                LocalSessionManager, LocalSessionManagerError, LocalSessionWorker, SessionConfig,
                create_local_session,
            },
        },
    },
};
use serde_json::json;

use crate::{
    auth::{JobTokens, TokenScope},
    config::LimitsConfig,
    metrics::{Metrics, Refusal, RefusedRequests},
    model::Principal,
};

/// The `Mcp-Session-Id` header.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// How long a client refused for `limits.max_sessions` is asked to wait.
const SESSION_LIMIT_RETRY: Duration = Duration::from_secs(10);

tokio::task_local! {
    /// The `initialize` being served, for [`BridgeSessions::create_session`]: its principal,
    /// and its admission, given back once its session is in the map.
    static OPENING: Arc<Opening>;
}

/// Told the id of a session that ended (however it ended). May be told twice.
pub type SessionEnded = Arc<dyn Fn(&str) + Send + Sync>;

/// rmcp's local session manager, with session ids bound to a principal and each session's end
/// reported (see the module doc).
pub struct BridgeSessions {
    local: LocalSessionManager,
    tokens: JobTokens,
    ended: SessionEnded,
    /// Whose each session is, for the per-principal bound; entries of sessions no longer in
    /// rmcp's map are dropped whenever it is counted ([`BridgeSessions::count_of`]).
    owners: parking_lot::Mutex<HashMap<SessionId, Principal>>,
}

impl BridgeSessions {
    /// `idle`: `server.session_idle_secs`; `tokens` sign the ids; `ended` is told of every
    /// session that ends.
    pub fn new(idle: Duration, tokens: JobTokens, ended: SessionEnded) -> Self {
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(idle);
        Self {
            local,
            tokens,
            ended,
            owners: parking_lot::Mutex::default(),
        }
    }

    /// Sessions open in this replica; `None` while one is being added or removed (never wait
    /// in a metrics scrape).
    pub fn try_count(&self) -> Option<usize> {
        self.local.sessions.try_read().ok().map(|s| s.len())
    }

    /// Sessions open in this replica and admitted ones not yet in it, in all and those of
    /// `principal`. Read under the map's lock, under which [`BridgeSessions::create_session`]
    /// moves a session from `opening` to the map: each is counted once.
    async fn count_of(&self, principal: &Principal, opening: &Openings) -> (usize, usize) {
        let sessions = self.local.sessions.read().await;
        let mut owners = self.owners.lock();
        owners.retain(|id, _| sessions.contains_key(id));
        let own = owners.values().filter(|p| *p == principal).count();
        let (all, by) = opening.counts(principal);
        (sessions.len() + all, own + by)
    }

    /// A new session id for `principal`.
    fn mint(&self, principal: &Principal) -> SessionId {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).expect("the operating system's random number generator failed");
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        // No expiry of its own: a session ends when it idles (`server.session_idle_secs`).
        let tag = self.tokens.mint_until(
            TokenScope::McpSession,
            &tag_message(&nonce, principal),
            u64::MAX,
        );
        format!("{nonce}.{tag}").into()
    }

    /// Whether `id` is a session id minted for `principal` (by any replica with the same key).
    pub fn belongs(&self, id: &str, principal: &Principal) -> bool {
        let Some((nonce, tag)) = id.split_once('.') else {
            return false;
        };
        nonce.len() == 32
            && nonce.bytes().all(|b| b.is_ascii_hexdigit())
            && self
                .tokens
                .verify(TokenScope::McpSession, &tag_message(nonce, principal), tag)
    }

    fn watched(&self, id: SessionId, transport: WorkerTransport<LocalSessionWorker>) -> Watched {
        Watched {
            inner: transport,
            id,
            ended: Some(self.ended.clone()),
        }
    }
}

fn tag_message(nonce: &str, principal: &Principal) -> String {
    format!("{nonce}:{principal}")
}

impl SessionManager for BridgeSessions {
    type Error = LocalSessionManagerError;
    type Transport = Watched;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // Outside `gate` (no principal in scope) only the open bridge's one principal fits.
        let opening = OPENING.try_with(Arc::clone).ok();
        let principal = opening
            .as_ref()
            .map_or_else(Principal::anonymous, |o| o.principal.clone());
        let id = self.mint(&principal);
        let config: SessionConfig = self.local.session_config.clone();
        let (handle, worker) = create_local_session(id.clone(), config);
        // The map, its owner and the end of its admission change together (see `count_of`).
        let mut sessions = self.local.sessions.write().await;
        sessions.insert(id.clone(), handle);
        self.owners.lock().insert(id.clone(), principal);
        if let Some(opening) = opening {
            opening.landed();
        }
        drop(sessions);
        let transport = self.watched(id.clone(), WorkerTransport::spawn(worker));
        Ok((id, transport))
    }

    fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
        self.local.initialize_session(id, message)
    }

    fn has_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.local.has_session(id)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        // Before rmcp cancels the session's requests: see the module doc.
        (self.ended)(id);
        self.local.close_session(id).await
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.local.create_stream(id, message)
    }

    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.local.accept_message(id, message)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.local.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.local.resume(id, last_event_id)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.local.restore_session(id.clone()).await? {
            RestoreOutcome::Restored(transport) => {
                RestoreOutcome::Restored(self.watched(id, transport))
            }
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }
}

/// A session's transport, which tells [`SessionEnded`] when the session's worker stops (a
/// `DELETE`, the idle timer): rmcp's service reads the end here before it cancels the
/// session's requests.
pub struct Watched {
    inner: WorkerTransport<LocalSessionWorker>,
    id: SessionId,
    ended: Option<SessionEnded>,
}

impl Transport<RoleServer> for Watched {
    type Error = <WorkerTransport<LocalSessionWorker> as Transport<RoleServer>>::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let message = self.inner.receive().await;
        if message.is_none()
            && let Some(ended) = self.ended.take()
        {
            ended(&self.id);
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Where the sessions are: this replica's, and, with Redis, the records any replica can
/// restore a session from.
#[derive(Clone)]
pub struct SessionLookup {
    pub local: Arc<BridgeSessions>,
    pub shared: Option<Arc<dyn SessionStore>>,
}

impl SessionLookup {
    /// Whether `id` names a session this bridge would serve. A shared record that cannot be
    /// read counts as none (the client initializes again).
    async fn exists(&self, id: &str) -> bool {
        let session: SessionId = id.into();
        if self.local.has_session(&session).await.unwrap_or(false) {
            return true;
        }
        match &self.shared {
            Some(store) => matches!(store.load(id).await, Ok(Some(_))),
            None => false,
        }
    }
}

/// What [`gate`] needs: the sessions, the bounds, and where refusals are counted.
#[derive(Clone)]
pub struct SessionGate {
    sessions: SessionLookup,
    max_sessions: usize,
    max_per_principal: usize,
    max_initialize_bytes: usize,
    /// `initialize` requests admitted whose session is not in the map yet, in all and by
    /// principal.
    opening: Arc<Openings>,
    /// Admissions one at a time, so that two cannot both take the last place.
    admitting: Arc<tokio::sync::Mutex<()>>,
    refused: RefusedRequests,
    /// `bridge_limit_hits_total{limit}`.
    limit_hits: IntCounterVec,
}

#[derive(Default)]
struct Openings {
    all: AtomicUsize,
    by: parking_lot::Mutex<HashMap<Principal, usize>>,
}

impl Openings {
    /// Admitted in all, and those of `principal`.
    fn counts(&self, principal: &Principal) -> (usize, usize) {
        let by = self.by.lock().get(principal).copied().unwrap_or(0);
        (self.all.load(Ordering::Acquire), by)
    }

    fn add(&self, principal: &Principal) {
        self.all.fetch_add(1, Ordering::AcqRel);
        *self.by.lock().entry(principal.clone()).or_default() += 1;
    }

    fn remove(&self, principal: &Principal) {
        self.all.fetch_sub(1, Ordering::AcqRel);
        let mut by = self.by.lock();
        if let Some(n) = by.get_mut(principal) {
            *n -= 1;
            if *n == 0 {
                by.remove(principal);
            }
        }
    }
}

/// Which bound refused an `initialize`.
enum SessionsFull {
    Total,
    Principal,
}

impl SessionGate {
    pub fn new(sessions: SessionLookup, limits: &LimitsConfig, metrics: &Metrics) -> Self {
        Self {
            sessions,
            max_sessions: limits.max_sessions,
            max_per_principal: limits.sessions_per_principal(),
            max_initialize_bytes: limits.max_initialize_bytes,
            opening: Arc::default(),
            admitting: Arc::default(),
            refused: metrics.refused.clone(),
            limit_hits: metrics.limit_hits.clone(),
        }
    }

    /// A place for one more session of `principal`, held until its session is in rmcp's map
    /// (where it is counted from then on) or its `initialize` has been answered without one.
    async fn admit(&self, principal: &Principal) -> Result<Arc<Opening>, SessionsFull> {
        let _turn = self.admitting.lock().await;
        let (all, own) = self.sessions.local.count_of(principal, &self.opening).await;
        if all >= self.max_sessions {
            return Err(SessionsFull::Total);
        }
        // With `/mcp` open every caller is the one anonymous principal: the total is its bound.
        if *principal != Principal::anonymous() && own >= self.max_per_principal {
            return Err(SessionsFull::Principal);
        }
        self.opening.add(principal);
        Ok(Arc::new(Opening {
            openings: self.opening.clone(),
            principal: principal.clone(),
            pending: AtomicBool::new(true),
        }))
    }
}

/// An admitted `initialize`: counted in [`Openings`] until its session is in the map or it is
/// dropped, whichever comes first.
struct Opening {
    openings: Arc<Openings>,
    principal: Principal,
    pending: AtomicBool,
}

impl Opening {
    /// Its session is in the map: no longer counted as admitted.
    fn landed(&self) {
        if self.pending.swap(false, Ordering::AcqRel) {
            self.openings.remove(&self.principal);
        }
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        self.landed();
    }
}

impl SessionGate {
    /// A session used by its own principal only, an `initialize` (`initialize_bytes`: its
    /// size) admitted within the bounds, and `DELETE` answered as the MCP clients expect;
    /// `serve` serves what passes (`mcp_layer`).
    pub(super) async fn pass<F: Future<Output = Response>>(
        &self,
        request: Request,
        principal: &Principal,
        initialize_bytes: Option<usize>,
        serve: impl FnOnce(Request) -> F,
    ) -> Response {
        // Without the header (or with one that is not text) rmcp says what is missing.
        let id = request
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if let Some(id) = id {
            return self.to_session(&id, principal, request, serve).await;
        }
        let Some(size) = initialize_bytes else {
            return serve(request).await;
        };
        if size > self.max_initialize_bytes {
            self.refused.count(Refusal::BodySize);
            return refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the initialize request is larger than {} bytes (limits.max_initialize_bytes): \
                     a session keeps it for its whole life; send a smaller one",
                    self.max_initialize_bytes
                ),
            );
        }
        match self.admit(principal).await {
            Ok(opening) => OPENING.scope(opening, serve(request)).await,
            Err(full) => self.session_limit(full),
        }
    }

    /// The 503 for an `initialize` past a session bound, naming it.
    fn session_limit(&self, full: SessionsFull) -> Response {
        self.refused.count(Refusal::SessionLimit);
        let (key, message) = match full {
            SessionsFull::Total => (
                "max_sessions",
                format!(
                    "this bridge holds {} MCP sessions, its limit (limits.max_sessions); retry \
                     later, and end sessions you no longer use with DELETE",
                    self.max_sessions
                ),
            ),
            SessionsFull::Principal => (
                "max_sessions_per_principal",
                format!(
                    "this caller holds {} MCP sessions, its share (limits.max_sessions_per_principal); \
                     end sessions you no longer use with DELETE, or retry later",
                    self.max_per_principal
                ),
            ),
        };
        self.limit_hits.with_label_values(&[key]).inc();
        let mut response = refusal(StatusCode::SERVICE_UNAVAILABLE, message);
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(SESSION_LIMIT_RETRY.as_secs()),
        );
        response
    }

    /// A request that names session `id`: only its own principal's passes (another's is told
    /// the session is unknown), and a `DELETE` of a live session answers 200.
    async fn to_session<F: Future<Output = Response>>(
        &self,
        id: &str,
        principal: &Principal,
        request: Request,
        serve: impl FnOnce(Request) -> F,
    ) -> Response {
        if !self.sessions.local.belongs(id, principal) {
            self.refused.count(Refusal::Auth);
            return unknown_session();
        }
        if request.method() != Method::DELETE {
            return serve(request).await;
        }
        if !self.sessions.exists(id).await {
            return unknown_session();
        }
        let response = serve(request).await;
        if response.status() == StatusCode::ACCEPTED {
            return StatusCode::OK.into_response();
        }
        response
    }
}

/// A refused `initialize`, as a JSON-RPC error.
fn refusal(status: StatusCode, message: String) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": null, "error": {
        "code": -32000,
        "message": message,
    } });
    (status, Json(body)).into_response()
}

/// 404 for a session that is not (or no longer) here: the client initializes again.
pub fn unknown_session() -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": null, "error": {
        "code": -32600,
        "message": "no such MCP session: it was closed, expired, or never existed here; send initialize to start a new one",
    } });
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> BridgeSessions {
        BridgeSessions::new(
            Duration::from_secs(60),
            JobTokens::new(b"0123456789abcdef0123456789abcdef"),
            Arc::new(|_: &str| {}),
        )
    }

    #[test]
    fn a_session_id_belongs_to_its_principal_only() {
        let sessions = sessions();
        let alice = Principal::token("alice");
        let bob = Principal::token("bob");
        let id = sessions.mint(&alice);
        assert!(sessions.belongs(&id, &alice));
        assert!(!sessions.belongs(&id, &bob));
        assert!(!sessions.belongs(&id, &Principal::anonymous()));
        // Another key (another deployment) does not recognise it.
        let other = BridgeSessions::new(
            Duration::from_secs(60),
            JobTokens::new(b"another secret, another secret!!"),
            Arc::new(|_: &str| {}),
        );
        assert!(!other.belongs(&id, &alice));
        // Ids of another shape (rmcp's UUIDs, tampered nonces) belong to nobody.
        assert!(!sessions.belongs("7f1c0f8e-8f3b-4f0e-9d7a-1d2c3b4a5f6e", &alice));
        let (nonce, tag) = id.split_once('.').unwrap();
        let flipped = if nonce.starts_with('0') { "1" } else { "0" };
        assert!(!sessions.belongs(&format!("{flipped}{}.{tag}", &nonce[1..]), &alice));
        assert_ne!(sessions.mint(&alice), id, "ids are random");
    }
}
