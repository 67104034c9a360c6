//! MCP session records for the front door, kept in Redis so that any replica can serve a
//! client's next request.
//!
//! rmcp keeps sessions in the memory of the replica that answered `initialize`; with this
//! store it records the client's `initialize` parameters, and a replica that meets an unknown
//! session restores it from the record instead of answering 404. The bridge's own per-session
//! state is rebuilt by the restore; who may use the session is in its id (`http::sessions`).
//! It shares the engine's connection and key prefix, and knows nothing of jobs.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};

use super::{
    keys::Keys,
    link::{Link, LinkError},
};

pub(super) struct RedisSessions {
    pub(super) cmd: Arc<Link>,
    pub(super) keys: Keys,
    /// How long a record stays unless a replica restores the session from it (which renews
    /// it): the sessions' idle time (`server.session_idle_secs`), after which the replica that
    /// held the session has closed it too.
    pub(super) ttl: Duration,
}

impl RedisSessions {
    fn key(&self, id: &str) -> String {
        self.keys.mcp_session(id)
    }
}

#[async_trait]
impl SessionStore for RedisSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let key = self.key(session_id);
        let ttl = self.ttl.as_millis() as u64;
        let record: Option<Vec<u8>> = match self
            .cmd
            .run(|mut conn| async move {
                ::redis::cmd("GETEX")
                    .arg(&key)
                    .arg("PX")
                    .arg(ttl)
                    .query_async(&mut conn)
                    .await
            })
            .await
        {
            Ok(record) => record,
            // rmcp answers a store error with 500, which clients do not recover from; an
            // unknown session gets 404, and the client initializes again (here, where it works
            // without Redis). So while Redis is away, a session held elsewhere counts as unknown.
            Err(LinkError::Down { reason, .. }) => {
                tracing::debug!(%reason, "MCP session record unreadable: treating the session as unknown");
                None
            }
            Err(error) => return Err(error.to_string().into()),
        };
        match record {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let key = self.key(session_id);
        let record = serde_json::to_vec(state)?;
        let ttl = self.ttl.as_millis() as u64;
        self.cmd
            .run(|mut conn| async move {
                ::redis::cmd("SET")
                    .arg(&key)
                    .arg(record)
                    .arg("PX")
                    .arg(ttl)
                    .exec_async(&mut conn)
                    .await
            })
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        let key = self.key(session_id);
        self.cmd
            .run(
                |mut conn| async move { ::redis::cmd("DEL").arg(&key).exec_async(&mut conn).await },
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}
