//! Connections to the real MCP servers the bridge fronts, through rmcp's client.
//!
//! Each upstream has a supervisor task that connects (spawning a stdio child or opening a
//! Streamable HTTP session), lists the tools, keeps the list fresh on
//! `notifications/tools/list_changed`, and reconnects with capped, jittered exponential
//! backoff when the connection ends. Calls go out with a [`CallSink`] that receives the
//! call's progress and log notifications (see `tap`); this module knows nothing of jobs.

mod call;
mod call_outcome;
mod client;
mod error;
mod http_client;
mod input_required;
mod line_cap;
mod offer;
mod oversize;
mod reattach;
mod request_spans;
mod requests;
mod session_poller;
mod session_seen;
mod stdio;
mod stream_resume;
mod supervisor;
mod tap;
mod task_call;

use std::{collections::HashMap, sync::Arc};

use parking_lot::{Mutex, MutexGuard, RwLock};

use rmcp::{RoleClient, model::Tool, service::Peer};
use serde::Serialize;
use tokio::sync::{Notify, broadcast, watch};

pub use crate::rmcp_ext::task_support::TaskSupport;
use crate::rmcp_ext::task_support::TaskSupportMap;
pub use call::{CallCanceller, UpstreamCall};
pub use call_outcome::CallOutcome;
pub use error::{SessionError, Unreachable, UpstreamError};
pub use input_required::Asking;
pub use offer::ListKind;
pub use reattach::{AdoptedCall, AdoptedCanceller};
pub use requests::RequestError;
pub use tap::{CallSink, no_sampling};
pub use task_call::TaskResume;

use crate::{
    config::{Durable, TransportKind, UpstreamConfig, UpstreamTasksConfig},
    metrics::Metrics,
    model::Durability,
    shutdown::Tasks,
};
use offer::Offer;
use request_spans::RequestSpans;
use supervisor::HANDSHAKE_TIMEOUT;
use tap::CallRoutes;

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

/// Updates buffered for the front; one that falls behind this far loses the oldest.
const RESOURCE_UPDATES_CAPACITY: usize = 1024;

/// Signals shared by all upstreams: a list on offer may have changed, a resource was updated.
struct Signals {
    tools: Arc<watch::Sender<u64>>,
    resources: watch::Sender<u64>,
    prompts: watch::Sender<u64>,
    resource_updates: broadcast::Sender<ResourceUpdated>,
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

/// All configured upstreams, in config order.
#[derive(Clone)]
pub struct Upstreams {
    list: Arc<Vec<Upstream>>,
    changes: Arc<watch::Sender<u64>>,
    signals: Arc<Signals>,
}

impl Upstreams {
    /// Start a supervisor per upstream, on `tasks` (it stops its connection when they stop).
    /// Returns at once: upstreams connect in the background, and one that is down does not
    /// hold up the others or the bridge.
    pub fn start(
        configs: &[UpstreamConfig],
        limits: UpstreamLimits,
        metrics: Arc<Metrics>,
        tasks: Tasks,
    ) -> Self {
        let changes = Arc::new(watch::Sender::new(0));
        let signals = Arc::new(Signals {
            tools: changes.clone(),
            resources: watch::Sender::new(0),
            prompts: watch::Sender::new(0),
            resource_updates: broadcast::Sender::new(RESOURCE_UPDATES_CAPACITY),
        });
        let list: Vec<Upstream> = configs
            .iter()
            .map(|config| {
                Upstream::new(
                    config.clone(),
                    limits,
                    metrics.clone(),
                    signals.clone(),
                    tasks.clone(),
                )
            })
            .collect();
        for upstream in &list {
            tasks.spawn(upstream.clone().supervise(tasks.stopping().clone()));
        }
        Self {
            list: Arc::new(list),
            changes,
            signals,
        }
    }

    /// Changes whenever one kind of list on offer may have changed (as [`Self::tool_changes`]
    /// for tools).
    pub fn list_changes(&self, kind: ListKind) -> watch::Receiver<u64> {
        match kind {
            ListKind::Tools => self.changes.subscribe(),
            ListKind::Resources => self.signals.resources.subscribe(),
            ListKind::Prompts => self.signals.prompts.subscribe(),
        }
    }

    /// Every `notifications/resources/updated` of every upstream, from now on.
    pub fn resource_updates(&self) -> broadcast::Receiver<ResourceUpdated> {
        self.signals.resource_updates.subscribe()
    }

