"""Check everything in deploy/ before an operator applies it (run by .ci/run):

    python deploy/validate.py path/to/mcp-progress-bridge

- the Kubernetes manifests as `kubectl kustomize deploy/` renders them, against the API
  schemas (kubernetes-validate, strict: an unknown or misspelt field fails), for the oldest
  and the newest Kubernetes version we claim;
- the compose file against the Compose Specification's schema (check-jsonschema's copy), and
  through `podman-compose config` (anchors, interpolation, required variables);
- that the parts agree with each other and with the bridge: the config the bridge really
  accepts (the binary loads it) and docs/config.schema.json accepts, the ConfigMap kustomize
  generates from it (hash-named, mounted by the Deployment), stop timeouts that
  leave the drain its time and the bounds after it (summed from src/app.rs's constants), the
  docs saying the same, probes on /healthz and /readyz, non-root read-only containers,
  selectors, secret keys and variables that exist;
- deploy/gateway/ (check_gateway): the Gateway API route agrees with the Service and the Ingress;
- deploy/monitoring/ (check_monitoring): the alerts through promtool's check and unit tests,
  the dashboard's queries through promtool's parser, and the objects' selectors.

Each failure is printed with what to fix; the exit status is the number of failures (capped).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent
VENV_BIN = Path(sys.executable).parent
# The oldest Kubernetes the manifests are for (lifecycle.preStop.sleep is on by default from
# 1.30), and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ["1.30.0", None]
IMAGE_UID = 10001
# Where the shutdown's bounds are: the stages after the drain (src/app.rs), the time a stage
# that overran gets to drop its tasks (src/shutdown.rs), the traces exporter's own bound.
BOUND_SOURCES = ["src/app.rs", "src/shutdown.rs", "src/traces/mod.rs"]

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.stdout.write(done.stdout + done.stderr)
    return done


def seconds(duration: str) -> int:
    """Compose durations such as 45s, 1m30s."""
    total = 0
    for value, unit in re.findall(r"(\d+)(h|m|s)", duration):
        total += int(value) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


def after_drain_secs() -> int:
    """The longest the bridge takes to exit once its drain has ended: `AFTER_DRAIN_MAX` of
    src/app.rs, summed here the same way from the same constants (the cancelled jobs' end and
    a drop wait, the answers owed, then each of LATER_STAGES' bounds and a drop wait). Read
    from the source, so that the stop timeouts below follow the code; a Rust test holds the
    docs to AFTER_DRAIN_MAX itself, and this script holds the docs to this sum."""
    texts = {name: (ROOT / name).read_text() for name in BOUND_SOURCES}
    secs = {}
    for text in texts.values():
        for name, value in re.findall(r"const (\w+): Duration = Duration::from_secs\((\d+)\);", text):
            secs[name] = int(value)
    app = texts["src/app.rs"]
    traces = re.search(r"const TRACES_FLUSH_TIMEOUT: Duration =\s*traces::FLUSH_TIMEOUT"
                       r"\.saturating_add\(Duration::from_secs\((\d+)\)\);", app)
    stages = re.search(r"const LATER_STAGES: \[\(Stage, Duration\); \d+\] = \[(.*?)\];", app, re.S)
    if not traces or not stages or "after_drain_max" not in app:
        raise SystemExit("deploy/validate.py no longer finds the shutdown's bounds in src/app.rs: "
                         "update after_drain_secs() to the code")
    secs["TRACES_FLUSH_TIMEOUT"] = secs["FLUSH_TIMEOUT"] + int(traces[1])
    bounds = re.findall(r"\(Stage::\w+, (\w+)\)", stages[1])
    drop = secs["DROP_WAIT"]
    return (secs["JOBS_END_TIMEOUT"] + drop + secs["ANSWERS_WRITE_TIMEOUT"]
            + sum(secs[bound] + drop for bound in bounds))


# What a replica's memory is made of, each the larger of two measurements: the benchmark's
# (BENCHMARKS.md: a started bridge 38-41 MiB, an MCP session 62 KiB, a live job of a Streamable
# HTTP upstream 32.8 KiB, a reader 7.2-7.5 KiB on the memory store) and a run filled to
# deploy/'s limits on the Redis store (BENCHMARKS.md, "Memory at deploy/'s limits": 42.8 MiB,
# 76.8 KiB, 36.0 KiB and 16.4 KiB; a debug build, so on the safe side). docs/deployment.md
# ("Memory") shows the same.
MEMORY_BASE_MIB = 43
SESSION_KIB = 77
JOB_KIB = 36
READER_KIB = 16
# Of the limit, what the sum may take: the rest is for buffered frames of slow readers,
# results in flight (up to limits.max_result_bytes each) and what the allocator keeps.
MEMORY_SHARE = 0.75


def quantity_mib(quantity: str) -> float:
    """A Kubernetes memory quantity (512Mi, 1Gi, 500M) in MiB."""
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?)?", quantity).groups()
    scale = {None: 1 / 2**20, "Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 2**20,
             "K": 1e3 / 2**20, "M": 1e6 / 2**20, "G": 1e9 / 2**20, "T": 1e12 / 2**20}[unit]
    return float(number) * scale


def memory_mib(config: dict) -> float:
    """The memory the limits of `config` allow a replica to use (docs/deployment.md,
    "Memory"), each key unset taken at the bridge's default (docs/config.schema.json)."""
    schema = json.loads((ROOT / "docs/config.schema.json").read_text())["$defs"]
    def key(section: str, struct: str, name: str) -> int:
        return config.get(section, {}).get(name, schema[struct]["properties"][name]["default"])
    sessions = key("limits", "LimitsConfig", "max_sessions")
    jobs = key("jobs", "JobsConfig", "max_jobs")
    readers = key("limits", "LimitsConfig", "max_subscribers")
    return MEMORY_BASE_MIB + (sessions * SESSION_KIB + jobs * JOB_KIB + readers * READER_KIB) / 1024


def duration_secs(duration: str) -> int:
    """Prometheus durations such as 17m, 1h30m."""
    total = 0
    for value, unit in re.findall(r"(\d+)(h|m|s)", duration):
        total += int(value) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


def dashboard_exprs(dashboard: dict) -> list[str]:
    """Every query of the dashboard (panels in rows too), its variables replaced by values
    PromQL accepts, so that promtool can parse them as it parses the alerts."""
    exprs = []
    def walk(panels):
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                expr = target["expr"].replace("$__rate_interval", "5m")
                exprs.append(re.sub(r"\$\{?(\w+)\}?", ".*", expr))
    walk(dashboard["panels"])
    return exprs


def check_gateway(service: dict, ingress: dict) -> None:
    """deploy/gateway/ (the Gateway API instead of the Ingress): it renders, the HTTPRoute sends
    to the Service's port through the Gateway's HTTPS listener, both name the Ingress's host,
    TLS comes from the Ingress's Secret, and plain HTTP only redirects. Not checked against the
    Gateway API's CRD schemas (none bundled)."""
    rendered = run(["kubectl", "kustomize", str(DEPLOY / "gateway")])
    check(rendered.returncode == 0, "kubectl kustomize deploy/gateway/ renders")
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    gateways = [d for d in docs if d["kind"] == "Gateway"]
    routes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "HTTPRoute"}
    check(len(gateways) == 1 and len(routes) == 2, "deploy/gateway/: one Gateway, two HTTPRoutes")
    if len(gateways) != 1 or "mcp-progress-bridge" not in routes:
        return
    listeners = {l["name"]: l for l in gateways[0]["spec"]["listeners"]}
    https, route = listeners.get("https", {}), routes["mcp-progress-bridge"]
    host = ingress["spec"]["rules"][0]["host"]
    secret = ingress["spec"]["tls"][0]["secretName"]
    check(https.get("protocol") == "HTTPS" and https.get("hostname") == host
          and [r["name"] for r in https["tls"]["certificateRefs"]] == [secret],
          f"the Gateway's https listener serves {host} with the Secret {secret}")
    check(route["spec"]["parentRefs"] == [{"name": gateways[0]["metadata"]["name"], "sectionName": "https"}]
          and route["spec"]["hostnames"] == [host],
          "the HTTPRoute is attached to the Gateway's https listener for the same host")
    ports = {p["port"] for p in service["spec"]["ports"] if p["name"] == "http"}
    backends = [b for rule in route["spec"]["rules"] for b in rule["backendRefs"]]
    check(all(b["name"] == service["metadata"]["name"] and b["port"] in ports for b in backends),
          "the HTTPRoute's backend is the bridge's Service on its http port")
    check(all(rule.get("timeouts", {}).get("request") == "0s" for rule in route["spec"]["rules"]),
          "the HTTPRoute sets no request timeout (SSE streams stay open)")
    redirect = routes.get("mcp-progress-bridge-redirect", {"spec": {"rules": []}})
    check(all(f["type"] == "RequestRedirect" and f["requestRedirect"]["scheme"] == "https"
              for rule in redirect["spec"]["rules"] for f in rule.get("filters", []))
          and bool(redirect["spec"]["rules"]),
          "plain HTTP on the Gateway only redirects to https")
    check(ingress["spec"]["tls"][0]["hosts"] == [host], "the Ingress serves its host with TLS")


