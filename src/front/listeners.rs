//! Who is listening, and for what: the MCP sessions of clients on handshake revisions (each
//! has a peer to notify, a log level, and the resource URIs it subscribed to), and the
//! `subscriptions/listen` requests of session-less clients (each a sink that carries only what
//! it asked for). One task fans list changes and resource updates out to them.
//!
//! Upstream connections are shared by all callers, so per-caller state lives here: a caller's
//! subscription to a URI is one count on the upstream's own subscription, released when the
//! caller unsubscribes, its session closes or its listen request ends (at most
//! `limits.max_resource_subscriptions` URIs each). A session's state is made by whichever
//! comes first: its `notifications/initialized`, or a request that needs it (rmcp may run a
//! request before the handshake's notification; see docs/design/mcp-asks.md).

// MCP logging is deprecated (SEP-2577) but clients still set levels; the bridge honours them.
#![allow(deprecated)]

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use parking_lot::Mutex;

use rmcp::{
    ErrorData, RoleServer,
    model::{LoggingLevel, ResourceUpdatedNotificationParam},
    service::{Peer, SubscriptionSink},
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, watch};

use super::{capabilities, resources};
use crate::{
    jobs::{JobQuota, QuotaPermit},
    metrics::Metrics,
    model::Principal,
    shutdown::Tasks,
    upstream::{ListKind, ResourceUpdated, Upstreams},
};

/// Changes come in bursts (an upstream restarting goes down, comes up and lists everything),
/// so they are gathered for a moment and announced once.
const ANNOUNCE_DELAY: Duration = Duration::from_millis(200);

/// One subscription of a caller: the URI it used, and what it is upstream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Followed {
    upstream: String,
    uri: String,
}

struct Session {
    peer: Peer<RoleServer>,
    level: Option<LoggingLevel>,
    /// By the URI the caller used.
    subscriptions: HashMap<String, Followed>,
}

struct Listener {
    sink: SubscriptionSink,
    subscriptions: HashMap<String, Followed>,
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, Session>,
    listeners: HashMap<u64, Listener>,
}

pub struct Listeners {
    state: Mutex<State>,
    next_listener: AtomicU64,
    next_anonymous: AtomicU64,
    upstreams: Upstreams,
    max_subscriptions: usize,
    metrics: Arc<Metrics>,
    /// Where a finished listen request's upstream subscriptions are given back.
    tasks: Tasks,
}

/// Ends a listener's registration (and its upstream subscriptions) when its request ends.
pub struct ListenerGuard {
    callers: Arc<Listeners>,
    id: u64,
}

