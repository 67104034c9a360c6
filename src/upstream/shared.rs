//! What one upstream's supervisor and its callers share: the connection of the moment, what
//! the upstream offers, its bounds, and the signals that tell the front a list changed. The
//! state's readers live here; what acts on it (calls, requests, the supervisor) lives in the
//! files that do it, each taking this state.

use std::{collections::HashMap, sync::Arc};

use parking_lot::{Mutex, MutexGuard, RwLock};
use rmcp::{
    RoleClient,
    model::{Prompt, Resource, ResourceTemplate, ServerCapabilities, Tool},
    service::Peer,
};
use serde::Serialize;
use tokio::sync::{Notify, broadcast, watch};

use super::{
    error::{SessionError, Unreachable, UpstreamError},
    offer::{ListKind, Offer},
    request_spans::{self, RequestSpans},
    session_seen::SessionSeen,
    tap::CallRoutes,
};
use crate::{
    config::{Durable, TransportKind, UpstreamConfig, UpstreamTasksConfig},
    metrics::Metrics,
    model::Durability,
    rmcp_ext::task_support::{TaskSupport, TaskSupportMap},
    shutdown::Tasks,
};

/// Bounds on what an upstream sends (from `[limits]`).
#[derive(Debug, Clone, Copy)]
pub struct UpstreamLimits {
    /// Items kept of one list (tools, resources, templates, prompts) of one upstream.
    pub max_list_items: usize,
    /// Largest `resources/read` result passed on (text and base64 blobs added up).
    pub max_resource_read_bytes: usize,
    /// Largest message read from an upstream; a larger answer fails its request.
    pub max_result_bytes: usize,
    /// `input_required` rounds of one call (upstreams on the session-less revision).
    pub max_input_rounds: usize,
    /// Input requests in one `input_required` round.
    pub max_input_requests_per_round: usize,
    /// Largest `requestState` echoed back.
    pub max_request_state_bytes: usize,
    /// Open spans of requests sent to one connection (`limits.max_upstream_request_spans`).
    pub max_request_spans: usize,
    /// Bounds on the upstream's own tasks (`[upstream_tasks]`).
    pub tasks: UpstreamTasksConfig,
}

/// An upstream said one of its resources changed (`notifications/resources/updated`).
#[derive(Debug, Clone)]
pub struct ResourceUpdated {
    pub upstream: String,
    /// The upstream's own URI.
    pub uri: String,
}

/// Signals shared by all upstreams: a list on offer may have changed, a resource was updated.
pub(super) struct Signals {
    pub tools: Arc<watch::Sender<u64>>,
    pub resources: watch::Sender<u64>,
    pub prompts: watch::Sender<u64>,
    pub resource_updates: broadcast::Sender<ResourceUpdated>,
}

