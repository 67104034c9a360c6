//! deploy/ run for real by `podman kube play`: Redis (noeviction, its password from the
//! Secret), two bridge replicas of the image under test (`BRIDGE_TEST_IMAGE`) and nginx with
//! deploy/nginx's files in front. An agent calls a tool through nginx with its bearer token and
//! reads the job's stream through nginx while one replica is rolled (a new pod ready, the old
//! one out of nginx's upstream, then SIGTERM and its drain): nothing is lost. What kube play
//! cannot run as written is changed in `common/kube.rs`, each change said there.
//!
//! Skipped (failed under `BRIDGE_TEST_STRICT=1`) without `BRIDGE_TEST_IMAGE`, podman, kubectl or
//! the base image `.ci/image` makes.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};

/// The images of Redis and nginx, made from `localhost/debian:bookworm-slim` (no registry).
const REDIS_IMAGE: &str = "localhost/redis:kube-test";
const NGINX_IMAGE: &str = "localhost/nginx:kube-test";
const TOKEN: &str = "kube-play-agent-token-0123456789abcdef";
/// The demo tools in place of deploy/bridge.toml's placeholder upstream (the whole entry).
const UPSTREAM: &str = "{ name = \"demo\", transport = \"stdio\", command = \"mcp-progress-bridge\", \
                        args = [\"demo-tools\"], tools = { slow_count = { mode = \"async\" } } }";
const STEPS: u64 = 40;
const DELAY_MS: u64 = 400;

/// What is missing to run, if anything.
fn missing() -> Option<String> {
    let image = std::env::var("BRIDGE_TEST_IMAGE").unwrap_or_default();
    if image.is_empty() {
        return Some("BRIDGE_TEST_IMAGE is not set: build the image with .ci/image".into());
    }
    let runs = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !runs(
        "podman",
        &["image", "exists", "localhost/debian:bookworm-slim"],
    ) {
        return Some("podman or its localhost/debian:bookworm-slim (.ci/image makes both)".into());
    }
    if !runs("kubectl", &["version", "--client"]) {
        return Some("kubectl is not installed (apt-get install kubernetes-client)".into());
    }
    None
}

/// Build the Redis and nginx images from tests/kube/ (podman's layer cache makes a second
/// build take a second).
async fn helper_images() {
    for (image, file) in [
        (REDIS_IMAGE, "redis.Containerfile"),
        (NGINX_IMAGE, "nginx.Containerfile"),
    ] {
        let dir = repo_root().join("tests/kube");
        let file = dir.join(file).display().to_string();
        let dir = dir.display().to_string();
        podman_ok(&[
            "build",
            "--isolation",
            "chroot",
            "--pull=never",
            "--format",
            "docker",
            "-t",
            image,
            "-f",
            &file,
            &dir,
        ])
        .await;
    }
}

/// An overlay of deploy/ as an operator would write one: the images, the Secret, the public
/// URL (nginx's address) and an upstream with tools to call.
fn overlay(dir: &std::path::Path, port: u16, redis_password: &str) {
    let image = std::env::var("BRIDGE_TEST_IMAGE").unwrap();
    let (name, tag) = image.rsplit_once(':').expect("BRIDGE_TEST_IMAGE has a tag");
    let (redis_name, redis_tag) = REDIS_IMAGE.rsplit_once(':').unwrap();
    let kustomization = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [relative(dir, &repo_root().join("deploy"))],
        "images": [
            { "name": "mcp-progress-bridge", "newName": name, "newTag": tag },
            { "name": "redis", "newName": redis_name, "newTag": redis_tag },
        ],
        "secretGenerator": [{
            "name": "mcp-progress-bridge",
            "options": { "disableNameSuffixHash": true },
            "literals": [
                format!("agent-token={TOKEN}"),
                format!("job-secret=kube-play-job-secret-{:016x}-0123456789", fastrand::u64(..)),
                format!("redis-password={redis_password}"),
                format!("redis-url=redis://:{redis_password}@redis:6379"),
            ],
        }],
        "patches": [{ "patch": json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": { "name": "mcp-progress-bridge" },
            "spec": { "template": { "spec": { "containers": [{
                "name": "bridge",
                "env": [
                    { "name": "BRIDGE_PUBLIC_URL", "value": format!("http://localhost:{port}") },
                    { "name": "BRIDGE__UPSTREAMS__0", "value": UPSTREAM },
                ],
            }]}}},
        }).to_string() }],
    });
    // JSON is YAML: kustomize reads it as it is.
    std::fs::write(dir.join("kustomization.yaml"), kustomization.to_string()).expect("write");
}

