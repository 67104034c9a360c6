//! The bridge behind real reverse proxies: Debian's nginx and Caddy, run with the very files the
//! project ships (`deploy/nginx/mcp-progress-bridge.conf`, `deploy/caddy/Caddyfile`), in front of
//! a bridge with the demo tools.
//!
//! - Progress events reach an SSE reader one by one, spaced as the tool sends them, not in a
//!   burst at the end; the same measurement through a deliberately buffering variant of the
//!   config fails, so the check is known to catch buffering.
//! - `Last-Event-ID` reconnects through nginx replay exactly what was missed.
//! - The bridge's `Host` and `Origin` checks on `/mcp` work with what nginx forwards, and the
//!   bridge trusts no `X-Forwarded-*` header for them.
//! - `server.trusted_proxies`: the per-address limits count what a trusted proxy forwards, and
//!   a forged `X-Forwarded-For` from any other peer is ignored.
//! - A connection nginx keeps to the bridge serves a POST after an idle gap past the old 10 s,
//!   and the shipped access log format writes no `?token=`.
//!
//! Without nginx, Caddy or curl (`apt-get install nginx caddy curl`) the tests are skipped, or
//! fail under `BRIDGE_TEST_STRICT=1`.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Config};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

const NGINX: &str = "/usr/sbin/nginx";
/// The shipped location block, included by the test's nginx.conf.
const SHIPPED: &str = "deploy/nginx/mcp-progress-bridge.conf";

/// The shipped HTTPS server block.
const SHIPPED_TLS: &str = "deploy/nginx/tls.conf";

/// The shipped proxy config, as text.
fn shipped_config() -> String {
    std::fs::read_to_string(repo_root().join(SHIPPED)).expect("the shipped nginx config")
}

/// The `log_format bridge …;` statement of the shipped whole nginx.conf, which the test's
/// nginx logs with (so the test sees what the shipped log writes).
fn shipped_log_format() -> String {
    let text = std::fs::read_to_string(repo_root().join("deploy/nginx/nginx.conf"))
        .expect("the shipped nginx.conf");
    let start = text
        .find("log_format bridge")
        .expect("deploy/nginx/nginx.conf defines `log_format bridge`");
    let end = start + text[start..].find(';').expect("the statement ends");
    text[start..=end].to_string()
}

/// `text` with `from` replaced by `to`; panics if `from` is not there, so a variant cannot
/// silently stop differing from the shipped file when that file changes.
fn variant(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{SHIPPED} has no {from:?} any more");
    text.replace(from, to)
}

/// nginx as a child process, with its own prefix directory, proxying to one bridge.
struct Nginx {
    child: std::process::Child,
    dir: tempfile::TempDir,
    /// `http://127.0.0.1:PORT`
    base: String,
}

impl Nginx {
    /// Whether nginx (and curl, the measuring reader) are installed; if not, the test is
    /// skipped (or fails in strict mode).
    fn present(test: &str) -> bool {
        let curl = std::process::Command::new("curl")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if Path::new(NGINX).exists() && curl {
            return true;
        }
        skip_or_fail(
            test,
            "nginx or curl is not installed (apt-get install nginx curl)",
        );
        false
    }

    /// Start nginx on `port` (a [`HeldPort`]'s: it listens with `reuseport`) with `location` (the shipped config or a variant of it) in its
    /// server block, and the bridge at `upstream` (host:port) as `mcp_progress_bridge`.
    async fn start(port: u16, upstream: &str, location: &str) -> Self {
        Self::start_with(port, upstream, location, None).await
    }

