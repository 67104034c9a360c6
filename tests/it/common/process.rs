//! The bridge as a child process: the built binary on a config file, its stderr in a log file,
//! ready when it has printed its address and `/readyz` answers 200, stopped with SIGTERM (or
//! killed). The one way to run it as a child, shared by the integration tests (through
//! `tests/it/common`) and the benchmark (`crates/bench`, through a `#[path]` module): so this
//! file knows no test convention and uses only the crate's normal dependencies.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    task::JoinHandle,
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
    /// What the bridge prints on stdout (its banner), read by `stdout_reader` until the end.
    stdout: Arc<Mutex<String>>,
    stdout_reader: Option<JoinHandle<()>>,
    _workdir: Workdir,
}

impl BridgeProcess {
    /// Write `config` (a whole config file) to `<dir>/<name>.toml` and start `bin` on it with
    /// `env` added (the variables that override the file removed first); see
    /// [`BridgeProcess::spawn`] for the rest. `dir: None`: a fresh temporary directory, removed
    /// with the process.
    pub async fn start(
        bin: &Path,
        dir: Option<&Path>,
        name: &str,
        config: &str,
        env: &[(&str, &str)],
    ) -> Result<Self, StartError> {
        let workdir = Workdir::new(dir, name)?;
        let path = workdir.path.join(format!("{name}.toml"));
        std::fs::write(&path, config)
            .map_err(|e| StartError::Failed(format!("{}: {e}", path.display())))?;
        let mut command = Command::new(bin);
        command.arg("--config").arg(&path);
        for name in OVERRIDES {
            command.env_remove(name);
        }
        command.envs(env.iter().copied());
        Self::launch(command, workdir, name).await
    }

    /// Start `command` (the bridge binary with the arguments and environment its caller chose)
    /// with its stderr in `<dir>/<name>.log` and its stdout kept; return once it has printed
    /// its address and `/readyz` answers 200 (the store answers, every upstream has been tried).
    pub async fn spawn(
        command: Command,
        dir: Option<&Path>,
        name: &str,
    ) -> Result<Self, StartError> {
        Self::launch(command, Workdir::new(dir, name)?, name).await
    }

    async fn launch(
        mut command: Command,
        workdir: Workdir,
        name: &str,
    ) -> Result<Self, StartError> {
        let log = workdir.path.join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log)
            .map_err(|e| StartError::Failed(format!("{}: {e}", log.display())))?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| {
            let bin = command
                .as_std()
                .get_program()
                .to_string_lossy()
                .into_owned();
            StartError::Failed(format!("cannot start {bin}: {e}"))
        })?;
        let pid = child.id().unwrap_or(0);
        let stdout = Arc::new(Mutex::new(String::new()));
        let Some((addr, stdout_reader)) = listening_address(&mut child, stdout.clone()).await
        else {
            let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            let tail = log_tail(&log);
            return Err(match status {
                Ok(Ok(s)) if s.code() == Some(2) => StartError::Config(tail),
                Ok(Ok(s)) => StartError::Failed(format!("the bridge exited ({s}): {tail}")),
                _ => StartError::Failed(format!("the bridge did not start listening: {tail}")),
            });
        };
        let bridge = Self {
            child,
            addr,
            pid,
            log,
            http: reqwest::Client::new(),
            stdout,
            stdout_reader: Some(stdout_reader),
            _workdir: workdir,
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

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// How the process ended, if it has (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// What the bridge has printed on stdout; once it has exited, all of it.
    pub async fn stdout(&mut self) -> String {
        if matches!(self.child.try_wait(), Ok(Some(_)))
            && let Some(reader) = self.stdout_reader.take()
        {
            // The pipe is at its end (or soon): the reader has the last lines then.
            let _ = tokio::time::timeout(STOP_TIMEOUT, reader).await;
        }
        self.stdout.lock().expect("stdout buffer").clone()
    }

    /// Wait until `/readyz` answers 200 (the store answers, every upstream has been tried), within
    /// [`START_TIMEOUT`].
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
        self.signal(libc::SIGTERM);
    }

    /// Send the bridge a signal (SIGINT: Ctrl-C in a terminal).
    pub fn signal(&self, signal: libc::c_int) {
        if self.pid > 0 {
            // SAFETY: kill(2) on the child this struct started and still owns.
            unsafe {
                libc::kill(self.pid as libc::pid_t, signal);
            }
        }
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
        // (The child itself is killed by `kill_on_drop` when its field drops.)
        if let Some(reader) = self.stdout_reader.take() {
            reader.abort();
        }
    }
}

/// Where a process's config and log are: the caller's directory, or one made for it alone,
/// removed when dropped.
struct Workdir {
    path: PathBuf,
    owned: bool,
}

impl Workdir {
    fn new(dir: Option<&Path>, name: &str) -> Result<Self, StartError> {
        if let Some(dir) = dir {
            return Ok(Self {
                path: dir.to_path_buf(),
                owned: false,
            });
        }
        let path = std::env::temp_dir().join(format!("bridge-{name}-{:016x}", fastrand::u64(..)));
        std::fs::create_dir_all(&path)
            .map_err(|e| StartError::Failed(format!("{}: {e}", path.display())))?;
        Ok(Self { path, owned: true })
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Read the child's stdout into `printed` until "… listening on http://ADDR …", then go on
/// reading it in a task (so the bridge never blocks on a full pipe) that ends with the pipe.
async fn listening_address(
    child: &mut Child,
    printed: Arc<Mutex<String>>,
) -> Option<(SocketAddr, JoinHandle<()>)> {
    let stdout = child.stdout.take()?;
    let mut lines = BufReader::new(stdout).lines();
    let keep = move |line: &str| {
        let mut printed = printed.lock().expect("stdout buffer");
        printed.push_str(line);
        printed.push('\n');
    };
    let addr = tokio::time::timeout(START_TIMEOUT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            keep(&line);
            if let Some(addr) = address_in(&line) {
                return Some(addr);
            }
        }
        None
    })
    .await
    .ok()??;
    let reader = tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            keep(&line);
        }
    });
    Some((addr, reader))
}

/// The socket address after the first `http://` of a line, up to a `/`, a space or the end.
fn address_in(line: &str) -> Option<SocketAddr> {
    let rest = line.split("http://").nth(1)?;
    let end = rest.find(['/', ' ', ')']).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The last lines of a log file, for an error message.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}
