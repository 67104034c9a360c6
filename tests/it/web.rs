//! What a person and a frontend see: the jobs page and `/client.js` as served, the JavaScript
//! client's tests (Node's test runner, against a real bridge too), and the page end to end in
//! headless Chromium. The Node and browser parts need `node`, `tests/browser/node_modules`
//! (`npm ci`) and `/usr/bin/chromium`; without them these tests print why and skip, unless
//! `BRIDGE_TEST_STRICT=1` (CI), where they fail.

use std::{path::Path, time::Duration};

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Secret};
use serde_json::json;
use tokio::process::Command;

const CHROMIUM: &str = "/usr/bin/chromium";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_the_client_module_are_served_from_the_binary() {
    let bridge = start_bridge(|_| {}).await;
    let client = reqwest::Client::new();
    for (path, content_type, contains) in [
        (
            "/",
            "text/html",
            "<title>Jobs — mcp-progress-bridge</title>",
        ),
        ("/jobs-page.js", "text/javascript", "from \"/client.js\""),
        ("/jobs-page.css", "text/css", ".job-bar"),
        ("/client.js", "text/javascript", "export function watchJob("),
    ] {
        let response = client
            .get(format!("{}{path}", bridge.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers().clone();
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with(content_type),
            "{path}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert!(headers.contains_key("content-security-policy"), "{path}");
        let body = response.text().await.unwrap();
        assert!(body.contains(contains), "{path} has {contains:?}");
        if path == "/client.js" {
            assert_eq!(headers["access-control-allow-origin"], "*");
            // The file served is the one in the repository, byte for byte.
            let file =
                std::fs::read_to_string(repo_root().join("packages/client/dist/index.js")).unwrap();
            assert_eq!(body, file);
        }
    }
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The client package is released with the bridge: its version (package.json, and `VERSION` in
/// the module the bridge serves) is the crate's.
#[test]
fn the_client_package_has_the_bridges_version() {
    let version = env!("CARGO_PKG_VERSION");
    let manifest =
        std::fs::read_to_string(repo_root().join("packages/client/package.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(manifest["version"], version, "packages/client/package.json");
    for file in [
        "packages/client/src/index.ts",
        "packages/client/dist/index.js",
    ] {
        let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
        let line = format!("export const VERSION = \"{version}\";");
        assert!(text.contains(&line), "{file} says {line}");
    }
}

/// What the frontend-kit browser tests need besides [`missing`]: axe-core, and the React
/// example installed and built (`.ci/run` does both).
fn missing_kit() -> Option<String> {
    let root = repo_root();
    for (path, fix) in [
        (
            "tests/browser/node_modules/axe-core",
            "run `npm ci` in tests/browser",
        ),
        (
            "examples/react/node_modules/@mcp-progress-bridge/client",
            "run `npm ci` in examples/react",
        ),
        (
            "examples/react/dist-dev/index.html",
            "run `npm run build:dev` in examples/react",
        ),
    ] {
        if !root.join(path).exists() {
            return Some(format!("{path} is missing ({fix})"));
        }
    }
    missing(true)
}

/// `node` and, for the browser test, playwright-core and Chromium: `None` when all are there,
/// else the reason to skip.
fn missing(browser: bool) -> Option<String> {
    if node().is_none() {
        return Some("node is not installed".into());
    }
    if browser {
        let modules = repo_root().join("tests/browser/node_modules/playwright-core");
        if !modules.exists() {
            return Some(format!(
                "{} is missing (run `npm ci` in tests/browser)",
                modules.display()
            ));
        }
        if !Path::new(CHROMIUM).exists() {
            return Some(format!(
                "{CHROMIUM} is missing (apt-get install chromium chromium-driver)"
            ));
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_client_tests_pass_with_nodes_test_runner_against_a_real_bridge() {
    if let Some(why) = missing(false) {
        return skip_or_fail("javascript client tests", &why);
    }
    let bridge = start_bridge(|_| {}).await;
    let mut command = Command::new("node");
    command
        .current_dir(repo_root())
        .args(["--test", "tests/js/"])
        .env("BRIDGE_URL", &bridge.base);
    let output = run_to_end(command, Duration::from_secs(120)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "node --test failed:\n{stdout}");
    assert!(stdout.contains("# fail 0"), "{stdout}");
    assert!(
        stdout.contains("# skipped 0"),
        "the real-bridge tests ran: {stdout}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_page_in_headless_chromium() {
    if let Some(why) = missing(true) {
        return skip_or_fail("browser test", &why);
    }
    let (bridge, proxy) = start_bridge_behind_proxy(|_| {}).await;
    let shots = target_dir().join("browser");
    let mut command = Command::new("node");
    command
        .current_dir(repo_root().join("tests/browser"))
        .arg("e2e.mjs")
        .env("BRIDGE_URL", &proxy.base)
        .env("CONTROL_URL", &proxy.control_url)
        .env("SCREENSHOT_DIR", &shots)
        .env("CHROMIUM", CHROMIUM)
        .env("JOB_SECRET", TEST_JOB_SECRET);
    let output = run_to_end(command, Duration::from_secs(240)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "browser test failed:\n{stdout}");
    assert!(stdout.contains(", 0 failed"), "{stdout}");
    assert!(proxy.drops() >= 1, "the page's connection was cut once");
    assert!(shots.join("jobs-page-completed.png").exists());
    println!("screenshots: {}", shots.display());
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A reader that comes back at a position history no longer holds, after the job ended: the
/// bridge sends `reset` and then the terminal event with a later id, and the page's client
/// (`watchJob` from `/client.js`, in Chromium) ends the watch instead of reconnecting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_past_the_end_of_a_job_ends_the_watch_in_chromium() {
    if let Some(why) = missing(true) {
        return skip_or_fail("browser test", &why);
    }
    let bridge = start_bridge(|c| c.jobs.history = 3).await;
    let mut command = Command::new("node");
    command
        .current_dir(repo_root().join("tests/browser"))
        .arg("reset.mjs")
        .env("BRIDGE_URL", &bridge.base)
        .env("CHROMIUM", CHROMIUM);
    let output = run_to_end(command, Duration::from_secs(120)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "browser test failed:\n{stdout}");
    assert!(!stdout.contains("not ok"), "{stdout}");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The frontend kit end to end (tests/browser/kit.mjs): the React example, its
/// backend-for-frontend holding the MCP token, on another origin than the bridge, which admits
/// it through `server.cors_origins`: live progress of several jobs, a question answered through
/// `<JobProgress>`'s form, a cancel; StrictMode opens one stream per job; axe-core finds no
/// violation; the page never holds a credential.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_react_example_on_another_origin_in_headless_chromium() {
    if let Some(why) = missing_kit() {
        return skip_or_fail("frontend kit browser test", &why);
    }
    const TOKEN: &str = "react-example-mcp-token-0123456789";
    let app_port = free_port();
    let bridge = start_bridge(|c| {
        c.server.cors_origins = vec![format!("http://127.0.0.1:{app_port}")];
        c.auth.mcp_tokens = vec![Secret::literal(TOKEN).into()];
    })
    .await;
    let mut command = Command::new("node");
    command
        .current_dir(repo_root().join("tests/browser"))
        .arg("kit.mjs")
        .env("BRIDGE_URL", &bridge.base)
        .env("APP_PORT", app_port.to_string())
        .env("BRIDGE_TOKEN", TOKEN)
        .env("JOB_SECRET", TEST_JOB_SECRET)
        .env("SCREENSHOT_DIR", target_dir().join("browser"))
        .env("CHROMIUM", CHROMIUM);
    std::fs::create_dir_all(target_dir().join("browser")).unwrap();
    let output = run_to_end(command, Duration::from_secs(240)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "browser test failed:\n{stdout}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The client through a rollout (tests/browser/rollout.mjs, which starts and stops the bridges
/// itself): a memory-store bridge restarted mid-job (the reader reports the job lost), the
/// reader's replica of two on Redis restarted (it goes on on the other, no gap, no duplicate),
/// a 503 from the subscriber limit followed by room (the reader waits, then gets in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_rides_through_a_rollout_in_headless_chromium() {
    if let Some(why) = missing(true) {
        return skip_or_fail("rollout browser test", &why);
    }
    let Some(redis) = test_redis("rollout browser test").await else {
        return;
    };
    let prefix = RedisPrefix::new(&redis, "rollout");
    let mut command = Command::new("node");
    command
        .current_dir(repo_root().join("tests/browser"))
        .arg("rollout.mjs")
        .env("BRIDGE_BIN", BIN)
        .env("JOB_SECRET", TEST_JOB_SECRET)
        .env("REDIS_URL", &redis)
        .env("REDIS_PREFIX", prefix.to_string())
        .env("CHROMIUM", CHROMIUM);
    let output = run_to_end(command, Duration::from_secs(300)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "browser test failed:\n{stdout}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

/// A page on another origin can read a refusal's `Retry-After` (CORS exposes it), so the client
/// waits there as long as the bridge asks: here the 503 of a subscriber limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_to_another_origin_exposes_retry_after() {
    const APP: &str = "http://app.example";
    let bridge = start_bridge(|c| {
        c.server.cors_origins = vec![APP.into()];
        c.limits.max_subscribers_per_channel = 1;
        c.upstreams = vec![with_tool_mode(
            demo_stdio_upstream("demo"),
            "slow_count",
            CallMode::Async,
        )];
    })
    .await;
    let client = connect(&bridge).await;
    let job = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 100, "delay_ms": 100}),
    )
    .await;
    let http = reqwest::Client::new();
    let first = http.get(&job.events_url).send().await.unwrap();
    assert_eq!(first.status(), 200, "the first reader takes the only place");
    let refused = http
        .get(&job.events_url)
        .header("origin", APP)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    let headers = refused.headers();
    assert_eq!(headers["access-control-allow-origin"], APP);
    assert!(headers.contains_key("retry-after"));
    let exposed = headers
        .get("access-control-expose-headers")
        .map(|v| v.to_str().unwrap().to_ascii_lowercase())
        .unwrap_or_default();
    assert!(
        exposed.contains("retry-after"),
        "Access-Control-Expose-Headers: {exposed:?}"
    );
    drop(first);
    bridge.shutdown(Duration::from_secs(1)).await;
}
