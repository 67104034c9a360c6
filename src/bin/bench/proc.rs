//! The bridge under test as a separate process (so its memory is its own), started from the
//! built binary with a generated config, and the other processes a scenario runs.

use std::{net::SocketAddr, path::Path, process::Stdio, time::Duration};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

/// How long a process may take to start listening and report ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a bridge may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The bridge refused its config (exit code 2): a scenario may skip on this.
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Failed(String),
}

/// A running bridge process. Stopped (SIGTERM, then kill) by [`BridgeProcess::stop`] or on drop.
pub struct BridgeProcess {
    child: Child,
    pub addr: SocketAddr,
    pub pid: u32,
    http: reqwest::Client,
}

impl BridgeProcess {
    /// Write `config` (everything but `[server]`, which is generated) next to the log, start
    /// the bridge on a free loopback port and wait until `/readyz` says every upstream is up.
    // Long, and left so for now: config, spawn, and the readiness wait in order; split with
    // `fanout::measure` in the benchmark work.
    pub async fn start(
        bin: &Path,
        dir: &Path,
        name: &str,
        config: &str,
    ) -> Result<Self, StartError> {
        let path = dir.join(format!("{name}.toml"));
        let log = dir.join(format!("{name}.log"));
        // The limits are raised past what the scenarios need (10,000 readers of one job, 10,000
        // jobs, bursts of calls): the benchmark measures the engine, not the default limits.
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nallowed_hosts = []\n\n\
             [limits]\nmax_jobs_per_token = 100000\ncalls_per_minute = 10000000\n\
             max_subscribers_per_channel = 100000\nmax_subscribers = 100000\n\n{config}"
        );
        std::fs::write(&path, text)
            .map_err(|e| StartError::Failed(format!("{}: {e}", path.display())))?;
        let stderr = std::fs::File::create(&log)
            .map_err(|e| StartError::Failed(format!("{}: {e}", log.display())))?;
        let mut child = Command::new(bin)
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| StartError::Failed(format!("cannot start {}: {e}", bin.display())))?;
        let pid = child.id().unwrap_or(0);
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        // "mcp-progress-bridge listening on http://ADDR (MCP endpoint: /mcp)"
        let listening = tokio::time::timeout(START_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("http://").nth(1)
                    && let Some(addr) = rest.split_whitespace().next()
                    && let Ok(addr) = addr.parse::<SocketAddr>()
                {
                    return Some(addr);
                }
            }
            None
        })
        .await;
        let addr = match listening {
            Ok(Some(addr)) => addr,
            _ => {
                let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                let tail = log_tail(&log);
                return Err(match status {
                    Ok(Ok(s)) if s.code() == Some(2) => StartError::Config(tail),
                    Ok(Ok(s)) => StartError::Failed(format!("the bridge exited ({s}): {tail}")),
                    _ => StartError::Failed(format!("the bridge did not start listening: {tail}")),
                });
            }
        };
        // Keep draining stdout so the bridge never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let bridge = Self {
            child,
            addr,
            pid,
            http: reqwest::Client::new(),
        };
        bridge.wait_ready().await?;
        Ok(bridge)
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    async fn wait_ready(&self) -> Result<(), StartError> {
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
            "the bridge never became ready: {last}"
        )))
    }

    /// Resident memory of the bridge process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid)
    }

    /// CPU time the bridge process has used so far (user + system), in microseconds.
    pub fn cpu_us(&self) -> u64 {
        cpu_us(self.pid)
    }

    /// Open file descriptors of the bridge process (sockets, mostly).
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid)).map_or(0, |d| d.count())
    }

    /// The sum of a Prometheus metric's samples whose labels contain `label` (or all of them).
    pub async fn metric(&self, name: &str, label: Option<&str>) -> Result<f64, String> {
        let url = format!("{}/metrics", self.base());
        let text = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .text()
            .await
            .map_err(|e| e.to_string())?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                let series = l.split_whitespace().next().unwrap_or_default();
                let metric = series.split('{').next().unwrap_or_default();
                metric == name && label.is_none_or(|want| series.contains(want))
            })
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum())
    }

    /// SIGTERM, wait, kill if it does not stop.
    pub async fn stop(mut self) {
        terminate(self.pid);
        if tokio::time::timeout(STOP_TIMEOUT, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// `VmRSS` of a process, in KiB (0 when it cannot be read).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU time of a process, in microseconds (0 when it cannot be read).
pub fn cpu_us(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // The command name (field 2) may hold spaces; the fields after its ')' are plain.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1_000_000 / per_sec
}

pub fn terminate(pid: u32) {
    if pid > 0 {
        // SAFETY: kill(2) on a child this harness started and still owns.
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

/// Raise this process's open-file soft limit to its hard limit (children inherit it): the
/// fan-out scenario holds 10,000 connections, on both sides.
pub fn raise_fd_limit() -> u64 {
    rlimit::increase_nofile_limit(u64::MAX)
        .or_else(|_| rlimit::Resource::NOFILE.get().map(|(soft, _)| soft))
        .unwrap_or(0)
}

/// A helper process (a peer gateway) on a port, stopped on drop.
pub struct Helper {
    child: Child,
}

impl Helper {
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> Result<Self, String> {
        let stderr = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let stdout = stderr.try_clone().map_err(|e| e.to_string())?;
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        Ok(Self { child })
    }

    /// Stop the helper and everything it started (its process group).
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: signals the process group this harness created for the helper.
            unsafe {
                libc::kill(-(pid as libc::pid_t), libc::SIGTERM);
            }
        }
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            if let Some(pid) = self.child.id() {
                // SAFETY: as above.
                unsafe {
                    libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
                }
            }
            let _ = self.child.wait().await;
        }
    }
}

/// A free loopback port (bound, then released: the helper binds it just after).
pub fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
