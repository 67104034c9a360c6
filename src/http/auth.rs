//! Who may use which endpoint, checked before any handler runs (docs/design/auth.md).
//!
//! - `/mcp`: a credential (a static token of `auth.mcp_tokens` or a JWT of `auth.issuers`),
//!   else 401 with `WWW-Authenticate`; then the caller's request rate (429). The verified
//!   [`Identity`] travels on in the request's extensions; the `Authorization` header does not.
//! - Job and correlation URLs: that one's capability token (`?token=`), or a credential that
//!   opens only the caller's own jobs (`auth::may_access`). A missing or wrong token and
//!   another caller's job answer exactly like an unknown job (404).
//! - `/upstreams`, `/metrics`: a static token or an admin, unless on the admin listener; with
//!   `/mcp` open, loopback clients only.
//! - `/.well-known/oauth-protected-resource[/mcp]` (RFC 9728): open, when issuers are set.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use axum::{
    Json,
    extract::{ConnectInfo, MatchedPath, Path, Query, Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use prometheus::IntCounterVec;
use serde::Deserialize;
use serde_json::json;

use super::{
    error::ApiError,
    limits::{
        AddressKey, CallRates, JobRates, SUBSCRIBER_RETRY_AFTER, SubscriberPermit, Subscribers,
    },
};
use crate::{
    auth::{
        Authenticator, CurrentAuthenticator, Identity, JobTokens, PolicyError, ProtectedResource,
        Rejection, TokenScope, may_access,
    },
    config::Config,
    events::Broker,
    metrics::{Metrics, Refusal, RefusedRequests},
    model::JobId,
};

/// The realm named in `WWW-Authenticate`.
const REALM: &str = "mcp-progress-bridge";
/// What a request refused because the issuer's keys cannot be fetched is told.
const KEYS_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Everything the access checks need; a cheap handle.
#[derive(Clone)]
pub struct Guard {
    pub authn: Arc<CurrentAuthenticator>,
    /// The Protected Resource Metadata, when issuers are configured.
    pub resource: Option<Arc<ProtectedResource>>,
    pub job_tokens: JobTokens,
    pub require_job_tokens: bool,
    pub rates: Arc<CallRates>,
    /// The request rate of the job and correlation routes, per principal or per address.
    pub job_rates: Arc<JobRates>,
    pub subscribers: Arc<Subscribers>,
    /// CORS for the job routes (`server.cors_origins`); none by default.
    pub cors: Option<tower_http::cors::CorsLayer>,
    /// `bridge_auth_rejections_total{reason}`.
    rejections: IntCounterVec,
    /// `bridge_requests_refused_total{reason}`.
    pub refused: RefusedRequests,
    /// `bridge_limit_hits_total{limit}`.
    limit_hits: IntCounterVec,
}

/// How a job or correlation URL was opened.
#[derive(Debug, Clone)]
pub enum JobAccess {
    /// A capability token, or no token needed (`auth.require_job_tokens = false`): the URL's
    /// job or correlation whoever started it.
    Capability,
    /// A credential: the caller's own jobs only (an admin's, all).
    Caller(Arc<Identity>),
}

impl Guard {
    pub fn new(
        config: &Config,
        job_tokens: JobTokens,
        metrics: &Metrics,
    ) -> Result<Self, PolicyError> {
        Ok(Self {
            authn: Arc::new(CurrentAuthenticator::new(Authenticator::new(
                config, metrics,
            )?)),
            resource: ProtectedResource::from_config(config).map(Arc::new),
            job_tokens,
            require_job_tokens: config.auth.require_job_tokens,
            rates: CallRates::new(&config.limits),
            job_rates: JobRates::new(&config.limits),
            subscribers: Subscribers::new(&config.limits),
            cors: super::origins::cors(&config.server),
            rejections: metrics.auth_rejections.clone(),
            refused: metrics.refused.clone(),
            limit_hits: metrics.limit_hits.clone(),
        })
    }

    fn authorization(headers: &HeaderMap) -> Option<&[u8]> {
        headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes)
    }

    /// The caller of a request, counting a refusal by its reason.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Identity>, Rejection> {
        let result = self.authn.authenticate(Self::authorization(headers)).await;
        if let Err(rejection) = &result {
            self.rejections
                .with_label_values(&[rejection.label()])
                .inc();
            self.refused.count(Refusal::Auth);
        }
        result
    }

    /// 401 with the challenge a client needs (RFC 6750, and RFC 9728's `resource_metadata`);
    /// 503 when the fault is the issuer's keys, not the token.
    fn refuse(&self, rejection: Rejection) -> Response {
        if rejection.is_unavailable() {
            return retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                rejection.label(),
                rejection.to_string(),
                KEYS_RETRY_AFTER,
            );
        }
        let mut challenge = format!("Bearer realm=\"{REALM}\"");
        if let Some(resource) = &self.resource {
            challenge.push_str(&format!(
                ", resource_metadata=\"{}\"",
                resource.metadata_url
            ));
        }
        if !rejection.is_missing() {
            challenge.push_str(&format!(
                ", error=\"invalid_token\", error_description=\"{rejection}\""
            ));
        }
        let body = json!({ "error": {
            "code": "unauthorized",
            "reason": rejection.label(),
            "message": rejection.to_string(),
        } });
        let mut response = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