    /// [`Nginx::start`]; with `tls` (a directory holding `leaf.pem` and `leaf.key`), the server
    /// block is the shipped deploy/nginx/tls.conf, listening with TLS on `port`.
    async fn start_with(port: u16, upstream: &str, location: &str, tls: Option<&Path>) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let d = dir.path().display();
        std::fs::write(dir.path().join("location.conf"), location).expect("write location.conf");
        let server = match tls {
            None => format!(
                "server {{\n listen 127.0.0.1:{port} reuseport;\n include {d}/location.conf;\n}}\n"
            ),
            Some(certs) => {
                let shipped = std::fs::read_to_string(repo_root().join(SHIPPED_TLS))
                    .expect("the shipped tls.conf");
                let c = certs.display();
                [
                    (
                        "listen 8443 ssl;",
                        format!("listen 127.0.0.1:{port} ssl reuseport;"),
                    ),
                    ("/etc/nginx/tls/tls.crt", format!("{c}/leaf.pem")),
                    ("/etc/nginx/tls/tls.key", format!("{c}/leaf.key")),
                    (
                        "include /etc/nginx/mcp-progress-bridge.conf;",
                        format!("include {d}/location.conf;"),
                    ),
                ]
                .iter()
                .fold(shipped, |text, (from, to)| variant(&text, from, to))
            }
        };
        let log_format = shipped_log_format();
        let conf = format!(
            "daemon off;\n\
             master_process off;\n\
             pid {d}/nginx.pid;\n\
             error_log {d}/error.log info;\n\
             events {{ worker_connections 512; }}\n\
             http {{\n\
               {log_format}\n\
               access_log {d}/access.log bridge;\n\
               client_body_temp_path {d}/client_body;\n\
               proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n\
               uwsgi_temp_path {d}/uwsgi;\n\
               scgi_temp_path {d}/scgi;\n\
               upstream mcp_progress_bridge {{ server {upstream}; keepalive 8; }}\n\
               {server}\
             }}\n"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let child = std::process::Command::new(NGINX)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nginx starts");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut nginx = Self {
            child,
            dir,
            base: format!("{scheme}://127.0.0.1:{port}"),
        };
        let addr = format!("127.0.0.1:{port}");
        let up = async {
            while tokio::net::TcpStream::connect(&addr).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        if tokio::time::timeout(WAIT, up).await.is_err() || nginx.exited() {
            panic!("nginx did not start; its error log:\n{}", nginx.error_log());
        }
        nginx
    }

    fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bridge with the demo tools (`slow_count` answering with a job handle) whose public URL
/// is `http://localhost:PORT`, the address nginx will listen on; only `localhost` is an
/// allowed Host on `/mcp`.
async fn bridge_for_proxy_port(port: u16) -> TestBridge {
    bridge_for_public_url(format!("http://localhost:{port}")).await
}

/// [`bridge_for_proxy_port`] with the public URL `public` (the proxy's address, `https://…`).
async fn bridge_for_public_url(public: String) -> TestBridge {
    let mut config = Config::default_for_tests();
    config.upstreams = vec![with_tool_mode(
        demo_stdio_upstream("demo"),
        "slow_count",
        CallMode::Async,
    )];
    config.server.allowed_hosts = vec!["localhost".into()];
    start_config_at(config, Some(public)).await
}

/// The bridge's `host:port`, for nginx's upstream block.
fn authority(bridge: &TestBridge) -> String {
    bridge.base.trim_start_matches("http://").to_string()
}

/// When each progress event of one job reached the reader.
struct Arrivals {
    /// Milliseconds between consecutive progress events.
    gaps_ms: Vec<u128>,
    /// Milliseconds from the first to the last progress event.
    span_ms: u128,
}

const STEPS: u64 = 6;
const DELAY_MS: u64 = 400;

/// Start a `slow_count` job (STEPS steps, DELAY_MS apart) through `mcp_url` and read its events
/// URL (through the proxy) with curl, noting when each progress event arrives. curl asks for
/// compressed responses as every browser does (`--compressed`: `Accept-Encoding: gzip, …`) and
/// decompresses as data comes in, so a proxy that compresses and buffers is seen as a browser
/// would see it.
async fn measure_arrivals(mcp_url: &str) -> Arrivals {
    let client = connect_url(mcp_url).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({ "to": STEPS, "delay_ms": DELAY_MS }),
    )
    .await;
    let arrivals = read_arrivals(handle.events_url.as_str(), &[]).await;
    client.cancel().await.ok();
    arrivals
}