impl Listeners {
    pub fn new(
        upstreams: Upstreams,
        max_subscriptions: usize,
        metrics: Arc<Metrics>,
        tasks: Tasks,
    ) -> Arc<Self> {
        let callers = Arc::new(Self {
            tasks,
            state: Mutex::new(State::default()),
            next_listener: AtomicU64::new(1),
            next_anonymous: AtomicU64::new(1),
            upstreams,
            max_subscriptions,
            metrics,
        });
        callers.count_sessions();
        callers
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// `bridge_mcp_session_states`: the sessions this keeps state for (they must go when
    /// rmcp's do).
    fn count_sessions(self: &Arc<Self>) {
        let callers = Arc::downgrade(self);
        self.metrics.gauge_fn(
            "bridge_mcp_session_states",
            "MCP sessions the bridge keeps state for (log level, subscriptions, list-change notices) in this replica",
            move || {
                let callers = callers.upgrade()?;
                let sessions = callers.state.try_lock()?.sessions.len();
                i64::try_from(sessions).ok()
            },
        );
    }

    /// Whether `session` is open (initialized and not ended).
    pub fn has_session(&self, session: &str) -> bool {
        self.state().sessions.contains_key(session)
    }

    /// A session ended (closed, idle, or the bridge stopping): forget it, and give back what
    /// it followed upstream. Called from rmcp's session handling, so it does not wait.
    pub fn end_session(self: &Arc<Self>, session: &str) {
        let Some(ended) = self.state().sessions.remove(session) else {
            return;
        };
        let followed: Vec<Followed> = ended.subscriptions.into_values().collect();
        if followed.is_empty() {
            return;
        }
        let callers = self.clone();
        // Unsubscribing upstream is a request: a short task of the HTTP stage.
        self.tasks
            .spawn_until_stopped(async move { callers.release(followed).await });
    }

    /// A session finished its handshake. `session` is its `Mcp-Session-Id` (none outside HTTP).
    /// State a request of the session made first is kept.
    pub async fn add_session(&self, session: Option<String>, peer: Peer<RoleServer>) {
        let key = session.unwrap_or_else(|| {
            format!(
                "anonymous-{}",
                self.next_anonymous.fetch_add(1, Ordering::Relaxed)
            )
        });
        let closed = {
            let mut state = self.state();
            let closed = take_closed(&mut state);
            joined(&mut state, &key, &peer);
            closed
        };
        self.release(closed).await;
    }

    /// Follow `session` (its `Mcp-Session-Id`) for a request of it that needs its state,
    /// whether or not its `notifications/initialized` has been handled yet. False for a
    /// request without a session and for a session whose transport has closed.
    pub fn join(&self, session: &str, peer: &Peer<RoleServer>) -> bool {
        !session.is_empty() && joined(&mut self.state(), session, peer).is_some()
    }

    /// `logging/setLevel` of a session.
    pub fn set_level(
        &self,
        session: &str,
        peer: &Peer<RoleServer>,
        level: LoggingLevel,
    ) -> Result<(), ErrorData> {
        let mut state = self.state();
        match joined_request(&mut state, session, peer) {
            Some(s) => {
                s.level = Some(level);
                Ok(())
            }
            None => Err(no_session("logging/setLevel")),
        }
    }

    /// The log level a session set, if any.
    pub fn level(&self, session: &str) -> Option<LoggingLevel> {
        self.state().sessions.get(session).and_then(|s| s.level)
    }

    /// `resources/subscribe` of a session to `uri` (as the caller names it).
    pub async fn subscribe(
        &self,
        session: &str,
        peer: &Peer<RoleServer>,
        uri: &str,
    ) -> Result<(), ErrorData> {
        let route = resources::route(&self.upstreams, uri)?;
        let followed = Followed {
            upstream: route.upstream.name().to_string(),
            uri: route.uri.clone(),
        };
        let subscribable = route
            .upstream
            .capabilities()
            .and_then(|c| c.resources)
            .is_some_and(|r| r.subscribe == Some(true));
        if !subscribable {
            return Err(ErrorData::invalid_params(
                format!(
                    "upstream {} does not offer resource subscriptions, so {uri:?} cannot be \
                     followed; read it again instead",
                    followed.upstream
                ),
                None,
            ));
        }
        {
            let mut state = self.state();
            let Some(s) = joined_request(&mut state, session, peer) else {
                return Err(no_session("resources/subscribe"));
            };
            if s.subscriptions.contains_key(uri) {
                return Ok(());
            }
            if s.subscriptions.len() >= self.max_subscriptions {
                self.limit_hit();
                return Err(too_many(self.max_subscriptions));
            }
        }
        route
            .upstream
            .subscribe(&route.uri)
            .await
            .map_err(|e| super::handle::upstream_error(e, "resources/subscribe"))?;
        let kept = {
            let mut state = self.state();
            match state.sessions.get_mut(session) {
                Some(s) if s.subscriptions.len() < self.max_subscriptions => s
                    .subscriptions
                    .insert(uri.to_string(), followed.clone())
                    .is_none(),
                _ => false,
            }
        };
        if !kept {
            // A race: the session closed, or subscribed twice at once. Give the count back.
            route.upstream.unsubscribe(&route.uri).await;
        }
        Ok(())
    }

    /// `resources/unsubscribe` of a session.
    pub async fn unsubscribe(&self, session: &str, uri: &str) -> Result<(), ErrorData> {
        let followed = {
            let mut state = self.state();
            let Some(s) = state.sessions.get_mut(session) else {
                return Err(no_session("resources/unsubscribe"));
            };
            s.subscriptions.remove(uri)
        };
        if let Some(followed) = followed {
            self.release(vec![followed]).await;
        }
        Ok(())
    }

    /// The URIs of a listen request the bridge can follow: those that lead to an upstream with
    /// subscriptions, at most `limits.max_resource_subscriptions`.
    pub fn followable(&self, requested: &[String]) -> Vec<String> {
        let mut accepted = Vec::new();
        for uri in requested {
            if accepted.len() >= self.max_subscriptions {
                self.limit_hit();
                tracing::info!(
                    requested = requested.len(),
                    limit = self.max_subscriptions,
                    "subscriptions/listen asked for more resources than limits.max_resource_subscriptions; the rest were not accepted"
                );
                break;
            }
            let Ok(route) = resources::route(&self.upstreams, uri) else {
                continue;
            };
            let subscribable = route
                .upstream
                .capabilities()
                .and_then(|c| c.resources)
                .is_some_and(|r| r.subscribe == Some(true));
            if subscribable && !accepted.contains(uri) {
                accepted.push(uri.clone());
            }
        }
        accepted
    }

    /// Register a listen request; it is served until the returned guard drops.
    pub async fn add_listener(self: &Arc<Self>, sink: SubscriptionSink) -> ListenerGuard {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        let uris = sink
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let mut subscriptions = HashMap::new();
        for uri in uris {
            let Ok(route) = resources::route(&self.upstreams, &uri) else {
                continue;
            };
            match route.upstream.subscribe(&route.uri).await {
                Ok(()) => {
                    subscriptions.insert(
                        uri,
                        Followed {
                            upstream: route.upstream.name().to_string(),
                            uri: route.uri,
                        },
                    );
                }
                Err(e) => {
                    tracing::info!(%uri, error = %e, "a listened-to resource could not be subscribed upstream")
                }
            }
        }
        self.state().listeners.insert(
            id,
            Listener {
                sink,
                subscriptions,
            },
        );
        ListenerGuard {
            callers: self.clone(),
            id,
        }
    }

    /// Give back the upstream subscriptions of callers that are gone.
    async fn release(&self, followed: Vec<Followed>) {
        for f in followed {
            if let Some(upstream) = self.upstreams.get(&f.upstream) {
                upstream.unsubscribe(&f.uri).await;
            }
        }
    }

    fn limit_hit(&self) {
        self.metrics
            .limit_hits
            .with_label_values(&["max_resource_subscriptions"])
            .inc();
    }

    /// Tell every session and listener that a list changed. Resources and prompts only when
    /// the bridge offers them at all (a client is told only of lists it can ask for).
    async fn announce(&self, kind: ListKind) {
        let offered = capabilities::union(&self.upstreams);
        let offers = match kind {
            ListKind::Tools => true,
            ListKind::Resources => offered.resources.is_some(),
            ListKind::Prompts => offered.prompts.is_some(),
        };
        if !offers {
            return;
        }
        let (peers, sinks, closed) = {
            let mut state = self.state();
            let closed = take_closed(&mut state);
            let peers: Vec<Peer<RoleServer>> =
                state.sessions.values().map(|s| s.peer.clone()).collect();
            let sinks: Vec<SubscriptionSink> =
                state.listeners.values().map(|l| l.sink.clone()).collect();
            (peers, sinks, closed)
        };
        self.release(closed).await;
        for peer in peers {
            let sent = match kind {
                ListKind::Tools => peer.notify_tool_list_changed().await,
                ListKind::Resources => peer.notify_resource_list_changed().await,
                ListKind::Prompts => peer.notify_prompt_list_changed().await,
            };
            if let Err(e) = sent {
                tracing::debug!(error = %e, list = kind.as_str(), "list_changed did not reach a session");
            }
        }
        for sink in sinks {
            // A listener that did not ask for this list refuses it: that is its filter working.
            let _ = match kind {
                ListKind::Tools => sink.notify_tool_list_changed().await,
                ListKind::Resources => sink.notify_resource_list_changed().await,
                ListKind::Prompts => sink.notify_prompt_list_changed().await,
            };
        }
    }

    /// Pass an upstream's `notifications/resources/updated` to the callers following it, each
    /// under the URI it subscribed with.
    async fn updated(&self, update: ResourceUpdated) {
        let followed = Followed {
            upstream: update.upstream,
            uri: update.uri,
        };
        let (peers, sinks) = {
            let state = self.state();
            let peers: Vec<(Peer<RoleServer>, String)> = state
                .sessions
                .values()
                .flat_map(|s| {
                    s.subscriptions
                        .iter()
                        .filter(|(_, f)| **f == followed)
                        .map(|(uri, _)| (s.peer.clone(), uri.clone()))
                })
                .collect();
            let sinks: Vec<(SubscriptionSink, String)> = state
                .listeners
                .values()
                .flat_map(|l| {
                    l.subscriptions
                        .iter()
                        .filter(|(_, f)| **f == followed)
                        .map(|(uri, _)| (l.sink.clone(), uri.clone()))
                })
                .collect();
            (peers, sinks)
        };
        for (peer, uri) in peers {
            if let Err(e) = peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await
            {
                tracing::debug!(error = %e, "resources/updated did not reach a session");
            }
        }
        for (sink, uri) in sinks {
            let _ = sink.notify_resource_updated(uri).await;
        }
    }

    /// Fan list changes and resource updates out until the upstreams are gone.
    pub async fn run(self: Arc<Self>) {
        let mut tools = self.upstreams.list_changes(ListKind::Tools);
        let mut resources = self.upstreams.list_changes(ListKind::Resources);
        let mut prompts = self.upstreams.list_changes(ListKind::Prompts);
        let mut updates = self.upstreams.resource_updates();
        loop {
            let kind = tokio::select! {
                changed = tools.changed() => changed.map(|()| Some(ListKind::Tools)),
                changed = resources.changed() => changed.map(|()| Some(ListKind::Resources)),
                changed = prompts.changed() => changed.map(|()| Some(ListKind::Prompts)),
                update = updates.recv() => match update {
                    Ok(update) => {
                        self.updated(update).await;
                        Ok(None)
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "resource updates came faster than they could be passed on; some were dropped");
                        Ok(None)
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            };
            let Ok(kind) = kind else { break };
            let Some(kind) = kind else { continue };
            tokio::time::sleep(ANNOUNCE_DELAY).await;
            // Everything that changed meanwhile goes out now, once.
            let receivers: [(&mut watch::Receiver<u64>, ListKind); 3] = [
                (&mut tools, ListKind::Tools),
                (&mut resources, ListKind::Resources),
                (&mut prompts, ListKind::Prompts),
            ];
            for (receiver, other) in receivers {
                let pending = receiver.has_changed().unwrap_or(false);
                if pending || other == kind {
                    receiver.mark_unchanged();
                    self.announce(other).await;
                }
            }
        }
    }
}

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        let listener = self.callers.state().listeners.remove(&self.id);
        if let Some(listener) = listener {
            let followed: Vec<Followed> = listener.subscriptions.into_values().collect();
            if followed.is_empty() {
                return;
            }
            let callers = self.callers.clone();
            // Unsubscribing upstream is a request: it cannot run in `drop`. A short task of
            // the HTTP stage, ended by the answers (or their timeout) or the stage stopping.
            self.callers
                .tasks
                .spawn_until_stopped(async move { callers.release(followed).await });
        }
    }
}

