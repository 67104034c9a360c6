//! The container image as operators run it: podman runs the image `.ci/image` built from the
//! Dockerfile (`BRIDGE_TEST_IMAGE`, e.g. `localhost/mcp-progress-bridge:ci`) as a non-root user
//! on a read-only root filesystem with no tmpfs, and these tests check from outside what ops
//! rely on: config from a mounted file and from `BRIDGE_*` variables, the image's HEALTHCHECK
//! (and that it turns unhealthy when `/healthz` stops answering), SIGTERM through tini draining
//! running jobs, and a real MCP client (rmcp) calling a tool through the published port.
//!
//! Without `BRIDGE_TEST_IMAGE` every test is skipped with the reason printed (a failure under
//! `BRIDGE_TEST_STRICT=1`, as in `.ci/run`). podman must be configured as `.ci/image` leaves it.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use crate::common::*;
use mcp_progress_bridge::auth::JobTokens;
use rmcp::{
    ServiceExt,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::json;

const IMAGE_VAR: &str = "BRIDGE_TEST_IMAGE";
/// The agent's bearer token in these tests (`BRIDGE_MCP_TOKEN`, or a mounted secret file).
const TOKEN: &str = "container-test-token-0123456789abcdef";
/// The job-URL key of the tests that mount a config, given through the environment.
const JOB_SECRET: &str = "container-test-job-secret-0123456789abcdef";
/// Where the tests mount their config file in the container.
const CONFIG_IN_CONTAINER: &str = "/etc/mcp-progress-bridge/bridge.toml";

/// The image under test, or `None` after saying why the test is skipped.
fn image(test: &str) -> Option<String> {
    match std::env::var(IMAGE_VAR) {
        Ok(image) if !image.is_empty() => Some(image),
        _ => skip(
            test,
            &format!(
                "{IMAGE_VAR} is not set: build the image with .ci/image and set \
                 {IMAGE_VAR}=localhost/mcp-progress-bridge:ci"
            ),
        ),
    }
}

/// Run `podman ARGS` to its end; its output is printed (shown when a test fails).
async fn podman(args: &[&str]) -> std::process::Output {
    let mut command = tokio::process::Command::new("podman");
    command.args(args);
    run_to_end(command, WAIT).await
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A container of the image, detached, with the bridge's port published on 127.0.0.1 only.
/// Removed (killed first) when dropped, so a failing test leaves nothing running.
struct Container {
    name: String,
    /// `http://127.0.0.1:PORT`: the published port, and the bridge's public URL.
    base: String,
}

/// What differs between the tests' containers.
#[derive(Default)]
struct Run<'a> {
    /// Port the bridge listens on inside the container (published on a free host port).
    inner_port: u16,
    /// `-e NAME=VALUE`, besides `BRIDGE_PUBLIC_URL` (always set to the published address).
    env: Vec<(&'a str, String)>,
    /// `-v HOST:CONTAINER:ro`.
    mounts: Vec<(&'a Path, &'a str)>,
    /// Arguments after the image: the bridge's own (replacing the image's CMD).
    command: Vec<&'a str>,
}

impl Container {
    async fn start(image: &str, run: Run<'_>) -> Self {
        let port = free_port();
        let name = format!("mcp-bridge-test-{:08x}", fastrand::u32(..));
        let base = format!("http://127.0.0.1:{port}");
        let inner_port = if run.inner_port == 0 {
            8080
        } else {
            run.inner_port
        };
        let mut args: Vec<String> = [
            "run",
            "--detach",
            "--name",
            &name,
            // What ops run: nothing writable, not even a tmpfs; no capabilities, no setuid.
            "--read-only",
            "--read-only-tmpfs=false",
            "--cap-drop=all",
            "--security-opt=no-new-privileges",
            "--publish",
            &format!("127.0.0.1:{port}:{inner_port}"),
            "--env",
            &format!("BRIDGE_PUBLIC_URL={base}"),
            "--env",
            "RUST_LOG=info",
        ]
        .map(String::from)
        .to_vec();
        for (key, value) in &run.env {
            args.extend(["--env".into(), format!("{key}={value}")]);
        }
        for (host, inside) in &run.mounts {
            args.extend(["--volume".into(), format!("{}:{inside}:ro", host.display())]);
        }
        args.push(image.into());
        args.extend(run.command.iter().map(|a| a.to_string()));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = podman(&argv).await;
        assert!(output.status.success(), "podman run failed");
        Self { name, base }
    }

    /// Wait until `/readyz` answers 200 through the published port.
    async fn ready(&self) {
        let url = format!("{}/readyz", self.base);
        let ready = async {
            while status_of(&url).await != Some(200) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        if tokio::time::timeout(WAIT, ready).await.is_err() {
            panic!(
                "container {} not ready at {url}; its log:\n{}",
                self.name,
                self.logs().await
            );
        }
    }

    async fn logs(&self) -> String {
        let output = podman(&["logs", &self.name]).await;
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }

    /// `podman top` columns for every process of the container, one row each.
    async fn processes(&self, columns: &[&str]) -> Vec<Vec<String>> {
        let mut args = vec!["top", &self.name];
        args.extend_from_slice(columns);
        let output = podman(&args).await;
        assert!(output.status.success(), "podman top failed");
        stdout(&output)
            .lines()
            .skip(1)
            .map(|line| {
                // The last column (args) may hold spaces: split the others off the front.
                let mut row: Vec<String> = line
                    .splitn(columns.len(), char::is_whitespace)
                    .map(|c| c.trim().to_string())
                    .collect();
                row.retain(|c| !c.is_empty());
                row
            })
            .collect()
    }

    /// The bridge's own PID inside the container (tini is PID 1).
    async fn bridge_pid(&self) -> String {
        self.processes(&["pid", "args"])
            .await
            .into_iter()
            .find(|row| {
                row.get(1).is_some_and(|args| {
                    args.starts_with("mcp-progress-bridge") && !args.contains("demo-tools")
                })
            })
            .map(|row| row[0].clone())
            .expect("the bridge process in the container")
    }

    async fn exec(&self, script: &str) -> std::process::Output {
        podman(&["exec", &self.name, "sh", "-c", script]).await
    }

    /// `podman healthcheck run`: whether the image's HEALTHCHECK passed.
    async fn healthy(&self) -> bool {
        podman(&["healthcheck", "run", &self.name])
            .await
            .status
            .success()
    }

    async fn mcp_client(&self) -> McpClient {
        let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", self.base))
            .auth_header(TOKEN);
        mcp_progress_bridge::tls::use_ring();
        within(
            "MCP initialize through the published port",
            ProgressRecorder::default().serve(StreamableHttpClientTransport::from_config(config)),
        )
        .await
        .expect("MCP initialize")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = std::process::Command::new("podman")
            .args(["rm", "--force", "--time", "0", &self.name])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A config file (and the token secret file) in a temporary directory, for mounting.
struct MountedConfig {
    dir: tempfile::TempDir,
}

impl MountedConfig {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("bridge.toml"), config).expect("write the config");
        std::fs::write(dir.path().join("mcp_token"), TOKEN).expect("write the token file");
        Self { dir }
    }

    fn config(&self) -> std::path::PathBuf {
        self.dir.path().join("bridge.toml")
    }

    fn token(&self) -> std::path::PathBuf {
        self.dir.path().join("mcp_token")
    }
}

/// A config of the kind operators mount: listen and public URL come from the environment,
/// the token from a mounted secret, the job secret from a variable.
fn mounted_config(jobs: &str) -> String {
    format!(
        "[server]\n\
         # BRIDGE_LISTEN and BRIDGE_PUBLIC_URL override these two.\n\
         listen = \"0.0.0.0:8080\"\n\
         public_url = \"http://overridden.invalid\"\n\
         allowed_hosts = [\"localhost\"]\n\
         [auth]\n\
         mcp_tokens = [\"file:/run/secrets/mcp_token\"]\n\
         job_secret = \"env:BRIDGE_TEST_JOB_SECRET\"\n\
         [jobs]\n\
         {jobs}\n\
         [[upstreams]]\n\
         name = \"tools\"\n\
         transport = \"stdio\"\n\
         command = \"mcp-progress-bridge\"\n\
         args = [\"demo-tools\"]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_read_only_as_non_root_and_serves_a_tool_call_through_the_published_port() {
    let Some(image) = image("runs_read_only_as_non_root") else {
        return;
    };
    let container = Container::start(
        &image,
        Run {
            env: vec![("BRIDGE_MCP_TOKEN", TOKEN.into())],
            ..Run::default()
        },
    )
    .await;
    container.ready().await;

    // tini, the bridge and its stdio child, all as the image's user (uid 10001 on the host
    // too: rootful podman maps no IDs), none as root.
    let processes = container.processes(&["huser", "args"]).await;
    assert_eq!(
        processes.len(),
        3,
        "tini, bridge, demo child: {processes:?}"
    );
    assert!(processes[0][1].starts_with("/usr/bin/tini -- mcp-progress-bridge"));
    assert!(processes.iter().any(|p| p[1].contains("demo-tools")));
    for process in &processes {
        assert_eq!(
            process[0], "10001",
            "every process runs as uid 10001: {processes:?}"
        );
    }

    // Nothing can be written anywhere, and the bridge runs all the same.
    let write = container
        .exec("for d in / /app /app/config /tmp /var/tmp /run /usr/local/bin; do touch $d/probe 2>&1; done; id -u")
        .await;
    let said = String::from_utf8_lossy(&write.stdout);
    assert_eq!(
        said.matches("Read-only file system").count(),
        7,
        "every write is refused: {said}"
    );
    assert!(
        said.trim_end().ends_with("10001"),
        "exec runs as 10001: {said}"
    );

    // A real MCP client through the published port: the bearer token from BRIDGE_MCP_TOKEN,
    // the Host check passing for the public URL's host, a job with live progress.
    let (status, _) = raw_status(&format!("{}/mcp", container.base), None, None).await;
    assert_eq!(status, 401, "no token, no MCP");
    let (status, body) = raw_status(
        &format!("{}/mcp", container.base),
        Some(TOKEN),
        Some("evil.example"),
    )
    .await;
    assert_eq!(status, 403, "a foreign Host is refused: {body}");

    let client = container.mcp_client().await;
    let echoed = call(
        &client,
        "demo__echo",
        json!({ "text": "from the container" }),
    )
    .await;
    assert_eq!(first_text(&echoed), "from the container");
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({ "to": 3, "delay_ms": 100 }),
    )
    .await;
    let events_url = handle.events_url.as_str();
    assert!(
        events_url.starts_with(&format!("{}/jobs/", container.base)),
        "job URLs name the published address (BRIDGE_PUBLIC_URL): {events_url}"
    );
    let events = read_job_events(events_url).await;
    assert_eq!(progress_values(&events), vec![1.0, 2.0, 3.0], "{events:?}");
    let last = events.last().expect("events");
    assert_eq!(last.event, "completed", "{events:?}");
    assert_eq!(last["result"]["content"][0]["text"], "counted to 3");
    client.cancel().await.ok();
}

/// POST an `initialize` to `/mcp` with an optional token and `Host`; the status and body.
async fn raw_status(url: &str, token: Option<&str>, host: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(
            json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": { "name": "t", "version": "0" } }
            })
            .to_string(),
        );
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(host) = host {
        request = request.header("Host", host);
    }
    let response = within("POST /mcp", request.send())
        .await
        .expect("POST /mcp");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_comes_from_a_mounted_file_and_from_the_environment() {
    let Some(image) = image("config_from_file_and_environment") else {
        return;
    };
    let mounted = MountedConfig::new(&mounted_config("mode = \"async\""));
    let config = mounted.config();
    let token = mounted.token();
    let container = Container::start(
        &image,
        Run {
            // The file says 8080; only 9090 is published: the bridge answers only if
            // BRIDGE_LISTEN won.
            inner_port: 9090,
            env: vec![
                ("BRIDGE_LISTEN", "0.0.0.0:9090".into()),
                ("BRIDGE_TEST_JOB_SECRET", JOB_SECRET.into()),
            ],
            mounts: vec![
                (&config, CONFIG_IN_CONTAINER),
                (&token, "/run/secrets/mcp_token"),
            ],
            command: vec!["--config", CONFIG_IN_CONTAINER],
        },
    )
    .await;
    container.ready().await;
    // The HEALTHCHECK follows BRIDGE_LISTEN to the port.
    assert!(container.healthy().await, "healthy on port 9090");

    // From the file: the upstream's name, the mode, the token (a mounted secret file).
    let client = container.mcp_client().await;
    let tools = within("tools/list", client.list_all_tools())
        .await
        .expect("tools/list");
    assert!(
        tools.iter().any(|t| t.name == "tools__slow_count"),
        "the upstream named in the mounted file"
    );
    let handle = running_job(&client, "tools__echo", json!({ "text": "hi" })).await;
    let id = handle.job_id.as_str();
    // From the environment: the public URL, and the job secret (`env:` in the file), with
    // which anyone holding it can mint a job's URL.
    assert!(handle.events_url.starts_with(&container.base));
    let minted = JobTokens::new(JOB_SECRET.as_bytes()).job(id.parse().expect("a job ID"));
    let events = read_job_events(&format!(
        "{}/jobs/{id}/events?token={minted}",
        container.base
    ))
    .await;
    let last = events.last().expect("events");
    assert_eq!(last.event, "completed", "{events:?}");
    assert_eq!(last["result"]["content"][0]["text"], "hi");
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_mounted_config_stops_the_container_with_exit_code_2_naming_the_key() {
    let Some(image) = image("bad_config") else {
        return;
    };
    let mounted = MountedConfig::new(&mounted_config("mode = \"sometimes\""));
    let config = format!("{}:{CONFIG_IN_CONTAINER}:ro", mounted.config().display());
    let output = podman(&[
        "run",
        "--rm",
        "--read-only",
        "--read-only-tmpfs=false",
        "--volume",
        &config,
        &image,
        "--config",
        CONFIG_IN_CONTAINER,
    ])
    .await;
    assert_eq!(output.status.code(), Some(2), "exit code 2: a config error");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(CONFIG_IN_CONTAINER) && stderr.contains("jobs.mode"),
        "names the file and the key: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_healthcheck_follows_healthz_and_fails_when_the_bridge_stops_answering() {
    let Some(image) = image("healthcheck") else {
        return;
    };
    let container = Container::start(
        &image,
        Run {
            env: vec![("BRIDGE_MCP_TOKEN", TOKEN.into())],
            ..Run::default()
        },
    )
    .await;
    container.ready().await;
    assert!(container.healthy().await, "healthy while /healthz answers");

    // Freeze the bridge: its socket still accepts connections (the kernel's backlog) but
    // nothing answers, the failure a HEALTHCHECK exists for.
    let pid = container.bridge_pid().await;
    let stop = container.exec(&format!("kill -STOP {pid}")).await;
    assert!(stop.status.success(), "SIGSTOP the bridge");
    assert!(
        !container.healthy().await,
        "unhealthy while the bridge does not answer"
    );
    let cont = container.exec(&format!("kill -CONT {pid}")).await;
    assert!(cont.status.success(), "SIGCONT the bridge");
    assert!(container.healthy().await, "healthy again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_through_tini_drains_running_jobs_until_the_drain_ends() {
    let Some(image) = image("sigterm_drains") else {
        return;
    };
    const DRAIN: Duration = Duration::from_secs(8);
    let mounted = MountedConfig::new(&mounted_config(&format!(
        "mode = \"async\"\ndrain_secs = {}",
        DRAIN.as_secs()
    )));
    let config = mounted.config();
    let token = mounted.token();
    let container = Container::start(
        &image,
        Run {
            env: vec![("BRIDGE_TEST_JOB_SECRET", JOB_SECRET.into())],
            mounts: vec![
                (&config, CONFIG_IN_CONTAINER),
                (&token, "/run/secrets/mcp_token"),
            ],
            command: vec!["--config", CONFIG_IN_CONTAINER],
            ..Run::default()
        },
    )
    .await;
    container.ready().await;
    let client = container.mcp_client().await;

    // One job that finishes within the drain (jobs.drain_secs), one that never finishes by itself.
    let finishing = running_job(
        &client,
        "tools__slow_count",
        json!({ "to": 4, "delay_ms": 300 }),
    )
    .await;
    let hanging = running_job(&client, "tools__hang", json!({})).await;
    let read = |handle: &JobHandle| {
        let url = handle.events_url.clone();
        tokio::spawn(async move {
            let mut arrived = None;
            let events = read_sse(&url, None, |e| {
                arrived = Some(Instant::now());
                e.is_terminal()
            })
            .await;
            (events, arrived.expect("an event"))
        })
    };
    let finishing_reader = read(&finishing);
    let hanging_reader = read(&hanging);
    let metrics_url = format!("{}/metrics", container.base);
    within("both readers subscribe", async {
        loop {
            let metrics = reqwest::Client::new()
                .get(&metrics_url)
                .bearer_auth(TOKEN)
                .send()
                .await
                .expect("GET /metrics")
                .text()
                .await
                .unwrap_or_default();
            if metrics.lines().any(|l| l == "bridge_sse_subscribers 2") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // SIGTERM to PID 1, as `docker stop` / Kubernetes send it: tini passes it to the bridge.
    let signalled = Instant::now();
    let kill = podman(&["kill", "--signal", "TERM", &container.name]).await;
    assert!(kill.status.success(), "podman kill");

    // While draining: not ready (a load balancer stops sending), new calls refused clearly.
    let readyz = format!("{}/readyz", container.base);
    eventually("/readyz turns 503", || async {
        status_of(&readyz).await == Some(503)
    })
    .await;
    let refused = call(&client, "tools__echo", json!({ "text": "late" })).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(
        first_text(&refused).contains("shutting down"),
        "{refused:?}"
    );

    let (events, finished_at) = within("the finishing job's reader", finishing_reader)
        .await
        .expect("reader");
    assert_eq!(events.last().unwrap().event, "completed", "{events:?}");
    assert_eq!(progress_values(&events), vec![1.0, 2.0, 3.0, 4.0]);
    assert!(
        finished_at - signalled < DRAIN,
        "a job that ends within the drain ends normally"
    );
    let (events, cancelled_at) = within("the hanging job's reader", hanging_reader)
        .await
        .expect("reader");
    let last = events.last().unwrap();
    assert_eq!(last.event, "cancelled", "{events:?}");
    assert!(
        last["reason"].as_str().unwrap().contains("shutting down"),
        "{events:?}"
    );
    assert!(
        cancelled_at - signalled >= DRAIN,
        "the hanging job got the whole drain ({:?})",
        cancelled_at - signalled
    );

    // The bridge exits by itself, 0 (tini passes its status on; a SIGKILL would be 137).
    let waited = podman(&["wait", &container.name]).await;
    assert_eq!(stdout(&waited).trim(), "0", "exit status of the container");
    // Its stdio child ended its MCP session (stdin closed by the bridge) before the bridge
    // said it had stopped: the bridge waited for its child.
    let logs = container.logs().await;
    let child_ended = logs
        .find("stdio session ended")
        .unwrap_or_else(|| panic!("the demo child's goodbye in the log:\n{logs}"));
    let stopped = logs
        .find("bridge stopped")
        .unwrap_or_else(|| panic!("the bridge's last line in the log:\n{logs}"));
    assert!(child_ended < stopped, "the child ended first:\n{logs}");
    client.cancel().await.ok();
}