/// Read `url` (a job's events) with curl and `curl_args`, noting when each progress event
/// arrives (see [`measure_arrivals`]).
async fn read_arrivals(url: &str, curl_args: &[&str]) -> Arrivals {
    let mut curl = tokio::process::Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--no-buffer",
            "--compressed",
            url,
        ])
        .args(curl_args)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("curl starts");
    let mut lines = BufReader::new(curl.stdout.take().expect("curl's stdout")).lines();
    let mut times = Vec::new();
    let mut seen = Vec::new();
    within("the job's events through the proxy", async {
        while let Some(line) = lines.next_line().await.expect("read curl's output") {
            match line.strip_prefix("event: ") {
                Some("progress") => times.push(Instant::now()),
                Some("completed" | "failed" | "cancelled") => {
                    seen.push(line);
                    return;
                }
                _ => {}
            }
            seen.push(line);
        }
    })
    .await;
    assert_eq!(
        seen.last().map(String::as_str),
        Some("event: completed"),
        "the stream ends with its terminal event: {seen:?}"
    );
    assert_eq!(times.len() as u64, STEPS, "every progress event: {seen:?}");
    Arrivals {
        gaps_ms: times
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect(),
        span_ms: (times[times.len() - 1] - times[0]).as_millis(),
    }
}