/// `to` as a path relative to `from` (kustomize takes no absolute path for a resource).
fn relative(from: &std::path::Path, to: &std::path::Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path = std::path::PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    to[common..].iter().for_each(|c| path.push(c));
    path.display().to_string()
}

/// deploy/nginx/nginx.conf with its upstream's servers replaced by `endpoints` (the Service's
/// ready pods, as an ingress controller routes to endpoints), each as the shipped ones are.
fn nginx_conf(endpoints: &[String]) -> String {
    let shipped = std::fs::read_to_string(repo_root().join("deploy/nginx/nginx.conf"))
        .expect("deploy/nginx/nginx.conf");
    let mut out = Vec::new();
    let mut replaced = false;
    for line in shipped.lines() {
        let Some(options) = line.trim().strip_prefix("server bridge-") else {
            out.push(line.to_string());
            continue;
        };
        let options = options.split_once(' ').map(|(_, rest)| rest).unwrap_or(";");
        if !replaced {
            out.extend(
                endpoints
                    .iter()
                    .map(|e| format!("        server {e}:8080 {options}")),
            );
            replaced = true;
        }
    }
    assert!(
        replaced,
        "deploy/nginx/nginx.conf lists no `server bridge-…` any more"
    );
    out.join("\n")
}

/// The proxy's pod: nginx with deploy/nginx's files, published on 127.0.0.1:`port`.
fn proxy_pod(conf: &std::path::Path, port: u16) -> Value {
    let location = repo_root().join("deploy/nginx/mcp-progress-bridge.conf");
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": "proxy" },
        "spec": {
            "containers": [{
                "name": "nginx",
                "image": NGINX_IMAGE,
                "ports": [{ "containerPort": 8080, "hostPort": port, "hostIP": "127.0.0.1" }],
                "volumeMounts": [
                    { "name": "conf", "mountPath": "/etc/nginx/nginx.conf", "readOnly": true },
                    { "name": "location", "mountPath": "/etc/nginx/mcp-progress-bridge.conf", "readOnly": true },
                ],
            }],
            "volumes": [
                { "name": "conf", "hostPath": { "path": conf.display().to_string(), "type": "File" } },
                { "name": "location", "hostPath": { "path": location.display().to_string(), "type": "File" } },
            ],
        },
    })
}

/// Wait until `url` answers 200 (the kubelet's readiness probe, asked from outside).
async fn ready(what: &str, url: &str) {
    eventually_within(Duration::from_secs(60), what, || async {
        status_of(url).await == Some(200)
    })
    .await;
}

