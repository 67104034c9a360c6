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
mod event_ids;
mod http_client;
mod input_required;
mod line_cap;
mod listing;
mod offer;
mod oversize;
mod reattach;
mod request_spans;
mod requests;
mod session_asks;
mod session_poller;
mod session_seen;
mod shared;
mod stdio;
mod stream_resume;
mod supervisor;
mod tap;
mod task_call;

use std::{ops::Deref, sync::Arc};

use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse, JsonObject,
    ReadResourceRequestParams, ReadResourceResponse,
};
use tokio::sync::{broadcast, watch};

pub use crate::rmcp_ext::task_support::TaskSupport;
pub use call::{CallCanceller, UpstreamCall};
pub use call_outcome::CallOutcome;
pub use error::{SessionError, Unreachable, UpstreamError};
pub use input_required::Asking;
pub use offer::ListKind;
pub use reattach::{AdoptedCall, AdoptedCanceller};
pub use requests::RequestError;
pub use shared::{ResourceUpdated, UpstreamLimits, UpstreamState, UpstreamStatus};
pub use tap::{CallSink, no_sampling};
pub use task_call::TaskResume;

use crate::{config::UpstreamConfig, metrics::Metrics, model::Reattach, shutdown::Tasks};
use shared::{Shared, Signals};

/// Updates buffered for the front; one that falls behind this far loses the oldest.
const RESOURCE_UPDATES_CAPACITY: usize = 1024;

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
            .map(|config| Upstream {
                shared: Arc::new(Shared::new(
                    config.clone(),
                    limits,
                    metrics.clone(),
                    signals.clone(),
                    tasks.clone(),
                )),
            })
            .collect();
        for upstream in &list {
            let stopping = tasks.stopping().clone();
            tasks.spawn(supervisor::supervise(upstream.shared.clone(), stopping));
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
        self.list.iter().map(|u| u.status()).collect()
    }
}

/// One upstream: a cheap handle shared by the supervisor and every caller. It reads as its
/// [`Shared`] state; what it does goes to the file that does it.
#[derive(Clone)]
pub struct Upstream {
    shared: Arc<Shared>,
}

impl Deref for Upstream {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Upstream {
    /// Send `tools/call` for `tool` (the upstream's own name); see [`call::send`].
    pub async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        sink: Arc<dyn CallSink>,
    ) -> Result<UpstreamCall, UpstreamError> {
        call::send(&self.shared, tool, arguments, sink).await
    }

    /// Carry on the call `record` names (made by another replica, on this upstream), its
    /// reports going to `sink`, from where its job stood (`resume`: a task's steps).
    pub fn reattach(
        &self,
        record: &Reattach,
        resume: TaskResume,
        sink: Arc<dyn CallSink>,
    ) -> Result<AdoptedCall, UpstreamError> {
        reattach::reattach(&self.shared, record, resume, sink)
    }

    /// `resources/read` of `params.uri` (the upstream's own URI); see [`requests`].
    pub async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        asking: Asking,
    ) -> Result<ReadResourceResponse, RequestError> {
        requests::read_resource(&self.shared, params, asking).await
    }

    /// `prompts/get` of `params.name` (the upstream's own name); see [`requests`].
    pub async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        asking: Asking,
    ) -> Result<GetPromptResponse, RequestError> {
        requests::get_prompt(&self.shared, params, asking).await
    }

    /// `completion/complete`, its reference already in the upstream's own terms.
    pub async fn complete(
        &self,
        params: CompleteRequestParams,
    ) -> Result<CompleteResult, RequestError> {
        requests::complete(&self.shared, params).await
    }

    /// One more caller wants updates of `uri`: the first one subscribes upstream.
    pub async fn subscribe(&self, uri: &str) -> Result<(), RequestError> {
        requests::subscribe(&self.shared, uri).await
    }

    /// One caller less wants updates of `uri`: the last one unsubscribes upstream.
    pub async fn unsubscribe(&self, uri: &str) {
        requests::unsubscribe(&self.shared, uri).await
    }
}