/// The state of `session`, made now if it has none yet (see the module doc); `None` when its
/// transport has closed (it ended: nothing is made for it).
fn joined<'a>(
    state: &'a mut State,
    session: &str,
    peer: &Peer<RoleServer>,
) -> Option<&'a mut Session> {
    if peer.is_transport_closed() {
        return state.sessions.get_mut(session);
    }
    Some(
        state
            .sessions
            .entry(session.to_string())
            .or_insert_with(|| Session {
                peer: peer.clone(),
                level: None,
                subscriptions: HashMap::new(),
            }),
    )
}

/// [`joined`] for a request, which names its session by `Mcp-Session-Id` (empty: it has
/// none, on the session-less revision or outside HTTP).
fn joined_request<'a>(
    state: &'a mut State,
    session: &str,
    peer: &Peer<RoleServer>,
) -> Option<&'a mut Session> {
    if session.is_empty() {
        return None;
    }
    joined(state, session, peer)
}

/// Remove closed sessions; what they followed is returned to be released.
fn take_closed(state: &mut State) -> Vec<Followed> {
    let mut released = Vec::new();
    state.sessions.retain(|_, s| {
        if s.peer.is_transport_closed() {
            released.extend(s.subscriptions.drain().map(|(_, f)| f));
            false
        } else {
            true
        }
    });
    released
}