/// Whether events arrived as the tool sent them: spread over at least half the time the tool
/// took between its first and last step, most of them a good part of a step apart. A proxy
/// that buffers delivers them together at the end (span and gaps near 0). Load on the
/// machine only widens gaps, so a live stream cannot fail this by being slow.
fn live(arrivals: &Arrivals) -> Result<(), String> {
    let expected_span = (STEPS - 1) as u128 * DELAY_MS as u128;
    let spaced = arrivals
        .gaps_ms
        .iter()
        .filter(|&&g| g >= DELAY_MS as u128 / 4)
        .count();
    if arrivals.span_ms * 2 < expected_span || spaced * 2 < arrivals.gaps_ms.len() {
        return Err(format!(
            "progress arrived in a burst: span {} ms (the tool took {expected_span} ms), gaps {:?} ms",
            arrivals.span_ms, arrivals.gaps_ms
        ));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_arrives_one_by_one_through_nginx_and_a_buffering_proxy_is_caught() {
    if !Nginx::present("progress_through_nginx") {
        return;
    }
    let shipped = shipped_config();
    // Held for the test: nginx and Caddy listen on it with SO_REUSEPORT, nothing else can.
    let held = HeldPort::new();
    let port = held.port();
    let bridge = bridge_for_proxy_port(port).await;
    let mcp_url = format!("http://localhost:{port}/mcp");

    let nginx = Nginx::start(port, &authority(&bridge), &shipped).await;
    let arrivals = measure_arrivals(&mcp_url).await;
    println!(
        "shipped config: span {} ms, gaps {:?} ms",
        arrivals.span_ms, arrivals.gaps_ms
    );
    live(&arrivals).unwrap_or_else(|e| panic!("through the shipped nginx config: {e}"));
    drop(nginx);

    // A proxy that buffers and compresses, and ignores the bridge's `X-Accel-Buffering: no`:
    // the burst this check is for. The same measurement must fail. (Buffering alone does not
    // do it with nginx 1.22: it passes on each chunk it reads; compression of a buffered
    // response does, as nginx flushes the compressor only on unbuffered responses.)
    let gzip = variant(
        &shipped,
        "gzip off;",
        "gzip on; gzip_types text/event-stream; gzip_min_length 1;",
    );
    let buffering = variant(
        &gzip,
        "proxy_buffering off;",
        "proxy_buffering on; proxy_ignore_headers X-Accel-Buffering;",
    );
    let nginx = Nginx::start(port, &authority(&bridge), &buffering).await;
    let arrivals = measure_arrivals(&mcp_url).await;
    println!(
        "buffering config: span {} ms, gaps {:?} ms",
        arrivals.span_ms, arrivals.gaps_ms
    );
    assert!(
        live(&arrivals).is_err(),
        "a buffering nginx must fail the check: span {} ms, gaps {:?}",
        arrivals.span_ms,
        arrivals.gaps_ms
    );
    drop(nginx);

    // The same buffering, compressing nginx, but honouring the bridge's header (nginx's
    // default): live again. This is what protects a deployment whose proxy config forgot
    // `proxy_buffering off`.
    let header_only = variant(&gzip, "proxy_buffering off;", "proxy_buffering on;");
    let _nginx = Nginx::start(port, &authority(&bridge), &header_only).await;
    let arrivals = measure_arrivals(&mcp_url).await;
    println!(
        "buffering config honouring X-Accel-Buffering: span {} ms, gaps {:?} ms",
        arrivals.span_ms, arrivals.gaps_ms
    );
    live(&arrivals)
        .unwrap_or_else(|e| panic!("X-Accel-Buffering: no alone should stream too: {e}"));
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_reconnects_through_nginx_replay_exactly_what_was_missed() {
    if !Nginx::present("last_event_id_through_nginx") {
        return;
    }
    // Held for the test: nginx and Caddy listen on it with SO_REUSEPORT, nothing else can.
    let held = HeldPort::new();
    let port = held.port();
    let bridge = bridge_for_proxy_port(port).await;
    let _nginx = Nginx::start(port, &authority(&bridge), &shipped_config()).await;
    let client = connect_url(&format!("http://localhost:{port}/mcp")).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({ "to": 6, "delay_ms": 150 }),
    )
    .await;
    let url = handle.events_url.clone();
    assert!(url.starts_with(&format!("http://localhost:{port}/jobs/")));

    // Read until the second progress event, then drop the connection.
    let first = read_sse(&url, None, |e| {
        e.event == "progress" && e["progress"].as_f64() == Some(2.0)
    })
    .await;
    let last_seen = first.last().unwrap().seq();
    // Come back through nginx with the header a browser's EventSource sends.
    let rest = read_sse(&url, Some(last_seen), SseEvent::is_terminal).await;
    assert_eq!(
        rest[0].seq(),
        last_seen + 1,
        "resumes right after: {rest:?}"
    );
    let all: Vec<SseEvent> = first.iter().chain(rest.iter()).cloned().collect();
    assert_consecutive(&all);
    assert_eq!(
        progress_values(&all),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        "each progress once: {all:?}"
    );
    assert_eq!(all.last().unwrap().event, "completed");

    // The query parameter works through nginx too (for clients that cannot set headers).
    let replay = read_sse(
        &format!("{url}&last_event_id={last_seen}"),
        None,
        SseEvent::is_terminal,
    )
    .await;
    let ids: Vec<u64> = replay.iter().map(SseEvent::seq).collect();
    let expected: Vec<u64> = rest.iter().map(SseEvent::seq).collect();
    assert_eq!(ids, expected, "the same events after {last_seen}");
    client.cancel().await.ok();
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// POST an `initialize` to `url` with extra headers; the status and body.
async fn initialize(url: &str, headers: &[(&str, &str)]) -> (u16, String) {
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
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = within("POST /mcp", request.send())
        .await
        .expect("POST /mcp");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// HTTPS through the shipped TLS server block (deploy/nginx/tls.conf, with a certificate of a
/// private CA for `localhost`): an MCP session and a `tools/call` over https, then the job's
/// `events_url`, which the bridge writes with its https public URL, read through nginx with
/// progress arriving one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_through_the_shipped_nginx_tls_block_streams_progress_one_by_one() {
    if !Nginx::present("https_through_nginx") {
        return;
    }
    let certs = tempfile::tempdir().expect("a temporary directory");
    if !make_certificates(certs.path()) {
        return skip_or_fail("https_through_nginx", "the openssl command is missing");
    }
    let held = HeldPort::new();
    let port = held.port();
    let bridge = bridge_for_public_url(format!("https://localhost:{port}")).await;
    let _nginx = Nginx::start_with(
        port,
        &authority(&bridge),
        &shipped_config(),
        Some(certs.path()),
    )
    .await;
    let ca_file = certs.path().join("ca.pem");
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&ca_file).expect("ca.pem"))
        .expect("a PEM certificate");
    let https = reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .expect("a client");
    let mut mcp = RawMcp::with_client(&format!("https://localhost:{port}/mcp"), https);
    let opened = mcp.initialize().await;
    assert_eq!(opened.status, 200, "initialize over https: {}", opened.body);
    let call = mcp
        .post(
            json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "demo__slow_count", "arguments": { "to": STEPS, "delay_ms": DELAY_MS } } })
            .to_string(),
            &[],
        )
        .await;
    let handle = &call.message.as_ref().expect("an answer")["result"]["structuredContent"];
    let events_url = handle["events_url"].as_str().unwrap_or_default();
    assert!(
        events_url.starts_with(&format!("https://localhost:{port}/jobs/")),
        "the handle names the https address: {}",
        call.body
    );
    let ca = ca_file.to_str().expect("a UTF-8 path");
    let arrivals = read_arrivals(events_url, &["--cacert", ca]).await;
    println!(
        "over https: span {} ms, gaps {:?} ms",
        arrivals.span_ms, arrivals.gaps_ms
    );
    live(&arrivals).unwrap_or_else(|e| panic!("through the shipped tls.conf: {e}"));
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_origin_checks_work_through_nginx_and_no_forwarded_header_is_trusted() {
    if !Nginx::present("host_checks_through_nginx") {
        return;
    }
    // Held for the test: nginx and Caddy listen on it with SO_REUSEPORT, nothing else can.
    let held = HeldPort::new();
    let port = held.port();
    let bridge = bridge_for_proxy_port(port).await;
    let shipped = shipped_config();
    let nginx = Nginx::start(port, &authority(&bridge), &shipped).await;
    let public = format!("http://localhost:{port}");
    let through_nginx = format!("{}/mcp", nginx.base);

    // The public name: nginx passes the client's Host on (`proxy_set_header Host $host`), the
    // bridge accepts it (the host of server.public_url). A real client, end to end.
    let client = connect_url(&format!("{public}/mcp")).await;
    let echoed = call(&client, "demo__echo", json!({ "text": "via nginx" })).await;
    assert_eq!(first_text(&echoed), "via nginx");
    client.cancel().await.ok();
    let (status, body) = initialize(&through_nginx, &[("Host", "localhost")]).await;
    assert_eq!(status, 200, "{body}");

    // Another name reaches nginx (DNS rebinding, or a name the bridge was not told about):
    // refused by the bridge, and the answer says which setting would admit it.
    let (status, body) = initialize(&through_nginx, &[("Host", "evil.example")]).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("server.allowed_hosts"), "{body}");

    // X-Forwarded-Host is not trusted: it neither admits a refused Host nor refuses an
    // accepted one, through nginx or straight at the bridge.
    for url in [&through_nginx, &bridge.mcp_url()] {
        let (status, body) = initialize(
            url,
            &[("Host", "evil.example"), ("X-Forwarded-Host", "localhost")],
        )
        .await;
        assert_eq!(
            status, 403,
            "X-Forwarded-Host admits nothing ({url}): {body}"
        );
    }
    let (status, body) = initialize(
        &bridge.mcp_url(),
        &[
            ("Host", "localhost"),
            ("X-Forwarded-Host", "evil.example"),
            ("X-Forwarded-Proto", "https"),
            ("X-Forwarded-For", "203.0.113.7"),
        ],
    )
    .await;
    assert_eq!(status, 200, "X-Forwarded-* refuse nothing either: {body}");

    // Origin: a page of the public origin may call /mcp through nginx; another may not.
    let (status, body) = initialize(
        &through_nginx,
        &[("Host", "localhost"), ("Origin", public.as_str())],
    )
    .await;
    assert_eq!(status, 200, "the bridge's own origin: {body}");
    let (status, body) = initialize(
        &through_nginx,
        &[("Host", "localhost"), ("Origin", "https://evil.example")],
    )
    .await;
    assert_eq!(status, 403, "a foreign origin: {body}");
    drop(nginx);

    // Without the shipped `proxy_set_header Host $host`, nginx sends the upstream's name and
    // the bridge refuses every MCP request: the line is needed.
    let no_host = variant(&shipped, "proxy_set_header Host $host;", "");
    let _nginx = Nginx::start(port, &authority(&bridge), &no_host).await;
    let (status, body) = initialize(&through_nginx, &[("Host", "localhost")]).await;
    assert_eq!(status, 403, "nginx's default Host is refused: {body}");
    bridge.shutdown(Duration::from_secs(1)).await;
}