impl Signals {
    fn bump(&self, kind: ListKind) {
        let sender = match kind {
            ListKind::Tools => &*self.tools,
            ListKind::Resources => &self.resources,
            ListKind::Prompts => &self.prompts,
        };
        sender.send_modify(|version| *version += 1);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamState {
    Connecting,
    Ready,
    Down,
    Stopped,
}

/// What `/readyz` and `/upstreams` show about one upstream.
#[derive(Debug, Clone, Serialize)]
pub struct UpstreamStatus {
    pub name: String,
    pub transport: &'static str,
    pub state: UpstreamState,
    pub tools: Vec<String>,
    pub restarts: u64,
    pub last_error: Option<String>,
    pub in_flight: usize,
    /// The revision of the last session: with `protocol = "auto"`, the one the probe chose.
    pub protocol: Option<String>,
    /// `durable`: whether calls are made so that another replica can adopt them.
    pub durable: &'static str,
    /// Whether this upstream's call streams carry SSE event ids (seen on one): with `durable`
    /// `auto` or `resume`, its plain calls are resumed by an adopter.
    pub resumable_streams: bool,
}

/// One upstream's state, behind the [`super::Upstream`] handle.
pub struct Shared {
    pub(super) config: UpstreamConfig,
    pub(super) routes: Arc<CallRoutes>,
    /// The current connection, if any. A plain (`parking_lot`) lock: read on every call,
    /// written on (re)connect, never held across an `.await`.
    live: RwLock<Option<Live>>,
    details: Mutex<Details>,
    state: watch::Sender<UpstreamState>,
    pub(super) tools_changed: Arc<Notify>,
    pub(super) resources_changed: Arc<Notify>,
    pub(super) prompts_changed: Arc<Notify>,
    /// Shared by all upstreams: bumped when a list on offer may have changed.
    pub(super) signals: Arc<Signals>,
    pub(super) limits: UpstreamLimits,
    /// Resource URIs (the upstream's own) some caller follows, with how many callers do.
    pub(super) subscriptions: Mutex<HashMap<String, usize>>,
    pub(super) metrics: Arc<Metrics>,
    /// Where a stdio child's helpers run (the supervisor's stage).
    pub(super) tasks: Tasks,
    /// The tools' `execution.taskSupport`, as the last `tools/list` answers declared it.
    pub(super) task_support: TaskSupportMap,
    /// Set once a call's response stream carried an SSE event id (`http_client.rs`).
    pub(super) resumable: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Clone)]
pub(super) struct Live {
    pub peer: Peer<RoleClient>,
    /// Becomes `Some(reason)` when this connection has ended.
    pub closed: watch::Receiver<Option<String>>,
    /// HTTP: the upstream session this connection uses (for a task's re-attach record).
    pub seen: Option<SessionSeen>,
}

#[derive(Default)]
pub(super) struct Details {
    pub tools: Arc<Vec<Tool>>,
    pub offer: Offer,
    pub restarts: u64,
    pub last_error: Option<Arc<SessionError>>,
    /// The MCP revision of the last session, as the upstream's `initialize` or
    /// `server/discover` answer settled it.
    pub protocol: Option<String>,
}

impl Shared {
    pub(super) fn new(
        config: UpstreamConfig,
        limits: UpstreamLimits,
        metrics: Arc<Metrics>,
        signals: Arc<Signals>,
        tasks: Tasks,
    ) -> Self {
        let transport = request_spans::network_transport(config.transport);
        let spans = RequestSpans::new(transport, limits.max_request_spans, metrics.clone());
        let routes = CallRoutes::with_status_queue(
            config.name.clone(),
            spans,
            config.logs,
            metrics.clone(),
            (
                limits.tasks.max_queued_statuses,
                limits.tasks.max_status_message_bytes,
            ),
        );
        let task_support =
            TaskSupportMap::new(limits.tasks.max_declaration_bytes, Some(metrics.as_ref()));
        Self {
            config,
            routes,
            live: RwLock::new(None),
            details: Mutex::new(Details::default()),
            state: watch::Sender::new(UpstreamState::Connecting),
            tools_changed: Arc::new(Notify::new()),
            resources_changed: Arc::new(Notify::new()),
            prompts_changed: Arc::new(Notify::new()),
            signals,
            limits,
            subscriptions: Mutex::new(HashMap::new()),
            metrics,
            tasks,
            task_support,
            resumable: Arc::default(),
        }
    }