impl Guard {
    /// The caller of an `/mcp` request, or its refusal: the credential (401, or 503 when the
    /// issuer's keys cannot be had), then the caller's rate (429).
    pub(super) async fn mcp_caller(&self, headers: &HeaderMap) -> Result<Arc<Identity>, Response> {
        let identity = self
            .authenticate(headers)
            .await
            .map_err(|r| self.refuse(r))?;
        if let Err(wait) = self.rates.check(&identity.principal) {
            self.refused.count(Refusal::RateLimit);
            return Err(retry_later(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many requests for this caller (limits.calls_per_minute); slow down and retry after the time in Retry-After".into(),
                wait,
            ));
        }
        Ok(identity)
    }

    /// The job and correlation routes' request rate: per principal for a caller with a
    /// credential, else per client address (a capability reader, or a request whose token or
    /// credential opens nothing). `Some`: the 429 to answer.
    fn check_job_rate(&self, access: Option<&JobAccess>, request: &Request) -> Option<Response> {
        let (over, key, whom) = match access {
            Some(JobAccess::Caller(identity)) => (
                self.job_rates.per_principal.check(&identity.principal),
                "job_requests_per_minute",
                "caller",
            ),
            _ => {
                let ip = client_ip(request)?;
                (
                    self.job_rates.per_address.check(&AddressKey::of(ip)),
                    "job_requests_per_minute_per_address",
                    "client address",
                )
            }
        };
        let wait = over.err()?;
        self.refused.count(Refusal::JobRateLimit);
        self.limit_hits.with_label_values(&[key]).inc();
        Some(retry_later(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!(
                "too many requests to job and correlation URLs from this {whom} \
                 (limits.{key}); slow down and retry after the time in Retry-After"
            ),
            wait,
        ))
    }
}