fn no_session(method: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "{method} needs an MCP session (the initialize handshake); on protocol {} use \
             subscriptions/listen, and the logLevel in each request's _meta",
            super::caller::SESSIONLESS
        ),
        None,
    )
}

fn too_many(limit: usize) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "this session already follows {limit} resources (limits.max_resource_subscriptions); \
             unsubscribe from one first"
        ),
        None,
    )
}

/// Whether a message at `level` passes a caller's threshold.
pub fn passes(level: LoggingLevel, threshold: LoggingLevel) -> bool {
    rank(level) >= rank(threshold)
}

fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The places of followed tasks: of the replica (`limits.max_followed_tasks`) and of each
/// principal (`limits.max_followed_tasks_per_principal`, counted as running jobs are), so one
/// principal's listen requests cannot take the places every other caller's need.
pub(super) struct FollowedTasks {
    total: Arc<Semaphore>,
    per_principal: JobQuota,
}

/// One followed task's place: of the replica, and of its principal (none when `/mcp` is open
/// and every caller is the anonymous principal).
pub(super) struct Place {
    _total: OwnedSemaphorePermit,
    _own: Option<QuotaPermit>,
}

impl FollowedTasks {
    pub(super) fn new(total: usize, per_principal: usize) -> Self {
        Self {
            total: Arc::new(Semaphore::new(total)),
            per_principal: JobQuota::new(per_principal),
        }
    }

    /// A place for one more task of `principal`, or the `[limits]` key that refuses it.
    pub(super) fn try_take(&self, principal: &Principal) -> Result<Place, &'static str> {
        let own = if *principal == Principal::anonymous() {
            None
        } else {
            let own = self.per_principal.try_start(principal);
            Some(own.map_err(|_| "max_followed_tasks_per_principal")?)
        };
        let total = self.total.clone().try_acquire_owned();
        let total = total.map_err(|_| "max_followed_tasks")?;
        Ok(Place {
            _total: total,
            _own: own,
        })
    }
}