def check_monitoring(pod_labels: dict, container_ports: dict, stop_secs: int) -> None:
    """deploy/monitoring/ (`kubectl apply -k deploy/monitoring/`, needs the Prometheus
    Operator's CRDs): its objects render and select the bridge's pods, the alert rules pass
    promtool's check and their unit tests (alerts.test.yaml), the dashboard is JSON whose every
    query PromQL parses, and the drain alert waits as long as a drain may take.
    tests/it/monitoring.rs checks that every metric named is one the bridge serves."""
    monitoring = DEPLOY / "monitoring"
    rendered = run(["kubectl", "kustomize", str(monitoring)])
    check(rendered.returncode == 0, "kubectl kustomize deploy/monitoring/ renders")
    objects = {d["kind"]: d for d in yaml.safe_load_all(rendered.stdout) if d}
    check(set(objects) == {"Service", "ServiceMonitor", "PrometheusRule", "ConfigMap"},
          f"deploy/monitoring/: a Service, ServiceMonitor, PrometheusRule and ConfigMap ({sorted(objects)})")
    plain = Path(os.environ.get("TMPDIR", "/tmp")) / "mcp-progress-bridge-monitoring.yaml"
    plain.write_text(yaml.safe_dump_all([objects["Service"], objects["ConfigMap"]]))
    done = run([str(VENV_BIN / "kubernetes-validate"), "--strict", "--quiet", str(plain)])
    check(done.returncode == 0, "deploy/monitoring/'s Service and ConfigMap valid (strict)")
    service, monitor = objects["Service"], objects["ServiceMonitor"]
    check(service["spec"]["selector"].items() <= pod_labels.items()
          and all(p["targetPort"] in container_ports for p in service["spec"]["ports"]),
          "the metrics Service selects the bridge's pods, on a port they name")
    check(monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
          and {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]},
          "the ServiceMonitor selects the metrics Service and scrapes its port")
    check(service["metadata"]["labels"].get(monitor["spec"]["jobLabel"]) == "mcp-progress-bridge",
          "the ServiceMonitor's job label is mcp-progress-bridge (what the alerts and dashboard select)")
    dashboard_map = objects["ConfigMap"]
    check(dashboard_map["metadata"]["labels"].get("grafana_dashboard") == "1",
          "the dashboard ConfigMap carries the Grafana sidecar's label")

    work = Path(os.environ.get("TMPDIR", "/tmp")) / "mcp-progress-bridge-promtool"
    work.mkdir(exist_ok=True)
    rule = objects["PrometheusRule"]
    (work / "alerts.rules.yaml").write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    (work / "alerts.test.yaml").write_text((monitoring / "alerts.test.yaml").read_text())
    try:
        dashboard = json.loads(dashboard_map["data"]["grafana-dashboard.json"])
    except json.JSONDecodeError as e:
        check(False, f"deploy/monitoring/grafana-dashboard.json is JSON: {e}")
        return
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    check(len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
          and all(p["datasource"]["uid"] == "${datasource}" for p in panels)
          and all(p.get("targets") for p in panels),
          f"the dashboard's {len(panels)} panels: unique ids, each with queries on the chosen data source")
    exprs = dashboard_exprs(dashboard)
    records = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    (work / "dashboard.rules.yaml").write_text(yaml.safe_dump(records, sort_keys=False))
    promtool = shutil.which("promtool")
    check(promtool is not None, "promtool is installed (Debian: apt-get install prometheus)")
    if promtool:
        done = subprocess.run(
            [promtool, "check", "rules", "alerts.rules.yaml", "dashboard.rules.yaml"],
            capture_output=True, text=True, cwd=work)
        if done.returncode != 0:
            sys.stdout.write(done.stdout + done.stderr)
        check(done.returncode == 0, f"promtool check rules: the alerts and the dashboard's {len(exprs)} queries")
        done = subprocess.run([promtool, "test", "rules", "alerts.test.yaml"],
                              capture_output=True, text=True, cwd=work)
        if done.returncode != 0:
            sys.stdout.write(done.stdout + done.stderr)
        check(done.returncode == 0, "promtool test rules: every alert fires on its series (alerts.test.yaml)")
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    tested = set(re.findall(r"alertname: (\w+)", (monitoring / "alerts.test.yaml").read_text()))
    check(set(rules) <= tested, f"every alert has a unit test: untested {sorted(set(rules) - tested)}")
    stuck = duration_secs(rules["BridgeDrainStuck"]["for"])
    check(stuck >= stop_secs, f"BridgeDrainStuck waits {stuck} s >= jobs.drain_secs + the time after the drain ({stop_secs} s)")


