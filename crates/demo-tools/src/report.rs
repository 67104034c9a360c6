//! Progress and log notifications back to the caller of one tool call.

use rmcp::{
    Peer, RoleServer,
    model::{ProgressNotificationParam, ProgressToken},
    service::RequestContext,
};

/// Sends notifications about one tool call to the client that made it.
///
/// Progress goes out only when the request carried `_meta.progressToken`: the
/// spec lets a client opt in that way, and a server must not invent a token.
/// Send failures are logged and otherwise ignored: they mean the client is
/// gone, the call's cancellation token fires for that, and a demo tool should
/// behave the same whether anyone is watching or not.
pub struct CallReporter {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
}

impl CallReporter {
    pub fn new(context: &RequestContext<RoleServer>) -> Self {
        Self {
            peer: context.peer.clone(),
            token: context.meta.get_progress_token(),
        }
    }

    /// Whether the caller asked for progress (sent a progress token).
    pub fn wants_progress(&self) -> bool {
        self.token.is_some()
    }

    /// Sends `notifications/progress` (if the caller asked for progress).
    /// `progress` must grow from one call to the next; the callers count up.
    pub async fn progress(&self, progress: u64, total: Option<u64>, message: String) {
        let Some(token) = &self.token else {
            return;
        };
        // u64 → f64 is exact below 2^53; every bound in `args` is far below.
        let mut param =
            ProgressNotificationParam::new(token.clone(), progress as f64).with_message(message);
        if let Some(total) = total {
            param = param.with_total(total as f64);
        }
        if let Err(error) = self.peer.notify_progress(param).await {
            tracing::debug!(%error, "could not send progress; the client is probably gone");
        }
    }

    /// Sends a `notifications/message` at level `info` from logger `demo`.
    ///
    /// MCP logging is deprecated by SEP-2577 (so is its rmcp API, hence the
    /// `allow`), but clients and servers still send it, and the bridge
    /// republishes it as `log` events: the demo has to exercise that path.
    /// The demo ignores `logging/setLevel` (see `DemoTools::set_level`).
    #[allow(deprecated)]
    pub async fn log(&self, text: String) {
        use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
        let param = LoggingMessageNotificationParam::new(LoggingLevel::Info, text.into())
            .with_logger("demo");
        if let Err(error) = self.peer.notify_logging_message(param).await {
            tracing::debug!(%error, "could not send a log message; the client is probably gone");
        }
    }
}