/// A refusal that says when to come back.
fn retry_later(status: StatusCode, code: &str, message: String, after: Duration) -> Response {
    let secs = after.as_secs_f64().ceil().max(1.0) as u64;
    let body = json!({ "error": { "code": code, "message": message, "retry_after_secs": secs } });
    let mut response = (status, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}

/// In front of `/upstreams` and `/metrics` on the main listener: a static token (the
/// operator's kind of credential) or an admin; with `/mcp` open (no credential to check),
/// loopback clients only.
pub async fn admin_guard(State(guard): State<Guard>, mut request: Request, next: Next) -> Response {
    if guard.authn.is_open() {
        return if from_loopback(&request) {
            next.run(request).await
        } else {
            ApiError::Forbidden(
                "with /mcp open (no auth.mcp_tokens or auth.issuers), /upstreams and /metrics \
                 answer loopback clients only; set server.admin_listen to serve them on an \
                 address of their own, or configure a token"
                    .into(),
            )
            .into_response()
        };
    }
    match guard.authenticate(request.headers()).await {
        Ok(identity) if identity.admin || identity.principal.token_name().is_some() => {
            // `/upstreams` shows a caller the tools its policies let it use.
            request.headers_mut().remove(header::AUTHORIZATION);
            request.extensions_mut().insert(identity);
            next.run(request).await
        }
        Ok(_) => ApiError::Forbidden(
            "these operational endpoints need a static token of auth.mcp_tokens or an admin \
             (auth.admin); a caller's own token does not open them"
                .into(),
        )
        .into_response(),
        Err(rejection) => guard.refuse(rejection),
    }
}

/// Whether the request came from a loopback address (IPv4 `127.0.0.0/8`, IPv6 `::1`, or an
/// IPv4 loopback address mapped into IPv6). A request whose peer is unknown is not.
fn from_loopback(request: &Request) -> bool {
    match peer_ip(request) {
        Some(IpAddr::V6(v6)) => v6
            .to_ipv4_mapped()
            .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
        Some(ip) => ip.is_loopback(),
        None => false,
    }
}

/// The address the per-address limits count: the one a trusted proxy forwards, else the peer's.
fn client_ip(request: &Request) -> Option<IpAddr> {
    match request.extensions().get::<super::serve::ClientIp>() {
        Some(client) => Some(client.0),
        None => peer_ip(request),
    }
}

/// The peer's address (the socket's), when the server recorded it.
fn peer_ip(request: &Request) -> Option<IpAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip())
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`: the metadata (RFC 9728). Public: it is
/// how a client without a token learns where to get one; any origin may read it.
pub async fn protected_resource(State(guard): State<Guard>) -> Response {
    match &guard.resource {
        Some(resource) => (
            [(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")],
            Json(resource.document.clone()),
        )
            .into_response(),
        None => ApiError::NotFound.into_response(),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct TokenQuery {
    token: Option<String>,
}

/// What the job guard needs: who may open what, and where a job's owner is looked up.
#[derive(Clone)]
pub struct JobGate {
    pub guard: Guard,
    pub broker: Arc<dyn Broker>,
}

/// What a job route opens, from the route that matched.
fn scope_of(route: &str) -> Option<(TokenScope, &'static str, bool)> {
    // (scope, path parameter, is an event stream)
    match route {
        "/jobs/{id}" => Some((TokenScope::JobRead, "id", false)),
        "/jobs/{id}/events" => Some((TokenScope::JobRead, "id", true)),
        "/jobs/{id}/cancel" => Some((TokenScope::JobCancel, "id", false)),
        "/jobs/{id}/input" => Some((TokenScope::JobInput, "id", false)),
        "/correlations/{cid}/events" => Some((TokenScope::Correlation, "cid", true)),
        _ => None,
    }
}

/// In front of the job and correlation routes (a route layer: it runs after routing, so it
/// knows which route and which ID). Records how the URL was opened ([`JobAccess`]) for the
/// handler.
pub async fn job_guard(
    State(state): State<JobGate>,
    route: Option<MatchedPath>,
    path: Result<Path<HashMap<String, String>>, axum::extract::rejection::PathRejection>,
    query: Result<Query<TokenQuery>, axum::extract::rejection::QueryRejection>,
    request: Request,
    next: Next,
) -> Response {
    let Some((scope, param, stream)) = route.as_ref().and_then(|r| scope_of(r.as_str())) else {
        return ApiError::NotFound.into_response();
    };
    // A path that does not decode to text names no job: the answer for unknown ones.
    let Some(id) = path.ok().and_then(|Path(mut p)| p.remove(param)) else {
        return ApiError::NotFound.into_response();
    };
    let Ok(Query(query)) = query else {
        return ApiError::BadRequest(
            "the query string is malformed: use ?token=...&last_event_id=... with each at most once"
                .into(),
        )
        .into_response();
    };
    let access = job_access(
        &state,
        scope,
        &id,
        query.token.as_deref(),
        request.headers(),
    )
    .await;
    if let Some(refused) = state.guard.check_job_rate(access.as_ref(), &request) {
        return refused;
    }
    let Some(access) = access else {
        return ApiError::NotFound.into_response();
    };
    // Streams are counted per channel; a correlation read with a credential is that caller's
    // own channel, so another caller cannot fill its places. And per reader: its principal,
    // or a capability reader's address.
    let channel = match (&access, scope) {
        (JobAccess::Caller(identity), TokenScope::Correlation) => {
            format!("{}:{id}:{}", scope.label(), identity.principal)
        }
        _ => format!("{}:{id}", scope.label()),
    };
    let reader = match &access {
        JobAccess::Caller(identity) => format!("principal:{}", identity.principal),
        JobAccess::Capability => match client_ip(&request) {
            Some(ip) => format!("address:{:?}", AddressKey::of(ip)),
            None => "address:unknown".into(),
        },
    };
    let mut request = request;
    request.headers_mut().remove(header::AUTHORIZATION);
    request.extensions_mut().insert(access);
    if !stream {
        return next.run(request).await;
    }
    serve_stream(&state.guard, (channel, reader), request, next).await
}

/// How a job or correlation URL is opened, or `None` (404): its capability token (or none
/// needed), else the request's credential, for a job only if the caller may see it
/// (`auth::may_access`). A store that cannot answer counts as no access: the reader retries.
async fn job_access(
    state: &JobGate,
    scope: TokenScope,
    id: &str,
    token: Option<&str>,
    headers: &HeaderMap,
) -> Option<JobAccess> {
    let guard = &state.guard;
    let capability = !guard.require_job_tokens
        || token.is_some_and(|token| guard.job_tokens.verify(scope, id, token));
    if capability {
        return Some(JobAccess::Capability);
    }
    // An open `/mcp` has no credentials to show: only capability tokens open job URLs.
    if guard.authn.is_open() || Guard::authorization(headers).is_none() {
        guard.refused.count(Refusal::Auth);
        return None;
    }
    // A refused credential is counted by `authenticate`.
    let identity = guard.authenticate(headers).await.ok()?;
    if scope != TokenScope::Correlation
        && let Ok(job) = id.parse::<JobId>()
    {
        let snapshot = state.broker.snapshot(job).await.ok().flatten()?;
        if !may_access(&identity, &snapshot) {
            guard.refused.count(Refusal::Auth);
            return None;
        }
    }
    Some(JobAccess::Caller(identity))
}

/// Serve an SSE route holding one of `channel`'s subscriber places for as long as the stream
/// lives; with no place left, tell the client to come back later. The place travels to the
/// handler in the request's extensions ([`StreamPlace`]) and the stream holds it: no second
/// body wrapper around the stream, polled on every frame, only to hold it.
async fn serve_stream(
    guard: &Guard,
    (channel, reader): (String, String),
    request: Request,
    next: Next,
) -> Response {
    let permit = match guard.subscribers.try_open(channel, reader) {
        Ok(permit) => permit,
        Err(full) => {
            guard.refused.count(Refusal::SubscriberLimit);
            guard.limit_hits.with_label_values(&[full.key()]).inc();
            return retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_subscribers",
                full.to_string(),
                SUBSCRIBER_RETRY_AFTER,
            );
        }
    };
    let mut request = request;
    request.extensions_mut().insert(StreamPlace::new(permit));
    // A handler that answers anything but a stream leaves the place in the request, dropped
    // with it: the place is given back at once.
    next.run(request).await
}

/// A stream's subscriber place on its way from the guard to the stream that holds it (request
/// extensions must be `Clone`; the place is taken out once).
#[derive(Clone)]
pub struct StreamPlace(Arc<parking_lot::Mutex<Option<SubscriberPermit>>>);

impl StreamPlace {
    fn new(permit: SubscriberPermit) -> Self {
        Self(Arc::new(parking_lot::Mutex::new(Some(permit))))
    }

    /// The place, for the stream to hold (`None` if it was taken already).
    pub fn take(&self) -> Option<SubscriberPermit> {
        self.0.lock().take()
    }
}