    /// What the upstream declared as `tool`'s `execution.taskSupport` (stdio upstreams; see
    /// `rmcp_ext/task_support.rs`), `None` for a tool that declared none.
    pub fn task_support(&self, tool: &str) -> Option<TaskSupport> {
        self.task_support.get(tool)
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// How a call of `tool` is made re-attachable (`durable`, docs/replicas.md), on a
    /// Streamable HTTP upstream only (a stdio child dies with its replica): as an upstream
    /// task when the tool takes tasks (`execution.taskSupport` `optional` or `required`) and
    /// `durable` is `auto` or `tasks`; else as a plain call whose response stream another
    /// replica resumes, when `durable` is `auto` or `resume` (it becomes so once its stream
    /// carries an event id); else not at all.
    pub fn durability(&self, tool: &str) -> Durability {
        let config = &self.config;
        if config.transport != TransportKind::Http {
            return Durability::None;
        }
        let takes_tasks = matches!(
            self.task_support(tool),
            Some(TaskSupport::Optional | TaskSupport::Required)
        );
        match config.durable {
            Durable::Auto | Durable::Tasks if takes_tasks => Durability::UpstreamTask,
            Durable::Auto | Durable::Resume => Durability::UpstreamStream,
            Durable::Tasks | Durable::Off => Durability::None,
        }
    }

    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// The tools as last listed; empty while the upstream is not connected.
    pub fn tools(&self) -> Arc<Vec<Tool>> {
        self.while_ready(|details| details.tools.clone())
    }

    /// The capabilities the upstream announced at its last `initialize`, if it ever connected.
    pub fn capabilities(&self) -> Option<ServerCapabilities> {
        self.details().offer.capabilities.clone()
    }

    /// The resources as last listed; empty while the upstream is not connected.
    pub fn resources(&self) -> Arc<Vec<Resource>> {
        self.while_ready(|details| details.offer.resources.clone())
    }

    /// The resource templates as last listed; empty while the upstream is not connected.
    pub fn resource_templates(&self) -> Arc<Vec<ResourceTemplate>> {
        self.while_ready(|details| details.offer.templates.clone())
    }

    /// The prompts as last listed; empty while the upstream is not connected.
    pub fn prompts(&self) -> Arc<Vec<Prompt>> {
        self.while_ready(|details| details.offer.prompts.clone())
    }

    /// The MCP revision of the last session (`2026-07-28`, `2025-11-25`, ...), if any.
    pub fn protocol(&self) -> Option<String> {
        self.details().protocol.clone()
    }

    fn while_ready<T: Default>(&self, read: impl FnOnce(&Details) -> T) -> T {
        if self.state() != UpstreamState::Ready {
            return T::default();
        }
        read(&self.details())
    }

    pub fn state(&self) -> UpstreamState {
        *self.state.borrow()
    }

    /// Wait until the upstream is connected (or the timeout passes); for tests and startup.
    pub async fn ready(&self, within: std::time::Duration) -> bool {
        let mut state = self.state.subscribe();
        matches!(
            tokio::time::timeout(within, state.wait_for(|s| *s == UpstreamState::Ready)).await,
            Ok(Ok(_))
        )
    }

    pub fn status(&self) -> UpstreamStatus {
        let details = self.details();
        let state = self.state();
        UpstreamStatus {
            name: self.name().to_string(),
            transport: match self.config.transport {
                TransportKind::Stdio => "stdio",
                TransportKind::Http => "http",
            },
            state,
            tools: if state == UpstreamState::Ready {
                details.tools.iter().map(|t| t.name.to_string()).collect()
            } else {
                Vec::new()
            },
            restarts: details.restarts,
            last_error: details
                .last_error
                .as_ref()
                .map(|e| crate::redact::text(&e.to_string()).into_owned()),
            in_flight: self.routes.in_flight(),
            protocol: details.protocol.clone(),
            durable: self.config.durable.as_str(),
            resumable_streams: self.resumable.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    pub(super) fn details(&self) -> MutexGuard<'_, Details> {
        self.details.lock()
    }

    pub(super) fn live(&self) -> Option<Live> {
        self.live.read().clone()
    }

    /// The peer of the current connection, unless it has ended.
    pub(super) fn live_peer(&self) -> Option<Peer<RoleClient>> {
        self.live()
            .filter(|live| live.closed.borrow().is_none())
            .map(|live| live.peer)
    }

    pub(super) fn set_live(&self, live: Option<Live>) {
        *self.live.write() = live;
    }

    pub(super) fn set_state(&self, state: UpstreamState) {
        self.metrics
            .upstream_up
            .with_label_values(&[self.name()])
            .set(i64::from(state == UpstreamState::Ready));
        let was = self.state.send_replace(state);
        if (was == UpstreamState::Ready) != (state == UpstreamState::Ready) {
            self.list_changed(ListKind::Tools);
            self.list_changed(ListKind::Resources);
            self.list_changed(ListKind::Prompts);
        }
    }

    pub(super) fn list_changed(&self, kind: ListKind) {
        self.signals.bump(kind);
    }

    pub(super) fn not_connected(&self) -> UpstreamError {
        let reason = match (self.state(), self.details().last_error.clone()) {
            (UpstreamState::Stopped, _) => Unreachable::ShuttingDown,
            (_, Some(e)) => Unreachable::Failed(e),
            (UpstreamState::Connecting, None) => Unreachable::Connecting,
            _ => Unreachable::Lost,
        };
        UpstreamError::NotConnected {
            name: self.name().to_string(),
            reason,
        }
    }
}