    /// Changes whenever the set of tools on offer may have changed: an upstream's list was
    /// refreshed, or an upstream went down or came up.
    pub fn tool_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub fn get(&self, name: &str) -> Option<&Upstream> {
        self.list.iter().find(|u| u.name() == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Upstream> {
        self.list.iter()
    }

    pub fn statuses(&self) -> Vec<UpstreamStatus> {
        self.list.iter().map(Upstream::status).collect()
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

/// One upstream: a cheap handle shared by the supervisor and every caller.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    config: UpstreamConfig,
    routes: Arc<CallRoutes>,
    /// The current connection, if any. A plain (`parking_lot`) lock: read on every call, written on (re)connect,
    /// never held across an `.await`.
    live: RwLock<Option<Live>>,
    details: Mutex<Details>,
    state: watch::Sender<UpstreamState>,
    tools_changed: Arc<Notify>,
    resources_changed: Arc<Notify>,
    prompts_changed: Arc<Notify>,
    /// Shared by all upstreams: bumped when a list on offer may have changed.
    signals: Arc<Signals>,
    limits: UpstreamLimits,
    /// Resource URIs (the upstream's own) some caller follows, with how many callers do.
    subscriptions: Mutex<HashMap<String, usize>>,
    metrics: Arc<Metrics>,
    /// Where a stdio child's helpers run (the supervisor's stage).
    tasks: Tasks,
    /// The tools' `execution.taskSupport`, as the last `tools/list` answers declared it.
    task_support: TaskSupportMap,
    /// Set once a call's response stream carried an SSE event id (`http_client.rs`).
    resumable: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Clone)]
struct Live {
    peer: Peer<RoleClient>,
    /// Becomes `Some(reason)` when this connection has ended.
    closed: watch::Receiver<Option<String>>,
    /// HTTP: the upstream session this connection uses (for a task's re-attach record).
    seen: Option<session_seen::SessionSeen>,
}

#[derive(Default)]
struct Details {
    tools: Arc<Vec<Tool>>,
    offer: Offer,
    restarts: u64,
    last_error: Option<Arc<SessionError>>,
    /// The MCP revision of the last session, as the upstream's `initialize` or
    /// `server/discover` answer settled it.
    protocol: Option<String>,
}

impl Upstream {
    fn new(
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
            inner: Arc::new(Inner {
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
            }),
        }
    }

    /// What the upstream declared as `tool`'s `execution.taskSupport` (stdio upstreams; see
    /// `rmcp_ext/task_support.rs`), `None` for a tool that declared none.
    pub fn task_support(&self, tool: &str) -> Option<TaskSupport> {
        self.inner.task_support.get(tool)
    }

    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// How a call of `tool` is made re-attachable (`durable`, docs/replicas.md), on a
    /// Streamable HTTP upstream only (a stdio child dies with its replica): as an upstream
    /// task when the tool takes tasks (`execution.taskSupport` `optional` or `required`) and
    /// `durable` is `auto` or `tasks`; else as a plain call whose response stream another
    /// replica resumes, when `durable` is `auto` or `resume` (it becomes so once its stream
    /// carries an event id); else not at all.
    pub fn durability(&self, tool: &str) -> Durability {
        let config = &self.inner.config;
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
        &self.inner.config
    }

    /// The tools as last listed; empty while the upstream is not connected.
    pub fn tools(&self) -> Arc<Vec<Tool>> {
        if *self.inner.state.borrow() != UpstreamState::Ready {
            return Arc::default();
        }
        self.details().tools.clone()
    }

    pub fn state(&self) -> UpstreamState {
        *self.inner.state.borrow()
    }

    /// Wait until the upstream is connected (or the timeout passes); for tests and startup.
    pub async fn ready(&self, within: std::time::Duration) -> bool {
        let mut state = self.inner.state.subscribe();
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
            transport: match self.inner.config.transport {
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
            in_flight: self.inner.routes.in_flight(),
            protocol: details.protocol.clone(),
            durable: self.inner.config.durable.as_str(),
            resumable_streams: self
                .inner
                .resumable
                .load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    fn details(&self) -> MutexGuard<'_, Details> {
        self.inner.details.lock()
    }

    fn live(&self) -> Option<Live> {
        self.inner.live.read().clone()
    }

    /// The peer of the current connection, unless it has ended.
    fn live_peer(&self) -> Option<Peer<RoleClient>> {
        self.live()
            .filter(|live| live.closed.borrow().is_none())
            .map(|live| live.peer)
    }

    fn set_live(&self, live: Option<Live>) {
        *self.inner.live.write() = live;
    }

    fn set_state(&self, state: UpstreamState) {
        self.inner
            .metrics
            .upstream_up
            .with_label_values(&[self.name()])
            .set(i64::from(state == UpstreamState::Ready));
        let was = self.inner.state.send_replace(state);
        if (was == UpstreamState::Ready) != (state == UpstreamState::Ready) {
            self.catalog_changed();
            self.list_changed(ListKind::Resources);
            self.list_changed(ListKind::Prompts);
        }
    }

    fn catalog_changed(&self) {
        self.list_changed(ListKind::Tools);
    }

    fn list_changed(&self, kind: ListKind) {
        self.inner.signals.bump(kind);
    }

    fn not_connected(&self) -> UpstreamError {
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
