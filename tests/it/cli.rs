//! The terminal commands against a real bridge: `call` and `watch` run as child processes (the
//! built binary), the bridge in this process with the demo tools as a real stdio child. With
//! stderr not a terminal, `watch` writes one `progress N/T …` line per step instead of a bar,
//! which is what these tests read.

use std::{process::Stdio, time::Duration};

use crate::common::*;
use mcp_progress_bridge::config::CallMode;
use serde_json::json;
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, BufReader},
    process::Command,
};

const LIMIT: Duration = Duration::from_secs(60);

fn bin() -> Command {
    let mut command = Command::new(BIN);
    command.env_remove("BRIDGE_URL").env_remove("BRIDGE_TOKEN");
    command
}

/// The `progress` values of the plain-text progress lines, in order.
fn progress_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("progress "))
        .map(|rest| rest.split(' ').next().unwrap_or_default().to_string())
        .collect()
}

fn steps(n: u32, total: u32) -> Vec<String> {
    (1..=n).map(|i| format!("{i}/{total}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_runs_a_tool_watches_its_job_and_prints_the_result() {
    let bridge = start_bridge(|_| {}).await;
    let mut command = bin();
    command.args([
        "call",
        "demo__slow_count",
        "--args",
        r#"{"to": 5, "delay_ms": 40}"#,
        "--url",
        &bridge.mcp_url(),
    ]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stdout.trim(), "counted to 5");
    assert!(stderr.contains("is running as job"), "{stderr}");
    assert_eq!(progress_lines(&stderr), steps(5, 5));

    // The configured mode (auto here) answers a quick call directly: printed all the same.
    let mut command = bin();
    command.args([
        "call",
        "demo__echo",
        "--args",
        r#"{"text": "hello"}"#,
        "--mode",
        "configured",
        "--url",
        &bridge.mcp_url(),
    ]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "hello");
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_say_how_the_job_ended() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    // failed: exit 1, with the reason.
    let mut command = bin();
    command.args([
        "call",
        "demo__fail_after",
        "--args",
        r#"{"steps": 2, "delay_ms": 10}"#,
        "--url",
        &bridge.mcp_url(),
    ]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("failed (tool_error): failed after 2 steps as asked"),
        "{stderr}"
    );

    // cancelled: exit 130. Watch a long job, cancel it once watch shows progress.
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 1000, "delay_ms": 50}),
    )
    .await;
    let mut child = bin()
        .args(["watch", &handle.events_url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("watch starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    within("watch shows progress", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("progress ") {
                return;
            }
        }
        panic!("watch ended before any progress");
    })
    .await;
    let (status, _) = post_json(&handle.cancel_url).await;
    assert_eq!(status, 202);
    let mut rest = Vec::new();
    let status = within("watch exits", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            rest.push(line);
        }
        child.wait().await.unwrap()
    })
    .await;
    assert_eq!(status.code(), Some(130), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.starts_with("cancelled: ")),
        "{rest:?}"
    );

    // A job that does not exist: exit 2 and a reason.
    let mut command = bin();
    command.args([
        "watch",
        &format!(
            "{}/jobs/0123456789abcdef0123456789abcdef/events",
            bridge.base
        ),
    ]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("unknown or expired"),
        "says why"
    );
    // A URL whose token has expired: the bridge's 404 tells it from nothing, the token does.
    let id = &handle.job_id;
    let expired = job_tokens().mint_until(mcp_progress_bridge::auth::TokenScope::JobRead, id, 1);
    let mut command = bin();
    command.args([
        "watch",
        &format!("{}/jobs/{id}/events?token={expired}", bridge.base),
    ]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("token has expired"), "{stderr}");
    assert!(stderr.contains("token job ID --url"), "{stderr}");
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_after_a_dropped_connection_without_losing_or_repeating_a_step() {
    let (bridge, proxy) = start_bridge_behind_proxy(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 10, "delay_ms": 250}),
    )
    .await;
    assert!(
        handle.events_url.starts_with(&proxy.base),
        "through the proxy"
    );
    let mut child = bin()
        .args(["watch", &handle.events_url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("watch starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut stderr = Vec::new();
    within("watch sees step 3", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let third = line.starts_with("progress 3/10");
            stderr.push(line);
            if third {
                return;
            }
        }
        panic!("watch ended early: {stderr:?}");
    })
    .await;
    assert!(proxy.drop_all() >= 1, "the watch's connection was cut");
    let status = within("watch exits", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            stderr.push(line);
        }
        child.wait().await.unwrap()
    })
    .await;
    let text = stderr.join("\n");
    assert_eq!(status.code(), Some(0), "{text}");
    assert_eq!(progress_lines(&text), steps(10, 10), "{text}");
    assert!(text.contains("reconnecting"), "{text}");
    assert!(text.contains("reconnected; resuming after event"), "{text}");
    let mut stdout = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout)
        .await
        .unwrap();
    assert_eq!(stdout.trim(), "counted to 10");
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_message_and_exit_2() {
    for (args, says) in [
        (vec!["watch", "not a url"], "is not a URL"),
        (
            vec![
                "call",
                "demo__echo",
                "--args",
                "[1]",
                "--url",
                "http://127.0.0.1:9/mcp",
            ],
            "must be a JSON object",
        ),
        (
            vec!["call", "demo__echo", "--url", "http://127.0.0.1:9/mcp"],
            "is the bridge running there?",
        ),
    ] {
        let mut command = bin();
        command.args(&args);
        let output = run_to_end(command, LIMIT).await;
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// The shipped default config: the demo tools as a stdio child, the memory store.
const DEFAULT_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/bridge.toml");

/// The bridge binary on the default config, with nothing of this environment that could
/// change what it prints.
fn bridge_command() -> Command {
    let mut command = bin();
    command.args(["--config", DEFAULT_CONFIG]);
    for name in [
        "BRIDGE_LISTEN",
        "BRIDGE_PUBLIC_URL",
        "BRIDGE_MCP_TOKEN",
        "BRIDGE_LOG_JSON",
        "RUST_LOG",
    ] {
        command.env_remove(name);
    }
    command
}

/// Run the bridge on `--listen 127.0.0.1:0` until its demo upstream is ready, stop it with
/// SIGINT, and return its stdout (the banner) and its whole stderr log.
async fn start_and_stop(public_url: Option<&str>) -> (String, String) {
    let mut command = bridge_command();
    command.args(["--listen", "127.0.0.1:0"]);
    if let Some(url) = public_url {
        command.env("BRIDGE_PUBLIC_URL", url);
    }
    // Ready once `/readyz` says so: the demo upstream is up.
    let mut bridge = BridgeProcess::spawn(command, None, "default")
        .await
        .unwrap_or_else(|e| panic!("the bridge starts: {e}"));
    bridge.signal(libc::SIGINT);
    let status = within("the bridge stops", bridge.wait()).await.unwrap();
    let (banner, log) = (bridge.stdout().await, bridge.log());
    println!("--- stdout\n{banner}\n--- stderr\n{log}");
    assert!(status.success(), "{status:?}");
    assert!(log.contains("bridge stopped"), "the whole log was read");
    (banner, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_is_quiet_and_names_the_jobs_page() {
    let (banner, log) = start_and_stop(Some("http://bridge.example:8080")).await;
    let lines: Vec<&str> = banner.lines().collect();
    assert!(
        lines[0].starts_with("mcp-progress-bridge listening on http://127.0.0.1:"),
        "{banner}"
    );
    assert!(
        banner.contains("jobs page:    http://bridge.example:8080/\n"),
        "{banner}"
    );
    assert!(
        banner.contains("MCP endpoint: http://bridge.example:8080/mcp"),
        "{banner}"
    );
    // rmcp's info lines (each peer's whole initialize info, task ends) stay out of the
    // default log, from the bridge and from its demo child alike.
    assert!(!log.contains("rmcp::"), "{log}");
    assert!(!log.contains("peer_info"), "{log}");
    // public_url names another host: nothing to judge, no warning.
    assert!(!log.contains("server.public_url is"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_moved_away_from_public_url_is_warned_about() {
    let (banner, log) = start_and_stop(None).await;
    let port = banner
        .lines()
        .next()
        .and_then(|l| l.rsplit(':').next())
        .expect("the banner names the address");
    assert!(
        log.contains(&format!(
            "server.public_url is http://127.0.0.1:8080 but the bridge listens on 127.0.0.1:{port}"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!("Set BRIDGE_PUBLIC_URL=http://127.0.0.1:{port}")),
        "{log}"
    );
}

/// `public_url` on port 0 with `listen` on port 0: the port the bridge got, in the banner (and
/// in job handles: every test bridge run as a child starts this way), with nothing to warn about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_url_on_port_0_names_the_port_the_bridge_got() {
    let (banner, log) = start_and_stop(Some("http://127.0.0.1:0")).await;
    let addr = banner
        .lines()
        .next()
        .and_then(|l| l.rsplit("http://").next())
        .expect("the banner names the address");
    assert!(!addr.ends_with(":0"), "{banner}");
    assert!(
        banner.contains(&format!("jobs page:    http://{addr}/\n")),
        "{banner}"
    );
    assert!(
        banner.contains(&format!("MCP endpoint: http://{addr}/mcp")),
        "{banner}"
    );
    assert!(!log.contains("server.public_url is"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_in_use_is_reported_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut command = bridge_command();
    command.args(["--listen", &addr]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(
        error.contains(&format!("cannot listen on {addr}")),
        "{error}"
    );
    assert!(error.contains("is another process using it?"), "{error}");
    assert_eq!(error.matches("os error").count(), 1, "{error}");
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_log_json_takes_1_as_well_as_true() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for value in ["1", "true"] {
        let mut command = bridge_command();
        command
            .args(["--listen", &addr])
            .env("BRIDGE_LOG_JSON", value);
        let output = run_to_end(command, LIMIT).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{value}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        let line: serde_json::Value = serde_json::from_str(first)
            .unwrap_or_else(|e| panic!("{value}: not a JSON log line ({e}): {stderr}"));
        assert_eq!(line["fields"]["message"], "starting", "{value}: {stderr}");
    }
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_options_show_and_work_only_where_the_bridge_runs() {
    let help = |args: &'static [&'static str]| async move {
        let mut command = bin();
        command.args(args).arg("--help");
        let output = run_to_end(command, LIMIT).await;
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    for args in [&[][..], &["serve"][..]] {
        let text = help(args).await;
        assert!(text.contains("--config <PATH>"), "{args:?}: {text}");
        assert!(text.contains("--listen <ADDR>"), "{args:?}: {text}");
        assert!(text.contains("BRIDGE_PUBLIC_URL"), "{args:?}: {text}");
    }
    for args in [&["watch"][..], &["call"][..], &["demo-tools"][..]] {
        let text = help(args).await;
        assert!(!text.contains("--config"), "{args:?}: {text}");
        assert!(!text.contains("--listen"), "{args:?}: {text}");
    }
    // `token` reads a config (its job_secret), so it has --config of its own; never --listen.
    for args in [
        &["token"][..],
        &["token", "job"][..],
        &["token", "correlation"][..],
    ] {
        let text = help(args).await;
        assert!(!text.contains("--listen"), "{args:?}: {text}");
        assert!(
            text.contains("auth.job_secret signs the token"),
            "{args:?}: {text}"
        );
    }
    let text = help(&["token", "job"]).await;
    let cancel = text
        .lines()
        .find(|l| l.trim_start().starts_with("--cancel"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        cancel.contains("cancel token"),
        "--cancel has help: {cancel}"
    );

    // Given before a client command, a serve option is refused instead of ignored.
    let mut command = bin();
    command.args([
        "--listen",
        "127.0.0.1:9",
        "watch",
        "http://127.0.0.1:9/jobs/x/events",
    ]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--listen is an option of running the bridge"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_on_a_finished_job_shows_its_steps_without_a_stale_eta() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 5, "delay_ms": 40}),
    )
    .await;
    let events_url = handle.events_url;
    let events = within("the job ends", read_job_events(&events_url)).await;
    assert!(events.last().is_some_and(|e| e.event == "completed"));

    let mut command = bin();
    command.args(["watch", &events_url]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "counted to 5"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("job completed at 5/5"), "{stderr}");
    assert_eq!(progress_lines(&stderr), steps(5, 5), "{stderr}");
    assert!(
        !stderr.contains("ETA"),
        "replayed steps carry no ETA: {stderr}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A question the job's tool asks: `watch` prints it, its fields, and the command that
/// answers it (with the handle's input_url); answered that way, the job completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_a_question_and_how_to_answer_it() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    let handle = running_job(&client, "demo__ask", json!({"question": "Which port?"})).await;
    let input_url = handle.raw["input_url"].as_str().unwrap().to_string();
    let mut child = bin()
        .args(["watch", &handle.events_url, "--input-url", &input_url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("watch starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut printed = Vec::new();
    within("watch prints the question", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let done = line.contains("curl -X POST");
            printed.push(line);
            if done {
                return;
            }
        }
        panic!("watch ended before the question: {printed:?}");
    })
    .await;
    let text = printed.join("\n");
    assert!(text.contains("the tool asks (question q"), "{text}");
    assert!(text.contains("Which port?"), "{text}");
    assert!(text.contains("field answer: string, required"), "{text}");
    assert!(text.contains(&input_url), "the handle's input_url: {text}");
    let answered = reqwest::Client::new()
        .post(&input_url)
        .json(&json!({"action": "accept", "content": {"answer": "8080"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    let mut rest = Vec::new();
    let status = within("watch exits", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            rest.push(line);
        }
        child.wait().await.unwrap()
    })
    .await;
    assert_eq!(status.code(), Some(0), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.contains("answered: accept")),
        "{rest:?}"
    );
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .await
        .unwrap();
    assert!(stdout.contains("you said: 8080"), "{stdout}");
    bridge.shutdown(Duration::from_secs(1)).await;
}
