//! The bridge as a child process: the built binary on a config file, its stderr in a log file,
//! ready when it has printed its address and `/readyz` answers 200, stopped with SIGTERM (or
//! killed). The one way to run it as a child, shared by the integration tests (through
//! `tests/common`) and the benchmark (`src/bin/bench`, through a `#[path]` module): so this
//! file knows no test convention and uses only the crate's normal dependencies.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

/// How long a bridge may take to start listening, and then to report ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a bridge may take to stop after SIGTERM before it is killed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// The environment variables that override the config file: removed, so the file written for
/// the child is all of its configuration whatever the caller's environment holds.
const OVERRIDES: [&str; 4] = [
    "BRIDGE_LISTEN",
    "BRIDGE_PUBLIC_URL",
    "BRIDGE_REDIS_URL",
    "BRIDGE_LOG_JSON",
];

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The bridge refused its config (exit code 2): a benchmark scenario may skip on this.
    #[error("the bridge refused its config: {0}")]
    Config(String),
    #[error("{0}")]
    Failed(String),
}

/// A running bridge process. Killed when dropped; [`BridgeProcess::stop`] stops it gracefully.
pub struct BridgeProcess {
    child: Child,
    pub addr: SocketAddr,
    pub pid: u32,
    log: PathBuf,
    http: reqwest::Client,
    /// A directory made for this process alone, removed when it is dropped.
    scratch: Option<PathBuf>,
}

impl BridgeProcess {
    /// Write `config` (a whole config file) to `<dir>/<name>.toml` and start `bin` on it with
    /// `env` added, its stderr in `<dir>/<name>.log`; return once it listens and `/readyz`
    /// says the store and every upstream are ready. `dir: None`: a fresh temporary directory,
    /// removed with the process.
    pub async fn start(
        bin: &Path,
        dir: Option<&Path>,
        name: &str,
        config: &str,
        env: &[(&str, &str)],
    ) -> Result<Self, StartError> {
        let scratch = match dir {
            Some(_) => None,
            None => Some(scratch_dir(name)?),
        };
        let dir = dir.or(scratch.as_deref()).expect("a directory");
        let path = dir.join(format!("{name}.toml"));
        let log = dir.join(format!("{name}.log"));
        std::fs::write(&path, config)
            .map_err(|e| StartError::Failed(format!("{}: {e}", path.display())))?;
        let stderr = std::fs::File::create(&log)
            .map_err(|e| StartError::Failed(format!("{}: {e}", log.display())))?;
        let mut command = Command::new(bin);
        command
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true);
        for name in OVERRIDES {
            command.env_remove(name);
        }
        command.envs(env.iter().copied());
        let mut child = command
            .spawn()
            .map_err(|e| StartError::Failed(format!("cannot start {}: {e}", bin.display())))?;
        let pid = child.id().unwrap_or(0);
        let addr = match listening_address(&mut child).await {
            Some(addr) => addr,
            None => {
                let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                let tail = log_tail(&log);
                return Err(match status {
                    Ok(Ok(s)) if s.code() == Some(2) => StartError::Config(tail),
                    Ok(Ok(s)) => StartError::Failed(format!("the bridge exited ({s}): {tail}")),
                    _ => StartError::Failed(format!("the bridge did not start listening: {tail}")),
                });
            }
        };
        let bridge = Self {
            child,
            addr,
            pid,
            log,
            http: reqwest::Client::new(),
            scratch,
        };
        bridge.wait_ready().await?;
        Ok(bridge)
    }

    /// `http://ADDR`
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// An HTTP client for requests to this bridge (its connections are reused).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Everything the bridge has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until `/readyz` answers 200 (store and upstreams ready), within [`START_TIMEOUT`].
    pub async fn wait_ready(&self) -> Result<(), StartError> {
        let url = format!("{}/readyz", self.base());
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            match self.http.get(&url).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => last = r.text().await.unwrap_or_default(),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(StartError::Failed(format!(
            "the bridge never became ready: {last}; its log ends: {}",
            log_tail(&self.log)
        )))
    }

    /// SIGTERM: the bridge shuts down as it would under a process manager.
    pub fn terminate(&self) {
        terminate(self.pid);
    }

    /// SIGKILL, now: no shutdown, no goodbye to Redis or to a subscriber.
    pub fn kill(&mut self) {
        let _ = self.child.start_kill();
    }

    /// Wait for the process to exit (after [`BridgeProcess::terminate`] or on its own).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// SIGTERM, wait up to [`STOP_TIMEOUT`], kill if it has not stopped by then. `None`: it
    /// had to be killed.
    pub async fn stop(mut self) -> Option<ExitStatus> {
        self.terminate();
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = self.child.kill().await;
                None
            }
        }
    }
}

impl Drop for BridgeProcess {
    fn drop(&mut self) {
        // (The child itself is killed by `kill_on_drop` when its field drops, after this.)
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Read the child's stdout until "… listening on http://ADDR …", then keep draining it in the
/// background (so the bridge never blocks on a full pipe; that task ends with the process).
async fn listening_address(child: &mut Child) -> Option<SocketAddr> {
    let stdout = child.stdout.take()?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = tokio::time::timeout(START_TIMEOUT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(addr) = address_in(&line) {
                return Some(addr);
            }
        }
        None
    })
    .await
    .ok()??;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Some(addr)
}

/// The socket address after the first `http://` of a line, up to a `/`, a space or the end.
fn address_in(line: &str) -> Option<SocketAddr> {
    let rest = line.split("http://").nth(1)?;
    let end = rest.find(['/', ' ', ')']).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// A new directory under the system's temporary directory.
fn scratch_dir(name: &str) -> Result<PathBuf, StartError> {
    let dir = std::env::temp_dir().join(format!("bridge-{name}-{:016x}", fastrand::u64(..)));
    std::fs::create_dir_all(&dir)
        .map_err(|e| StartError::Failed(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

/// SIGTERM to `pid` (nothing for 0, which would signal the whole process group).
pub fn terminate(pid: u32) {
    if pid > 0 {
        // SAFETY: kill(2) on a child the caller started and still owns.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
    }
}

/// The last lines of a log file, for an error message.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}