def main() -> int:
    binary = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/debug/mcp-progress-bridge")
    # What `kubectl apply -k deploy/` applies (rendered by kubectl's kustomize), and the
    # Secret's template (not applied: applying must never overwrite a real Secret).
    manifests = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
    listed = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    check(sorted(DEPLOY / r for r in listed) == manifests,
          f"deploy/kustomization.yaml lists every manifest of deploy/kubernetes/: {listed}")
    rendered_file = Path(os.environ.get("TMPDIR", "/tmp")) / "mcp-progress-bridge-kustomized.yaml"
    rendered = run(["kubectl", "kustomize", str(DEPLOY)])
    check(rendered.returncode == 0, "kubectl kustomize deploy/ renders (kubectl: Debian's "
          "kubernetes-client, or any kubectl 1.14+)")
    rendered_file.write_text(rendered.stdout)
    secret_example = DEPLOY / "kubernetes" / "secret.yaml.example"

    # --- schemas ---------------------------------------------------------------------------
    for version in KUBERNETES_VERSIONS:
        argv = [str(VENV_BIN / "kubernetes-validate"), "--strict", "--quiet"]
        if version:
            argv += ["-k", version]
        done = run(argv + [str(rendered_file), str(secret_example)])
        check(done.returncode == 0, f"manifests valid for Kubernetes {version or 'latest'} (strict)")
    compose_file = DEPLOY / "compose.yaml"
    done = run([str(VENV_BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                str(compose_file)])
    check(done.returncode == 0, "compose.yaml valid against the Compose Specification schema")
    env = dict(os.environ, BRIDGE_AGENT_TOKEN="x" * 32, BRIDGE_JOB_SECRET="y" * 32)
    done = run([str(VENV_BIN / "podman-compose"), "-f", str(compose_file), "config"], env=env)
    check(done.returncode == 0, "podman-compose config accepts compose.yaml")
    bare = {k: v for k, v in env.items() if not k.startswith("BRIDGE_")}
    refused = subprocess.run([str(VENV_BIN / "podman-compose"), "-f", str(compose_file), "config"],
                             capture_output=True, text=True, env=bare)
    check(refused.returncode != 0 and "BRIDGE_AGENT_TOKEN" in refused.stderr,
          "compose refuses to start without BRIDGE_AGENT_TOKEN and says so")

    # --- the bridge's config ---------------------------------------------------------------
    config_text = (DEPLOY / "bridge.toml").read_text()
    config = tomllib.loads(config_text)
    drain = config["jobs"]["drain_secs"]
    after = after_drain_secs()
    for doc, says in [("docs/deployment.md", f"at most **{after} s** more"),
                      ("docs/lifecycle.md", f"at most **{after} s** after the drain"),
                      ("docs/configuration.md", f"this plus {after} s"),
                      ("deploy/bridge.toml", f"leave {after} s more")]:
        check(says in (ROOT / doc).read_text(),
              f"{doc} says the bridge needs up to {after} s after the drain (src/app.rs)")
    listen_port = int(config["server"]["listen"].rsplit(":", 1)[1])
    admin_port = int(config["server"]["admin_listen"].rsplit(":", 1)[1])
    secret_vars = {v[4:] for v in config["auth"]["mcp_tokens"] + [config["auth"]["job_secret"]]
                   if v.startswith("env:")}
    loaded = run([binary, "--config", str(DEPLOY / "bridge.toml"), "token", "correlation", "check"],
                 env=dict(env, BRIDGE_REDIS_URL="redis://127.0.0.1:1"))
    check(loaded.returncode == 0, "the bridge accepts deploy/bridge.toml (with its env: secrets set)")
    schema = ROOT / "docs/config.schema.json"
    configs = [DEPLOY / "bridge.toml", *sorted((ROOT / "config").glob("*.toml"))]
    done = run([str(VENV_BIN / "check-jsonschema"), "--schemafile", str(schema),
                *map(str, configs)])
    check(done.returncode == 0, "deploy/bridge.toml and config/*.toml match docs/config.schema.json")
    misspelt = Path(os.environ.get("TMPDIR", "/tmp")) / "bridge-schema-probe.toml"
    misspelt.write_text('[server]\nlisten = "0.0.0.0:8080"\nlistne = "x"\n')
    done = subprocess.run([str(VENV_BIN / "check-jsonschema"), "--schemafile", str(schema),
                           str(misspelt)], capture_output=True, text=True)
    check(done.returncode != 0 and "listne" in done.stdout + done.stderr, "docs/config.schema.json refuses a misspelt key")

    applied = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    check(all(doc["kind"] != "Secret" for doc in applied),
          "kubectl apply -k deploy/ applies no Secret (it would overwrite the real one)")
    # The bridge's objects are all named mcp-progress-bridge (the ConfigMap with kustomize's
    # content hash after it); Redis's are redis.
    docs = {d["kind"]: d for d in applied
            if d["metadata"]["name"].startswith("mcp-progress-bridge")}
    docs["Secret"] = yaml.safe_load(secret_example.read_text())
    redis = {d["kind"]: d for d in applied if d["metadata"]["name"] == "redis"}
    check(docs["ConfigMap"]["data"]["bridge.toml"] == config_text,
          "the generated ConfigMap carries exactly deploy/bridge.toml")
    check(docs["ConfigMap"]["metadata"]["name"] != "mcp-progress-bridge",
          "the ConfigMap's name carries its content's hash (a changed config rolls the pods)")

    # --- Kubernetes: drain, probes, security, wiring ------------------------------------------
    deployment = docs["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    needed = pre_stop + drain + after
    check(pod["terminationGracePeriodSeconds"] >= needed,
          f"terminationGracePeriodSeconds {pod['terminationGracePeriodSeconds']} >= preStop "
          f"{pre_stop} + jobs.drain_secs {drain} + {after} after the drain")
    resources = container["resources"]
    limit = quantity_mib(resources["limits"]["memory"])
    needed_mib = memory_mib(config)
    check(needed_mib <= limit * MEMORY_SHARE,
          f"memory: deploy/bridge.toml's limits allow {needed_mib:.0f} MiB, within "
          f"{MEMORY_SHARE:.0%} of the {resources['limits']['memory']} limit ({limit * MEMORY_SHARE:.0f} MiB)")
    check(quantity_mib(resources["requests"]["memory"]) == limit,
          "memory: requested as much as the limit (the scheduler places what the limits allow)")
    defaults = memory_mib({})
    deployment_doc = (ROOT / "docs/deployment.md").read_text()
    for says in [f"{MEMORY_BASE_MIB} MiB", f"{SESSION_KIB} KiB", f"{JOB_KIB} KiB", f"{READER_KIB} KiB",
                 f"{needed_mib:.0f} MiB", f"{defaults:.0f} MiB", f"{needed_mib / MEMORY_SHARE:.0f} MiB",
                 f"{defaults / MEMORY_SHARE:.0f} MiB"]:
        check(says in deployment_doc, f"docs/deployment.md (Memory) says {says}")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    check(ports.get("http") == listen_port, f"containerPort http = server.listen's port {listen_port}")
    check(ports.get("metrics") == admin_port, f"containerPort metrics = admin_listen's port {admin_port}")
    check(container["livenessProbe"]["httpGet"]["path"] == "/healthz", "liveness probe on /healthz")
    check(container["readinessProbe"]["httpGet"]["path"] == "/readyz", "readiness probe on /readyz")
    pod_security = pod["securityContext"]
    container_security = container["securityContext"]
    check(pod_security.get("runAsNonRoot") is True and pod_security.get("runAsUser") == IMAGE_UID,
          f"pod runs as non-root uid {IMAGE_UID} (the image's user)")
    check(container_security.get("readOnlyRootFilesystem") is True
          and container_security.get("allowPrivilegeEscalation") is False
          and container_security.get("capabilities", {}).get("drop") == ["ALL"],
          "container: read-only root filesystem, no privilege escalation, no capabilities")
    check(not pod.get("volumes") or all("emptyDir" not in v for v in pod["volumes"]),
          "no writable volume: the bridge writes nothing")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    check(deployment["spec"]["selector"]["matchLabels"].items() <= labels.items(),
          "Deployment selector matches its pods")
    check(docs["Service"]["spec"]["selector"].items() <= labels.items(), "Service selects the pods")
    check(docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items(),
          "PodDisruptionBudget selects the pods")
    budget = docs["PodDisruptionBudget"]["spec"]
    check(budget.get("maxUnavailable") == 1 and "minAvailable" not in budget,
          "PodDisruptionBudget: maxUnavailable 1 (one replica at a time, whatever the count)")
    spread = pod.get("topologySpreadConstraints", [])
    check({c["topologyKey"] for c in spread} >= {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
          and all(c["labelSelector"]["matchLabels"].items() <= labels.items() for c in spread),
          "topology spread over nodes and zones, selecting the pods")
    policy = docs["NetworkPolicy"]["spec"]
    check(policy["podSelector"]["matchLabels"].items() <= labels.items()
          and policy["policyTypes"] == ["Ingress"], "NetworkPolicy selects the pods (ingress)")
    rules = policy["ingress"]
    to_port = lambda port: [r for r in rules if any(p["port"] in (port, ports.get(port)) for p in r["ports"])]
    metrics_rules = to_port("metrics")
    check(bool(metrics_rules) and all(
              r.get("from") and all(set(f) == {"namespaceSelector"} for f in r["from"])
              for r in metrics_rules)
          and all("metrics" not in [p["port"] for p in r["ports"]] or r.get("from") for r in rules),
          f"NetworkPolicy: the admin port {admin_port} only from the monitoring namespace")
    check(bool(to_port("http")), "NetworkPolicy: the API port is reachable")
    for upstream in config["upstreams"]:
        check("demo-tools" not in upstream.get("args", []),
              f"deploy/bridge.toml: upstream {upstream['name']!r} is not the demo tool server")
    env_names = {e["name"] for e in container["env"]}
    check(secret_vars <= env_names, f"Deployment sets {sorted(secret_vars)}")
    secret_keys = set(docs["Secret"]["stringData"])
    refs = {e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"] if "valueFrom" in e}
    check(refs <= secret_keys, f"every secretKeyRef key exists in secret.yaml.example: {sorted(refs)}")
    check(pod["volumes"][0]["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"],
          "the config volume is the ConfigMap")
    # --- Kubernetes: the shipped Redis ---------------------------------------------------------
    redis_pod = redis["StatefulSet"]["spec"]["template"]["spec"]
    redis_container = redis_pod["containers"][0]
    redis_args = redis_container["args"]
    policy = redis_args[redis_args.index("--maxmemory-policy") + 1]
    check(policy == "noeviction", f"Redis runs with maxmemory-policy noeviction (not {policy})")
    check("--requirepass" in redis_args, "Redis requires a password")
    redis_refs = {e["valueFrom"]["secretKeyRef"]["key"] for e in redis_container["env"]
                  if "valueFrom" in e}
    check(redis_refs <= secret_keys, f"Redis's secretKeyRef keys exist in the Secret: {sorted(redis_refs)}")
    redis_port = redis["Service"]["spec"]["ports"][0]["port"]
    check(f"redis://:$pw@{redis['Service']['metadata']['name']}:{redis_port}"
          in secret_example.read_text(),
          "the Secret's instructions build redis-url from the Redis Service's name and port")
    check(redis["Service"]["spec"]["selector"].items()
          <= redis["StatefulSet"]["spec"]["template"]["metadata"]["labels"].items(), "the redis Service selects Redis")
    allowed = redis["NetworkPolicy"]["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    check(allowed.items() <= labels.items(), "Redis's NetworkPolicy lets the bridge's pods in")
    check(redis_container["securityContext"].get("readOnlyRootFilesystem") is True
          and redis_pod["securityContext"].get("runAsNonRoot") is True,
          "Redis: non-root, read-only root filesystem")

    backend = docs["Ingress"]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    check(backend["name"] == docs["Service"]["metadata"]["name"], "Ingress routes to the Service")
    check_gateway(docs["Service"], docs["Ingress"])

    # --- compose ---------------------------------------------------------------------------
    compose = yaml.safe_load(compose_file.read_text())
    bridges = [s for name, s in compose["services"].items() if name.startswith("bridge-")]
    check(len(bridges) == 2, "compose runs two bridge replicas")
    for service in bridges:
        check(seconds(service["stop_grace_period"]) >= drain + after,
              f"stop_grace_period {service['stop_grace_period']} >= jobs.drain_secs {drain} "
              f"+ {after} after the drain")
        check(service["read_only"] is True and service["user"] == f"{IMAGE_UID}:{IMAGE_UID}",
              "compose bridge: read-only, uid 10001")
        check(secret_vars <= set(service["environment"]), f"compose sets {sorted(secret_vars)}")
        for volume in service["volumes"]:
            check((DEPLOY / volume.split(":")[0]).exists(), f"compose mounts {volume.split(':')[0]}")
    redis_command = compose["services"]["redis"]["command"]
    check(redis_command[redis_command.index("--maxmemory-policy") + 1] == "noeviction",
          "compose's Redis runs with maxmemory-policy noeviction")
    for volume in compose["services"]["nginx"]["volumes"]:
        check((DEPLOY / volume.split(":")[0]).exists(), f"compose mounts {volume.split(':')[0]}")

    # --- the image ------------------------------------------------------------------------
    dockerfile = (ROOT / "Dockerfile").read_text()
    check(f"USER {IMAGE_UID}:{IMAGE_UID}" in dockerfile, f"the Dockerfile's user is {IMAGE_UID}")
    check("/healthz" in dockerfile.split("HEALTHCHECK", 1)[1].split("\n\n", 1)[0],
          "the Dockerfile's HEALTHCHECK asks /healthz")
    for where, text in [("Dockerfile", dockerfile),
                        ("docs/deployment.md", (ROOT / "docs/deployment.md").read_text())]:
        timeouts = [int(t) for t in re.findall(r"--stop-timeout (\d+)", text)]
        check(bool(timeouts) and all(t >= drain + after for t in timeouts),
              f"{where}: every --stop-timeout {timeouts} >= jobs.drain_secs {drain} + {after}")

    check_monitoring(labels, ports, drain + after)

    print(f"\n{len(failures)} failed" if failures else "\ndeploy/: all checks passed")
    return min(len(failures), 100)


if __name__ == "__main__":
    sys.exit(main())
