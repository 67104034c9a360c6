//! The whole MCP surface through the bridge, with peers nobody here wrote: what a client sees
//! connected to an upstream directly is compared, item by item, with what it sees through the
//! bridge (tools, resources and what reading each gives, resource templates, prompts and what
//! getting each gives, completions, capabilities), with names namespaced.
//!
//! Clients: the Python SDK 2.x (tests/interop/surface_client.py) at every revision it speaks
//! (2025-03-26, 2025-06-18, 2025-11-25 handshakes, and 2026-07-28), the Python SDK 1.x
//! (tests/interop/mcp1_client.py, 2025-03-26 and 2025-06-18; its schema check at 2025-11-25
//! too), and the TypeScript SDK client (tests/interop/ts_surface_client.mjs, 2025-11-25). Upstreams: npm's server-everything
//! over stdio and over Streamable HTTP, and a Python SDK server
//! (tests/fixtures/python_surface_server.py) over stdio and HTTP. Scenarios that need more
//! than a listing (notifications, log levels, output schemas, large answers) are in
//! tests/interop/surface_events.py. `.ci/run` installs every peer.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Config, GlobList, LogAttribution, UpstreamConfig};
use serde_json::{Value, json};

/// The revisions the Python SDK 2.x speaks, as surface_client.py's MODE argument.
const PYTHON_MODES: [&str; 4] = [
    "legacy:2025-03-26",
    "legacy:2025-06-18",
    "legacy",
    "2026-07-28",
];
const JOB_TOOLS: [&str; 4] = [
    "get_job_status",
    "wait_for_job",
    "cancel_job",
    "answer_job_input",
];
/// Capabilities a server may have that the bridge deliberately does not pass on: Tasks are the
/// bridge's own (jobs, and the Tasks extension it advertises itself), extensions are per
/// server.
const NOT_PASSED_ON: [&str; 3] = ["tasks", "experimental", "extensions"];
const LIMIT: Duration = Duration::from_secs(180);

/// The handshake revisions the Python SDK 1.x is run at (mcp1_client.py's REVISION).
const MCP1_REVISIONS: [&str; 2] = ["2025-03-26", "2025-06-18"];

struct Peers {
    python: PathBuf,
    /// A Python with the SDK 1.x.
    python1: PathBuf,
    everything: PathBuf,
}

fn peers() -> Option<Peers> {
    let python = python_with_mcp();
    let python1 = python_with_mcp1();
    let everything = server_everything();
    if !prerequisite(
        python.is_some() && python1.is_some() && everything.is_some() && node().is_some(),
        "a Python with the `mcp` 2.x package (BRIDGE_TEST_PYTHON or .venv), one with `mcp` 1.x \
         (BRIDGE_TEST_PYTHON_MCP1 or .venv-mcp1), node, and tests/interop/node_modules \
         (npm ci --prefix tests/interop)",
    ) {
        return None;
    }
    Some(Peers {
        python: python?,
        python1: python1?,
        everything: everything?,
    })
}

fn script(name: &str) -> String {
    repo_root()
        .join("tests/interop")
        .join(name)
        .display()
        .to_string()
}

fn fixture_server() -> String {
    repo_root()
        .join("tests/fixtures/python_surface_server.py")
        .display()
        .to_string()
}

/// A surface_client.py / ts_surface_client.mjs TARGET for a stdio server.
fn stdio_target(command: &str, args: &[&str]) -> String {
    let mut all = vec![command.to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    format!("stdio:{}", serde_json::to_string(&all).unwrap())
}

async fn python_surface(peers: &Peers, target: &str, mode: &str) -> Value {
    let mut command = tokio::process::Command::new(&peers.python);
    command
        .arg(script("surface_client.py"))
        .arg(target)
        .arg(mode);
    surface_of(command).await
}

async fn mcp1_surface(peers: &Peers, target: &str, revision: &str) -> Value {
    let mut command = tokio::process::Command::new(&peers.python1);
    command
        .arg(script("mcp1_client.py"))
        .arg("surface")
        .arg(target)
        .arg(revision);
    surface_of(command).await
}

async fn ts_surface(target: &str) -> Value {
    let mut command = tokio::process::Command::new("node");
    command
        .arg(script("ts_surface_client.mjs"))
        .arg("surface")
        .arg(target);
    surface_of(command).await
}

async fn surface_of(command: tokio::process::Command) -> Value {
    let output = run_to_end(command, LIMIT).await;
    assert!(output.status.success(), "the surface client failed");
    serde_json::from_slice(&output.stdout).expect("the surface client prints JSON")
}

/// Run a scenario script (Python or node) to its end and require "all checks passed".
async fn scenario(program: &Path, args: &[&str]) {
    let mut command = tokio::process::Command::new(program);
    command.args(args);
    let output = run_to_end(command, LIMIT).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "scenario {args:?} failed:\n{stdout}"
    );
}

