//! Debian's nginx in front of a scenario's replicas, with the location block the project ships
//! (`deploy/nginx/mcp-progress-bridge.conf`, compiled in), run as tests/it/proxy.rs runs it:
//! no daemon, one process, its own prefix folder under the scratch folder.

use std::{net::SocketAddr, path::Path, time::Duration};

use tokio::process::Command;

use crate::proc::{Helper, free_port};

const NGINX: &str = "/usr/sbin/nginx";
const SHIPPED: &str = include_str!("../../../deploy/nginx/mcp-progress-bridge.conf");
/// Longest nginx may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// nginx on a loopback port, stopped by [`Nginx::stop`] (killed when dropped).
pub struct Nginx {
    helper: Helper,
    pub addr: SocketAddr,
}

impl Nginx {
    pub fn installed() -> bool {
        Path::new(NGINX).exists()
    }

    /// nginx on a free loopback port, balancing (round robin, nginx's default) over `replicas`.
    pub async fn start(dir: &Path, replicas: &[SocketAddr]) -> Result<Self, String> {
        // deploy/nginx/nginx.conf's upstream keepalive_timeout (nginx's default too).
        Self::start_with_idle(dir, replicas, Duration::from_secs(60)).await
    }

    /// [`Nginx::start`], keeping idle connections to the replicas `idle` (whole seconds).
    pub async fn start_with_idle(
        dir: &Path,
        replicas: &[SocketAddr],
        idle: Duration,
    ) -> Result<Self, String> {
        let idle = idle.as_secs();
        let prefix = dir.join("nginx");
        std::fs::create_dir_all(&prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
        let location = prefix.join("location.conf");
        std::fs::write(&location, SHIPPED).map_err(|e| e.to_string())?;
        let port = free_port().map_err(|e| e.to_string())?;
        // As the shipped deploy/nginx/nginx.conf: no replica is ever marked down.
        let servers: String = replicas
            .iter()
            .map(|a| format!("server {a} max_fails=0; "))
            .collect();
        let d = prefix.display();
        // Every reader holds two connections (to nginx, to a replica).
        let conf = format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 8192; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/client_body;\n  \
             proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
             upstream mcp_progress_bridge {{ {servers}keepalive 32; keepalive_timeout {idle}s; }}\n  \
             server {{ listen 127.0.0.1:{port}; include {}; }}\n}}\n",
            location.display()
        );
        let conf_path = prefix.join("nginx.conf");
        std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
        let mut command = Command::new(NGINX);
        command
            .arg("-e")
            .arg(prefix.join("error.log"))
            .arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf_path);
        let helper = Helper::spawn("nginx", command, &prefix.join("stderr.log"))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let up = async {
            while tokio::net::TcpStream::connect(addr).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        if tokio::time::timeout(START_TIMEOUT, up).await.is_err() {
            helper.stop().await;
            let log = std::fs::read_to_string(prefix.join("error.log")).unwrap_or_default();
            return Err(format!("nginx did not start listening: {log}"));
        }
        Ok(Self { helper, addr })
    }

    pub async fn stop(self) {
        self.helper.stop().await;
    }
}
