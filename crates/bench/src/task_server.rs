//! The upstream of the adoption tests as a durable upstream: tests/interop/task_http_server.mjs
//! (the TypeScript MCP SDK over Streamable HTTP) with `--session-tasks`, whose tool `staged`
//! runs as an upstream task known only to the session that made it, as server-everything
//! keeps its tasks. A replica that drains hands such a job over; the adopter follows the task.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::process::Command;

use crate::proc::{Helper, free_port};

/// Longest the server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

pub struct TaskServer {
    helper: Helper,
    /// `http://127.0.0.1:PORT/mcp`
    pub url: String,
}

impl TaskServer {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/task_http_server.mjs")
    }

    /// Why the server cannot run here (no node, or the SDK not installed), if so.
    pub fn missing() -> Option<String> {
        let sdk = Self::script().with_file_name("node_modules/@modelcontextprotocol/sdk");
        let node = std::process::Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        match (node, sdk.exists()) {
            (true, true) => None,
            _ => Some(
                "node or tests/interop/node_modules is missing (npm ci --prefix tests/interop)"
                    .into(),
            ),
        }
    }

    pub async fn start(dir: &Path) -> Result<Self, String> {
        let port = free_port().map_err(|e| e.to_string())?;
        let mut command = Command::new("node");
        command
            .arg(Self::script())
            .arg(port.to_string())
            .arg("--session-tasks");
        let helper = Helper::spawn(
            "task_http_server.mjs",
            command,
            &dir.join("task-server.log"),
        )?;
        let up = async {
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        if tokio::time::timeout(START_TIMEOUT, up).await.is_err() {
            helper.stop().await;
            return Err("task_http_server.mjs did not start listening".into());
        }
        Ok(Self {
            helper,
            url: format!("http://127.0.0.1:{port}/mcp"),
        })
    }

    pub async fn stop(self) {
        self.helper.stop().await;
    }
}