/// A pod's logs, for a failure message.
async fn logs(container: &str) -> String {
    let output = podman(&["logs", container]).await;
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Read a job's stream until its terminal event, opening it again after the last event seen
/// (`Last-Event-ID`, as EventSource does) when a replica going away ends it. Returns the
/// events and how many times it was opened.
async fn read_to_the_end(events_url: String) -> (Vec<SseEvent>, usize) {
    let mut events: Vec<SseEvent> = Vec::new();
    let mut opened = 0;
    let bound = Instant::now() + Duration::from_secs(120);
    while events.last().is_none_or(|e| !e.is_terminal()) {
        assert!(
            Instant::now() < bound,
            "the job's stream did not end: {events:?}"
        );
        let last = events.last().map(SseEvent::seq);
        let request = reqwest::Client::new().get(&events_url);
        let request = match last {
            Some(id) => request.header("Last-Event-ID", id.to_string()),
            None => request,
        };
        opened += 1;
        let read =
            read_sse_request_patiently(Duration::from_secs(60), request, SseEvent::is_terminal);
        events.extend(read.await);
    }
    (events, opened)
}

/// Play Redis (its claim owned by its fsGroup first) and check what deploy/ promises of it:
/// no command without the Secret's password, and `noeviction`.
async fn start_redis(cluster: &mut KubePlay, manifests: &Manifests, password: &str) {
    let redis = manifests.workload("redis");
    assert_eq!(redis.kind, "StatefulSet");
    cluster.claim(redis.claims(0)).await;
    let pod = redis.pod(0, &manifests.secrets);
    cluster
        .play_pod(&pod, manifests, &manifests.service_names(redis))
        .await;
    let container = format!("{}-redis", redis.pod_name(0));
    let cli = |args: &'static [&'static str]| {
        let container = container.clone();
        async move {
            let mut argv = vec!["exec", &container, "redis-cli", "--no-auth-warning"];
            argv.extend_from_slice(args);
            String::from_utf8_lossy(&podman(&argv).await.stdout).into_owned()
        }
    };
    let answers = tokio::time::timeout(Duration::from_secs(60), async {
        while !cli(&["ping"]).await.contains("NOAUTH") {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    if answers.await.is_err() {
        panic!(
            "Redis does not answer; its log:\n{}",
            logs(&container).await
        );
    }
    let authed = podman_ok(&[
        "exec",
        &container,
        "redis-cli",
        "--no-auth-warning",
        "-a",
        password,
        "config",
        "get",
        "maxmemory-policy",
    ])
    .await;
    assert!(authed.ends_with("noeviction"), "Redis's policy: {authed}");
}

/// Play pod `index` of the bridge's Deployment and wait for its readiness probe; its address.
async fn start_replica(cluster: &KubePlay, manifests: &Manifests, index: u64) -> String {
    let bridge = manifests.workload("mcp-progress-bridge");
    let pod = bridge.pod(index, &manifests.secrets);
    cluster
        .play_pod(&pod, manifests, &manifests.service_names(bridge))
        .await;
    let ip = cluster.ip(&bridge.pod_name(index)).await;
    let probe = &bridge.probe("readinessProbe")["httpGet"];
    let port_name = probe["port"].as_str().expect("a named port");
    let ports = bridge.probe("ports").as_array().expect("ports");
    let port = ports
        .iter()
        .find(|p| p["name"] == port_name)
        .and_then(|p| p["containerPort"].as_u64())
        .expect("the probe's port");
    let url = format!(
        "http://{ip}:{port}{}",
        probe["path"].as_str().expect("a path")
    );
    let within_a_minute = tokio::time::timeout(Duration::from_secs(60), async {
        while status_of(&url).await != Some(200) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    if within_a_minute.await.is_err() {
        let log = logs(&format!("{}-bridge", bridge.pod_name(index))).await;
        panic!("replica {index} not ready at {url}; its log:\n{log}");
    }
    ip
}

/// Roll replica `index` as a Deployment's rolling update does (maxSurge 1, maxUnavailable 0): a new
/// pod ready, the old one out of the proxy's endpoints, its preStop sleep, then SIGTERM with
/// the pod's grace period. It must drain and exit 0.
async fn roll_replica(
    cluster: &KubePlay,
    manifests: &Manifests,
    endpoints: &mut Vec<String>,
    index: usize,
) -> Duration {
    let bridge = manifests.workload("mcp-progress-bridge");
    let new = start_replica(cluster, manifests, bridge.replicas).await;
    endpoints.remove(index);
    endpoints.push(new);
    // Written in place: the pod's bind mount sees the same file.
    cluster.file("nginx.conf", &nginx_conf(endpoints));
    podman_ok(&["exec", "proxy-nginx", "nginx", "-s", "reload"]).await;
    // The preStop hook of deploy/'s Deployment: endpoints go before the signal comes.
    tokio::time::sleep(Duration::from_secs(bridge.pre_stop_sleep_secs())).await;
    let old = bridge.pod_name(index as u64);
    let container = format!("{old}-bridge");
    let stopping = Instant::now();
    let grace = bridge.termination_grace_secs().to_string();
    // The container, as the kubelet signals a pod's containers: `podman pod stop` would stop
    // the pod's infra container at once too, and with it the pod's network, so a draining
    // replica could no longer reach Redis (its jobs then fail `owner_lost`).
    podman_ok(&["stop", "--time", &grace, &container]).await;
    let drained = stopping.elapsed();
    let code = podman_ok(&["inspect", &container, "--format", "{{.State.ExitCode}}"]).await;
    assert_eq!(
        code,
        "0",
        "the old replica drained and exited 0; its log:\n{}",
        logs(&container).await
    );
    drained
}

/// Which of `endpoints` runs the one job running (`bridge_jobs_running` on its admin port).
async fn owner_of_the_job(manifests: &Manifests, endpoints: &[String]) -> usize {
    let ports = manifests
        .workload("mcp-progress-bridge")
        .probe("ports")
        .clone();
    let admin = ports
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["name"] == "metrics"))
        .and_then(|p| p["containerPort"].as_u64())
        .expect("the metrics port");
    eventually("a replica runs the job", || async {
        for (index, ip) in endpoints.iter().enumerate() {
            let metrics = reqwest::get(format!("http://{ip}:{admin}/metrics"))
                .await
                .ok()?;
            let text = metrics.text().await.ok()?;
            if series_value(&text, "bridge_jobs_running") == Some(1.0) {
                return Some(index);
            }
        }
        None
    })
    .await
}

/// After the roll: new calls through the proxy, on the replicas left, run to their end.
async fn calls_after_the_roll(base: &str) {
    let client = connect_with(&format!("{base}/mcp"), Some(TOKEN), None).await;
    for _ in 0..4 {
        let job = running_job(
            &client,
            "demo__slow_count",
            json!({ "to": 2, "delay_ms": 10 }),
        )
        .await;
        let events = read_job_events(&job.events_url).await;
        assert_eq!(
            events.last().map(|e| e.event.as_str()),
            Some("completed"),
            "{events:?}"
        );
    }
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_runs_under_kube_play_and_a_rolled_replica_loses_no_event() {
    if let Some(why) = missing() {
        skip_or_fail("kube_play", &why);
        return;
    }
    let started = Instant::now();
    helper_images().await;
    let port = free_port();
    let overlay_dir = tempfile::tempdir().expect("a temporary directory");
    let password = format!("redis-{:016x}", fastrand::u64(..));
    overlay(overlay_dir.path(), port, &password);
    let manifests = Manifests::from_rendered(kustomize(overlay_dir.path()).await);
    println!("not run by kube play: {:#?}", manifests.not_run);
    let mut cluster = KubePlay::start(&manifests).await;
    start_redis(&mut cluster, &manifests, &password).await;
    let replicas = manifests.workload("mcp-progress-bridge").replicas;
    assert_eq!(replicas, 2, "deploy/ runs two replicas");
    let mut endpoints = Vec::new();
    for index in 0..replicas {
        endpoints.push(start_replica(&cluster, &manifests, index).await);
    }
    let conf = cluster.file("nginx.conf", &nginx_conf(&endpoints));
    cluster
        .play_pod(&proxy_pod(&conf, port), &manifests, &[])
        .await;
    let base = format!("http://localhost:{port}");
    ready("nginx passes /readyz on", &format!("{base}/readyz")).await;
    let unauthorized = reqwest::Client::new()
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" }))
        .send()
        .await
        .expect("POST /mcp through nginx");
    assert_eq!(unauthorized.status(), 401, "/mcp without the bearer token");

    let client = connect_with(&format!("{base}/mcp"), Some(TOKEN), None).await;
    let arguments = json!({ "to": STEPS, "delay_ms": DELAY_MS });
    let job = running_job(&client, "demo__slow_count", arguments).await;
    assert!(
        job.events_url.starts_with(&base),
        "events through nginx: {}",
        job.events_url
    );
    let reader = tokio::spawn(read_to_the_end(job.events_url.clone()));
    // The replica that runs the job is the one rolled: it drains while its job runs on.
    let owner = owner_of_the_job(&manifests, &endpoints).await;
    let drained = roll_replica(&cluster, &manifests, &mut endpoints, owner).await;

    let (events, opened) = reader.await.expect("the reader");
    assert_eq!(
        events.last().map(|e| e.event.as_str()),
        Some("completed"),
        "{events:?}"
    );
    assert_consecutive(&events);
    let expected: Vec<f64> = (1..=STEPS).map(|n| n as f64).collect();
    assert_eq!(
        progress_values(&events),
        expected,
        "every progress event once"
    );
    calls_after_the_roll(&base).await;
    client.cancel().await.ok();
    println!(
        "kube play: {} events read through nginx (stream opened {opened} times), the old \
         replica (the job's owner) drained in {drained:?}, {:?} in all",
        events.len(),
        started.elapsed()
    );
}
