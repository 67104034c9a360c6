//! The bridge under test as a separate process (so its memory is its own), with the limits
//! raised past what the scenarios need, and what the benchmark reads of it (memory, CPU, open
//! files, metrics); the other processes a scenario runs. Starting and stopping the bridge is
//! the tests' own way (`tests/it/common/process.rs`, the `process` module here).

use std::{net::SocketAddr, path::Path, process::Stdio, time::Duration};

use tokio::process::{Child, Command};

pub use crate::process::{BridgeProcess, StartError, log_tail};

/// Write `config` (everything but `[server]` and `[limits]`, which are generated) next to the
/// log, start the bridge on a free loopback port and wait until `/readyz` says every upstream
/// is up.
pub async fn start_bridge(
    bin: &Path,
    dir: &Path,
    name: &str,
    config: &str,
) -> Result<BridgeProcess, StartError> {
    // `BENCH_SSE_WRITERS=N` sets `server.sse_writers` (to compare the shared writers with a
    // task per reader against the same floor; the fan-out also takes a list, see `fanout`).
    let writers = std::env::var("BENCH_SSE_WRITERS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok());
    start_bridge_with_writers(bin, dir, name, config, writers).await
}

/// [`start_bridge`] with `server.sse_writers` set to `writers` (`None`: the bridge's default).
pub async fn start_bridge_with_writers(
    bin: &Path,
    dir: &Path,
    name: &str,
    config: &str,
    writers: Option<usize>,
) -> Result<BridgeProcess, StartError> {
    let listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let text = format!("{}{config}", generated(listen, writers));
    BridgeProcess::start(bin, Some(dir), name, &text, &[]).await
}

/// [`start_bridge`] listening on `listen` (a replica that comes back on its address after a
/// restart, behind a proxy that knows it by that address).
pub async fn start_bridge_on(
    bin: &Path,
    dir: &Path,
    name: &str,
    listen: SocketAddr,
    config: &str,
) -> Result<BridgeProcess, StartError> {
    let text = format!("{}{config}", generated(listen, None));
    BridgeProcess::start(bin, Some(dir), name, &text, &[]).await
}

/// [`start_bridge_on`] with `env` set for the bridge (`BRIDGE__…` settings of a scenario).
pub async fn start_bridge_on_with_env(
    bin: &Path,
    dir: &Path,
    name: &str,
    listen: SocketAddr,
    config: &str,
    env: &[(&str, &str)],
) -> Result<BridgeProcess, StartError> {
    let text = format!("{}{config}", generated(listen, None));
    BridgeProcess::start(bin, Some(dir), name, &text, env).await
}

/// The `[server]` and `[limits]` sections. The limits are raised past what the scenarios need
/// (10,000 readers of one job, 10,000 jobs, bursts of calls): the benchmark measures the
/// engine, not the default limits.
fn generated(listen: SocketAddr, writers: Option<usize>) -> String {
    let writers = writers.map_or(String::new(), |n| format!("sse_writers = {n}\n"));
    format!(
        "[server]\nlisten = \"{listen}\"\nallowed_hosts = []\n{writers}\n\
         [limits]\nmax_jobs_per_token = 100000\ncalls_per_minute = 10000000\n\
         max_subscribers_per_channel = 100000\nmax_subscribers = 100000\n\
         max_connections = 100000\nmax_connections_per_address = 100000\n\n"
    )
}

/// What the benchmark measures of the bridge process.
impl BridgeProcess {
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
            .http()
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
