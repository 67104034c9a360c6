//! A stdio upstream: a child process speaking MCP on stdin/stdout.
//!
//! The bridge spawns the child itself (rather than through rmcp's `TokioChildProcess`) so it
//! keeps the `Child`: it must know the exit status to tell a job *why* its upstream died, and
//! it must be able to stop the child's whole process group so that wrappers such as `npx`
//! leave no orphans.

use std::{process::Stdio, time::Duration};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{ChildStdin, ChildStdout, Command},
    sync::watch,
};

use crate::{
    config::{SELF_COMMAND, UpstreamConfig},
    shutdown::Tasks,
};

/// A running child: its pipes for the transport and a way to learn of and force its end.
pub(super) struct ChildProcess {
    pub stdout: ChildStdout,
    pub stdin: ChildStdin,
    pub pid: u32,
    /// Becomes `Some("exited with …")` when the child has exited.
    pub exited: watch::Receiver<Option<String>>,
}

/// Lines of the child's stderr longer than this are cut in the bridge's log.
const MAX_STDERR_LINE: usize = 2000;

/// The command for `upstream`, and the program it runs (for errors): piped stdio, the
/// configured environment and directory, its own process group, and death with the bridge.
fn command(upstream: &UpstreamConfig) -> std::io::Result<(Command, std::path::PathBuf)> {
    let configured = upstream.command.as_deref().unwrap_or_default();
    // The default config names this binary; run the very executable that is running now, so
    // `cargo run` needs nothing on PATH.
    let program = if configured == SELF_COMMAND {
        std::env::current_exe()?
    } else {
        configured.into()
    };
    let mut command = Command::new(&program);
    command
        .args(&upstream.args)
        .envs(&upstream.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(cwd) = &upstream.cwd {
        command.current_dir(cwd);
    }
    #[cfg(unix)]
    {
        // Its own process group, so a stop reaches the grandchildren a wrapper starts.
        command.process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent. It makes the
        // kernel kill the child if the bridge dies without a chance to stop it.
        unsafe {
            command.pre_exec(|| {
                #[cfg(target_os = "linux")]
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
    Ok((command, program))
}

/// Start the child. Two tasks on `tasks` follow it: one logs its stderr, one waits for its
/// exit. Neither stops on the stage's token: they end when the child does, which the
/// supervisor ensures at shutdown ([`stop`]), and the supervisor needs the exit status.
pub(super) fn spawn(upstream: &UpstreamConfig, tasks: &Tasks) -> std::io::Result<ChildProcess> {
    let (mut command, program) = command(upstream)?;
    let mut child = command.spawn().map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot start {}: {e}", program.display()))
    })?;
    let pid = child.id().unwrap_or(0);
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("child has no stdout"))?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("child has no stdin"))?;
    if let Some(stderr) = child.stderr.take() {
        let name = upstream.name.clone();
        tasks.spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(mut line)) = lines.next_line().await {
                if line.len() > MAX_STDERR_LINE {
                    let cut = line.floor_char_boundary(MAX_STDERR_LINE);
                    line.truncate(cut);
                    line.push('…');
                }
                tracing::info!(upstream = %name, "stderr: {line}");
            }
        });
    }
    let (exit_tx, exited) = watch::channel(None);
    tasks.spawn(async move {
        let status = match child.wait().await {
            Ok(status) => format!("exited with {status}"),
            Err(e) => format!("could not be waited for: {e}"),
        };
        let _ = exit_tx.send(Some(status));
    });
    Ok(ChildProcess {
        stdout,
        stdin,
        pid,
        exited,
    })
}

/// Stop a child whose stdin is already closed: give it `grace` to exit by itself (the MCP
/// stdio shutdown sequence), then SIGTERM its process group, then SIGKILL it.
pub(super) async fn stop(pid: u32, exited: &mut watch::Receiver<Option<String>>, grace: Duration) {
    if wait_exit(exited, grace).await {
        // The leader is gone; anything it started and left in its group goes too.
        signal_group(pid, libc::SIGTERM);
        return;
    }
    signal_group(pid, libc::SIGTERM);
    if wait_exit(exited, Duration::from_secs(2)).await {
        return;
    }
    signal_group(pid, libc::SIGKILL);
    wait_exit(exited, Duration::from_secs(2)).await;
}

async fn wait_exit(exited: &mut watch::Receiver<Option<String>>, within: Duration) -> bool {
    matches!(
        tokio::time::timeout(within, exited.wait_for(Option::is_some)).await,
        Ok(Ok(_))
    )
}

fn signal_group(pid: u32, signal: i32) {
    if pid == 0 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals the process group we created for the child.
    unsafe {
        libc::kill(-(pid as i32), signal);
    }
}