// ---------------------------------------------------------------------------------------------
// Caddy, with the shipped deploy/caddy/Caddyfile.

const CADDY: &str = "/usr/bin/caddy";

/// Caddy as a child process with the shipped Caddyfile, configured through its environment
/// placeholders: site `http://localhost:PORT`, the bridge as the one upstream, no admin API.
struct Caddy {
    child: std::process::Child,
    dir: tempfile::TempDir,
}

impl Caddy {
    async fn start(port: u16, upstream: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = std::fs::File::create(dir.path().join("caddy.log")).expect("a log file");
        let child = std::process::Command::new(CADDY)
            .arg("run")
            .arg("--config")
            .arg(repo_root().join("deploy/caddy/Caddyfile"))
            .args(["--adapter", "caddyfile"])
            .env("BRIDGE_SITE", format!("http://localhost:{port}"))
            .env("BRIDGE_UPSTREAMS", upstream)
            .env("CADDY_ADMIN", "off")
            .env("HOME", dir.path())
            .env("XDG_DATA_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("caddy starts");
        let mut caddy = Self { child, dir };
        let addr = format!("127.0.0.1:{port}");
        let up = async {
            while tokio::net::TcpStream::connect(&addr).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let exited = caddy.child.try_wait().ok().flatten().is_some();
        if exited || tokio::time::timeout(WAIT, up).await.is_err() {
            panic!(
                "caddy did not start; its log:\n{}",
                std::fs::read_to_string(caddy.dir.path().join("caddy.log")).unwrap_or_default()
            );
        }
        caddy
    }
}

impl Drop for Caddy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_arrives_one_by_one_through_caddy_with_the_shipped_caddyfile() {
    if !Path::new(CADDY).exists() {
        skip_or_fail(
            "progress_through_caddy",
            "caddy is not installed (apt-get install caddy)",
        );
        return;
    }
    if !Nginx::present("progress_through_caddy") {
        return; // curl, the measuring reader, is missing
    }
    // Held for the test: nginx and Caddy listen on it with SO_REUSEPORT, nothing else can.
    let held = HeldPort::new();
    let port = held.port();
    let bridge = bridge_for_proxy_port(port).await;
    let _caddy = Caddy::start(port, &authority(&bridge)).await;
    // The MCP calls go through Caddy to a bridge that accepts only `Host: localhost`: Caddy
    // passes the client's Host on.
    let arrivals = measure_arrivals(&format!("http://localhost:{port}/mcp")).await;
    println!(
        "Caddyfile: span {} ms, gaps {:?} ms",
        arrivals.span_ms, arrivals.gaps_ms
    );
    live(&arrivals).unwrap_or_else(|e| panic!("through the shipped Caddyfile: {e}"));
    bridge.shutdown(Duration::from_secs(1)).await;
}

// Trusted proxies and keep-alive.

/// `GET /jobs/{made-up}` without a credential: counted per client address (404, or 429 past
/// `limits.job_requests_per_minute_per_address`).
async fn unknown_job_status(base: &str, forwarded: &str) -> u16 {
    let request = reqwest::Client::new()
        .get(format!("{base}/jobs/made-up-job"))
        .header("X-Forwarded-For", forwarded);
    within("GET /jobs", request.send())
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// From a peer in `server.trusted_proxies` the per-address rate counts the client it forwards
/// (the rightmost hop that is not a trusted proxy: a hop the client wrote itself is never
/// reached); from any other peer the header is ignored, so forging it buys no fresh allowance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_address_limits_count_the_client_a_trusted_proxy_forwards_and_nothing_forged() {
    let trusting = start_bridge(|c| {
        c.server.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
        c.limits.job_requests_per_minute_per_address = 2;
    })
    .await;
    let base = &trusting.base;
    assert_eq!(unknown_job_status(base, "203.0.113.1").await, 404);
    assert_eq!(unknown_job_status(base, "203.0.113.1").await, 404);
    assert_eq!(unknown_job_status(base, "203.0.113.1").await, 429);
    // Another client behind the same proxy has its own allowance.
    assert_eq!(unknown_job_status(base, "203.0.113.2").await, 404);
    // A client that writes a hop of its own before the proxy's is still itself.
    let forged = "198.51.100.9, 203.0.113.1";
    assert_eq!(unknown_job_status(base, forged).await, 429);
    // A trusted hop is skipped: the client behind two proxies.
    let two = "203.0.113.1, 127.0.0.9";
    assert_eq!(unknown_job_status(base, two).await, 429);
    trusting.shutdown(Duration::from_secs(1)).await;

    // No trusted proxy: the header is the client's own words, and ignored.
    let plain = start_bridge(|c| c.limits.job_requests_per_minute_per_address = 2).await;
    let base = &plain.base;
    assert_eq!(unknown_job_status(base, "203.0.113.1").await, 404);
    assert_eq!(unknown_job_status(base, "203.0.113.2").await, 404);
    assert_eq!(unknown_job_status(base, "203.0.113.3").await, 429);
    plain.shutdown(Duration::from_secs(1)).await;
}

/// A connection from a trusted proxy carries many clients: it is not held to
/// `limits.max_connections_per_address`; any other peer is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_is_not_held_to_the_per_address_connection_cap() {
    for (trusted, expected) in [(true, 200), (false, 503)] {
        let bridge = start_bridge(|c| {
            if trusted {
                c.server.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
            }
            c.limits.max_connections_per_address = 1;
        })
        .await;
        let addr: std::net::SocketAddr = bridge.base.trim_start_matches("http://").parse().unwrap();
        let held = tokio::net::TcpStream::connect(addr).await.unwrap();
        let status = raw_http_status(addr, "GET", "/healthz").await;
        assert_eq!(status, expected, "trusted: {trusted}");
        drop(held);
        bridge.shutdown(Duration::from_secs(1)).await;
    }
}

/// nginx keeps its connections to the bridge open 60 s (the shipped `keepalive_timeout`); the
/// bridge keeps an idle one `server.keep_alive_idle_secs` (75 s). A POST after an idle gap
/// longer than the old 10 s (when the head timeout was also the idle time) goes through on the
/// kept connection: no 502, and the bridge closed nothing for a late head. The shipped access
/// log format writes no query string (`?token=`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_after_an_idle_gap_through_nginx_sees_no_502_and_the_log_has_no_token() {
    if !Nginx::present("idle_gap_through_nginx") {
        return;
    }
    let held = HeldPort::new();
    let port = held.port();
    let bridge = bridge_for_proxy_port(port).await;
    let nginx = Nginx::start(port, &authority(&bridge), &shipped_config()).await;
    let through_nginx = format!("{}/mcp", nginx.base);
    let (status, body) = initialize(&through_nginx, &[("Host", "localhost")]).await;
    assert_eq!(status, 200, "{body}");
    // Deliberately idle (not a wait for an event): the gap is what is tested.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let (status, body) = initialize(&through_nginx, &[("Host", "localhost")]).await;
    assert_eq!(status, 200, "after an 11 s idle gap: {body}");
    let metrics = metrics_text(&bridge.base).await;
    assert!(
        !metrics.contains("bridge_connections_closed_total{reason=\"header_timeout\"}"),
        "no connection was closed for its head: {metrics}"
    );
    let secret = "canary-capability-token";
    let url = format!("{}/jobs/made-up-job?token={secret}", nginx.base);
    reqwest::get(&url).await.unwrap();
    let path = nginx.dir.path().join("access.log");
    let log = eventually("nginx logs the request", || async {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        log.contains("/jobs/made-up-job").then_some(log)
    })
    .await;
    assert!(
        !log.contains(secret),
        "no query string in the access log: {log}"
    );
    drop(nginx);
    bridge.shutdown(Duration::from_secs(1)).await;
}