/// What the operator hid from one upstream (its own names), and what the upstream offers the
/// bridge that it does not offer every direct client.
#[derive(Default)]
struct Hidden {
    tools: &'static [&'static str],
    /// Tools the upstream lists only to clients that declare elicitation, sampling or roots.
    /// The bridge declares them to every upstream (a person answers a question on the job's
    /// page; sampling and roots go to a waiting caller that has them, else an error / none), so
    /// through the bridge they are listed whatever the caller's revision and capabilities.
    for_capable_clients: &'static [&'static str],
    resources: &'static [&'static str],
    prompts: &'static [&'static str],
}

/// `_meta["io.modelcontextprotocol/serverInfo"]` (2026-07-28) names the server that answered:
/// through the bridge that is the bridge, so it is left out of both sides of a comparison.
fn without_server_info(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(meta)) = map.get_mut("_meta") {
                meta.remove("io.modelcontextprotocol/serverInfo");
                if meta.is_empty() {
                    map.remove("_meta");
                }
            }
            map.values_mut().for_each(without_server_info);
        }
        Value::Array(items) => items.iter_mut().for_each(without_server_info),
        _ => {}
    }
}

/// What a client connected directly to upstream `name` should see through the bridge: names
/// namespaced (`<name>__`), hidden items gone, and the capabilities the bridge passes on.
fn through_bridge(direct: &Value, name: &str, hidden: &Hidden) -> Value {
    let prefixed = |n: &str| format!("{name}__{n}");
    let mut want = direct.clone();
    without_server_info(&mut want);
    let direct = &want.clone();
    let caps: Vec<Value> = direct["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !NOT_PASSED_ON.contains(&c.as_str().unwrap()))
        .cloned()
        .collect();
    want["capabilities"] = json!(caps);
    let tools: BTreeSet<String> = direct["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .chain(hidden.for_capable_clients.iter().copied())
        .filter(|t| !hidden.tools.contains(t))
        .map(prefixed)
        .collect();
    want["tools"] = json!(tools);
    if let Some(resources) = direct["resources"].as_array() {
        let kept: Vec<Value> = resources
            .iter()
            .filter(|r| !hidden.resources.contains(&r["uri"].as_str().unwrap()))
            .cloned()
            .collect();
        want["resources"] = json!(kept);
        for uri in hidden.resources {
            want["reads"].as_object_mut().unwrap().remove(*uri);
        }
    }
    if let Some(prompts) = direct["prompts"].as_array() {
        let kept: Vec<Value> = prompts
            .iter()
            .filter(|p| !hidden.prompts.contains(&p["name"].as_str().unwrap()))
            .map(|p| {
                let mut p = p.clone();
                p["name"] = json!(prefixed(p["name"].as_str().unwrap()));
                p
            })
            .collect();
        want["prompts"] = json!(kept);
        let gets = direct["prompt_gets"].as_object().unwrap();
        want["prompt_gets"] = gets
            .iter()
            .filter(|(k, _)| !hidden.prompts.contains(&k.as_str()))
            .map(|(k, v)| (prefixed(k), v.clone()))
            .collect();
    }
    if let Some(completions) = direct["completions"].as_object() {
        want["completions"] = completions
            .iter()
            .filter_map(|(k, v)| match k.strip_prefix("prompt ") {
                Some(rest) => {
                    let prompt = rest.split(' ').next().unwrap();
                    (!hidden.prompts.contains(&prompt))
                        .then(|| (format!("prompt {name}__{rest}"), v.clone()))
                }
                None => Some((k.clone(), v.clone())),
            })
            .collect();
    }
    want
}

/// The bridge's surface in the terms of [`through_bridge`]: its job tools set aside (they are
/// the bridge's own), tools as a set of names (output schemas depend on the call mode).
fn seen_through_bridge(bridge: &Value) -> Value {
    let mut seen = bridge.clone();
    without_server_info(&mut seen);
    let tools = bridge["tools"].as_array().unwrap();
    for job_tool in JOB_TOOLS {
        assert!(
            tools.iter().any(|t| t["name"] == job_tool),
            "the bridge lists its job tool {job_tool}"
        );
    }
    let names: BTreeSet<String> = tools
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .filter(|n| !JOB_TOOLS.contains(&n.as_str()))
        .collect();
    seen["tools"] = json!(names);
    // The bridge's own: the Tasks extension (every tool can run as a task) sits under
    // `extensions`, whatever its upstreams declare.
    if let Some(caps) = bridge["capabilities"].as_array() {
        let passed_on: Vec<&Value> = caps
            .iter()
            .filter(|c| !NOT_PASSED_ON.contains(&c.as_str().unwrap()))
            .collect();
        seen["capabilities"] = json!(passed_on);
    }
    seen
}

/// Compare item by item, so a failure names the section and the item that differ.
fn assert_same_surface(label: &str, want: &Value, seen: &Value) {
    for section in [
        "capabilities",
        "resources_subscribe",
        "tools",
        "resources",
        "reads",
        "templates",
        "prompts",
        "prompt_gets",
        "completions",
    ] {
        match (&want[section], &seen[section]) {
            (Value::Object(w), Value::Object(s)) => {
                let wk: BTreeSet<&String> = w.keys().collect();
                let sk: BTreeSet<&String> = s.keys().collect();
                assert_eq!(wk, sk, "{label}: the keys of {section} differ");
                for (k, v) in w {
                    assert_eq!(v, &s[k], "{label}: {section} {k} differs");
                }
            }
            (Value::Array(w), Value::Array(s)) => {
                assert_eq!(w.len(), s.len(), "{label}: {section} counts differ");
                for (a, b) in w.iter().zip(s) {
                    assert_eq!(a, b, "{label}: an item of {section} differs");
                }
            }
            (w, s) => assert_eq!(w, s, "{label}: {section} differs"),
        }
    }
}

/// Compare every client and revision: direct to `direct_target`, and through `bridge`.
async fn compare_every_client(
    peers: &Peers,
    bridge: &TestBridge,
    direct_target: &str,
    name: &str,
    hidden: &Hidden,
) {
    // The bridge connects to its upstreams on the newest handshake revision: what an upstream
    // offers only on 2026-07-28 (resource subscriptions through subscriptions/listen, as the
    // Python SDK's servers do) it does not pass on. Known gap, documented in docs/surface.md.
    let handshake = python_surface(peers, direct_target, "legacy").await;
    for mode in PYTHON_MODES {
        let direct = python_surface(peers, direct_target, mode).await;
        let seen = python_surface(peers, &bridge.mcp_url(), mode).await;
        let mut want = through_bridge(&direct, name, hidden);
        if mode == "2026-07-28" {
            assert_eq!(
                seen["protocol"], "2026-07-28",
                "the bridge speaks 2026-07-28"
            );
            want["resources_subscribe"] = handshake["resources_subscribe"].clone();
        } else {
            assert_eq!(
                seen["protocol"], direct["protocol"],
                "{mode}: the same revision"
            );
        }
        assert_same_surface(
            &format!("Python SDK {mode} ({})", seen["protocol"]),
            &want,
            &seen_through_bridge(&seen),
        );
    }
    for revision in MCP1_REVISIONS {
        let direct = mcp1_surface(peers, direct_target, revision).await;
        let seen = mcp1_surface(peers, &bridge.mcp_url(), revision).await;
        assert_eq!(
            seen["protocol"], revision,
            "the SDK 1.x negotiated {revision}"
        );
        assert_same_surface(
            &format!("Python SDK 1.x {revision}"),
            &through_bridge(&direct, name, hidden),
            &seen_through_bridge(&seen),
        );
    }
    let direct = ts_surface(direct_target).await;
    let seen = ts_surface(&bridge.mcp_url()).await;
    assert_same_surface(
        "TypeScript SDK",
        &through_bridge(&direct, name, hidden),
        &seen_through_bridge(&seen),
    );
}

fn everything_stdio(peers: &Peers, name: &str) -> UpstreamConfig {
    let entry = peers.everything.display().to_string();
    UpstreamConfig::stdio(name, "node", &[&entry, "stdio"])
}

/// server-everything over Streamable HTTP on a port of its own; killed when dropped.
async fn everything_http(peers: &Peers) -> (tokio::process::Child, String) {
    let mut command = tokio::process::Command::new("node");
    command
        .arg(&peers.everything)
        .arg("streamableHttp")
        .env("PORT", "0");
    http_child(command, "server-everything").await
}

/// The Python SDK fixture server over Streamable HTTP on a port of its own; killed when dropped.
async fn fixture_http(peers: &Peers) -> (tokio::process::Child, String) {
    let mut command = tokio::process::Command::new(&peers.python);
    command.arg(fixture_server()).arg("--http").arg("0");
    http_child(command, "the Python fixture server").await
}

fn only(upstreams: Vec<UpstreamConfig>) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| c.upstreams = upstreams
}

/// server-everything registers `trigger-elicitation-request` only for a client that declares
/// elicitation, `trigger-sampling-request` for sampling, `get-roots-list` for roots (its
/// tools/*.js).
const EVERYTHING: Hidden = Hidden {
    tools: &[],
    for_capable_clients: &[
        "trigger-elicitation-request",
        "trigger-sampling-request",
        "get-roots-list",
    ],
    resources: &[],
    prompts: &[],
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio_looks_the_same_through_the_bridge() {
    let Some(peers) = peers() else { return };
    let bridge = start_bridge(only(vec![everything_stdio(&peers, "everything")])).await;
    let entry = peers.everything.display().to_string();
    let direct = stdio_target("node", &[&entry, "stdio"]);
    compare_every_client(&peers, &bridge, &direct, "everything", &EVERYTHING).await;
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_http_looks_the_same_through_the_bridge() {
    let Some(peers) = peers() else { return };
    let (_server, url) = everything_http(&peers).await;
    let bridge = start_bridge(only(vec![http_upstream("everything", &url)])).await;
    compare_every_client(&peers, &bridge, &url, "everything", &EVERYTHING).await;
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// What tests hide of the fixture with `expose`.
const FIXTURE_HIDDEN: Hidden = Hidden {
    tools: &["delete_everything"],
    for_capable_clients: &[],
    resources: &["fixture://secret"],
    prompts: &["secret_prompt"],
};

fn fixture_exposed(mut upstream: UpstreamConfig) -> UpstreamConfig {
    upstream.expose.tools = GlobList::parse(["*", "!delete_*"]).unwrap();
    upstream.expose.resources = GlobList::parse(["!fixture://secret"]).unwrap();
    upstream.expose.prompts = GlobList::parse(["*", "!secret_*"]).unwrap();
    upstream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_looks_the_same_through_the_bridge_less_what_is_hidden() {
    let Some(peers) = peers() else { return };
    let python = peers.python.display().to_string();
    let fixture = fixture_server();
    let stdio = UpstreamConfig::stdio("fixture", &python, &[&fixture]);
    let bridge = start_bridge(only(vec![fixture_exposed(stdio)])).await;
    let direct = stdio_target(&python, &[&fixture]);
    compare_every_client(&peers, &bridge, &direct, "fixture", &FIXTURE_HIDDEN).await;
    bridge.shutdown(Duration::from_secs(2)).await;

    let (_server, url) = fixture_http(&peers).await;
    let bridge = start_bridge(only(vec![fixture_exposed(http_upstream("fixture", &url))])).await;
    compare_every_client(&peers, &bridge, &url, "fixture", &FIXTURE_HIDDEN).await;
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_tool_prompt_or_resource_is_refused_like_an_unknown_one() {
    let Some(peers) = peers() else { return };
    let python = peers.python.display().to_string();
    let stdio = UpstreamConfig::stdio("fixture", &python, &[&fixture_server()]);
    let bridge = start_bridge(only(vec![fixture_exposed(stdio)])).await;
    let client = connect(&bridge).await;

    let hidden = client
        .call_tool(call_params("fixture__delete_everything", json!({})))
        .await
        .unwrap_err()
        .to_string();
    let unknown = client
        .call_tool(call_params("fixture__no_such_tool", json!({})))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        hidden.replace("delete_everything", "X"),
        unknown.replace("no_such_tool", "X"),
        "a hidden tool is refused exactly like an unknown one"
    );

    let get =
        |name: &str| client.get_prompt(rmcp::model::GetPromptRequestParams::new(name.to_string()));
    let hidden = get("fixture__secret_prompt").await.unwrap_err().to_string();
    let unknown = get("fixture__no_such_prompt")
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        hidden.replace("secret_prompt", "X"),
        unknown.replace("no_such_prompt", "X")
    );

    let read = |uri: &str| client.read_resource(rmcp::model::ReadResourceRequestParams::new(uri));
    let hidden = read("fixture://secret").await.unwrap_err().to_string();
    assert!(hidden.contains("no upstream offers resource"), "{hidden}");
    let spelled = read("mcp-progress-bridge://fixture/fixture://secret")
        .await
        .unwrap_err()
        .to_string();
    assert!(spelled.contains("no upstream offers resource"), "{spelled}");
    let shown = read("fixture://greeting")
        .await
        .expect("a shown resource reads");
    assert_eq!(shown.contents.len(), 1);
    client.cancel().await.ok();
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uris_two_upstreams_share_are_rewritten_reversibly() {
    let Some(peers) = peers() else { return };
    let bridge = start_bridge(only(vec![
        everything_stdio(&peers, "one"),
        everything_stdio(&peers, "two"),
    ]))
    .await;
    let entry = peers.everything.display().to_string();
    let direct = python_surface(&peers, &stdio_target("node", &[&entry, "stdio"]), "legacy").await;
    let seen = python_surface(&peers, &bridge.mcp_url(), "legacy").await;
    let direct_resources = direct["resources"].as_array().unwrap();
    let seen_resources = seen["resources"].as_array().unwrap();
    assert_eq!(seen_resources.len(), 2 * direct_resources.len());
    for upstream in ["one", "two"] {
        for resource in direct_resources {
            let uri = resource["uri"].as_str().unwrap();
            let rewritten = format!("mcp-progress-bridge://{upstream}/{uri}");
            let mut want = resource.clone();
            want["uri"] = json!(rewritten);
            assert!(seen_resources.contains(&want), "{rewritten} is listed");
            // Reading the rewritten URI gives the upstream's contents, under the rewritten URI.
            let mut read = direct["reads"][uri].clone();
            for content in read.as_array_mut().unwrap() {
                content["uri"] = json!(rewritten);
            }
            assert_eq!(
                seen["reads"][&rewritten], read,
                "{rewritten} reads the same"
            );
        }
        for template in direct["templates"].as_array().unwrap() {
            let t = template["uriTemplate"].as_str().unwrap();
            let rewritten = format!("mcp-progress-bridge://{upstream}/{t}");
            let key = |var: &str| format!("template {rewritten} {var}");
            assert!(
                seen["templates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| s["uriTemplate"] == rewritten),
                "{rewritten} is listed"
            );
            // Completions of a rewritten template reach its owner.
            assert_eq!(
                seen["completions"][key("resourceId")],
                direct["completions"][format!("template {t} resourceId")]
            );
        }
    }
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// Every scenario of surface_events.py that server-everything and the demo tools can drive, on
/// every revision, each on a bridge of its own (server-everything's update switch is a toggle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_reach_clients_on_every_revision() {
    let Some(peers) = peers() else { return };
    let events = script("surface_events.py");
    let uri = "demo://resource/static/document/architecture.md";
    for mode in PYTHON_MODES {
        let bridge = start_bridge(|c| {
            c.upstreams.push(everything_stdio(&peers, "everything"));
        })
        .await;
        let url = bridge.mcp_url();
        scenario(
            &peers.python,
            &[
                &events,
                "updated",
                &url,
                mode,
                uri,
                "everything__toggle-subscriber-updates",
            ],
        )
        .await;
        scenario(
            &peers.python,
            &[&events, "listchanged", &url, mode, "demo__crash"],
        )
        .await;
        bridge.shutdown(Duration::from_secs(2)).await;
    }
    let bridge = start_bridge(only(vec![everything_stdio(&peers, "everything")])).await;
    let url = bridge.mcp_url();
    scenario(
        Path::new("node"),
        &[
            &script("ts_surface_client.mjs"),
            "updated",
            &url,
            uri,
            "everything__toggle-subscriber-updates",
        ],
    )
    .await;
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// A tool configured sync keeps its output schema; a per-call mode that would answer with a job
/// handle is refused with what to do, by every SDK's lights; log levels are per caller; a 5 MiB
/// result is read whole at 2026-07-28, where the answer is plain JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_schemas_log_levels_and_large_answers_with_the_sdks() {
    let Some(peers) = peers() else { return };
    let python = peers.python.display().to_string();
    let mut fixture = UpstreamConfig::stdio("fixture", &python, &[&fixture_server()]);
    fixture = with_tool_mode(fixture, "add", CallMode::Sync);
    fixture = with_tool_mode(fixture, "chatty", CallMode::Sync);
    // The fixture logs only during its calls, one caller at a time: its lines may be shown.
    fixture.logs = LogAttribution::AttributeWhenSingle;
    let bridge = start_bridge(only(vec![fixture])).await;
    let url = bridge.mcp_url();
    let events = script("surface_events.py");
    for mode in PYTHON_MODES {
        scenario(
            &peers.python,
            &[
                &events,
                "schema",
                &url,
                mode,
                "fixture__add",
                r#"{"a":1,"b":2}"#,
            ],
        )
        .await;
        scenario(
            &peers.python,
            &[&events, "logging", &url, mode, "fixture__chatty"],
        )
        .await;
    }
    scenario(
        &peers.python,
        &[&events, "big", &url, "2026-07-28", "fixture__big_text", "5"],
    )
    .await;
    let mcp1 = script("mcp1_client.py");
    for revision in ["2025-03-26", "2025-06-18", "2025-11-25"] {
        scenario(
            &peers.python1,
            &[
                &mcp1,
                "schema",
                &url,
                revision,
                "fixture__add",
                r#"{"a":1,"b":2}"#,
            ],
        )
        .await;
    }
    scenario(
        Path::new("node"),
        &[
            &script("ts_surface_client.mjs"),
            "schema",
            &url,
            "fixture__add",
            r#"{"a":1,"b":2}"#,
        ],
    )
    .await;
    bridge.shutdown(Duration::from_secs(2)).await;

    // With an upstream that offers logging (server-everything), the bridge offers
    // logging/setLevel, and a session's level filters what it gets of any upstream's calls.
    let mut fixture = UpstreamConfig::stdio("fixture", &python, &[&fixture_server()]);
    fixture = with_tool_mode(fixture, "chatty", CallMode::Sync);
    // The fixture logs only during its calls, one caller at a time: its lines may be shown.
    fixture.logs = LogAttribution::AttributeWhenSingle;
    let bridge = start_bridge(only(vec![fixture, everything_stdio(&peers, "everything")])).await;
    let url = bridge.mcp_url();
    for mode in PYTHON_MODES {
        scenario(
            &peers.python,
            &[&events, "logging", &url, mode, "fixture__chatty"],
        )
        .await;
    }
    bridge.shutdown(Duration::from_secs(2)).await;
}
