//! A bad config stops the bridge at start with exit code 2 and one line naming the file and
//! the key; the shipped default config is valid.

use std::{path::Path, process::Command};

const BIN: &str = env!("CARGO_BIN_EXE_mcp-progress-bridge");

/// Run the bridge on `toml` and return (exit code, stderr).
fn run_with(toml: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.toml");
    std::fs::write(&path, toml).unwrap();
    run_path(&path)
}

fn run_path(path: &Path) -> (i32, String) {
    let output = Command::new(BIN)
        .arg("--config")
        .arg(path)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .env_remove("BRIDGE_LISTEN")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn bad_configs_exit_2_naming_the_file_and_key() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "unknown key",
            "[server]\nlisten = \"127.0.0.1:0\"\nlisen = 1\n",
            "lisen",
        ),
        ("wrong type", "[jobs]\nhistory = \"many\"\n", "jobs.history"),
        ("bad mode", "[jobs]\nmode = \"later\"\n", "jobs.mode"),
        (
            "duplicate upstream",
            "[[upstreams]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\n\
             [[upstreams]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"y\"\n",
            "upstreams[1].name",
        ),
        (
            "bad expose glob",
            "[[upstreams]]\nname = \"e\"\ntransport = \"stdio\"\ncommand = \"x\"\n\
             expose = { tools = [\"*\", \"![bad\"] }\n",
            "upstreams[0].expose.tools",
        ),
        (
            "bad surface limit",
            "[limits]\nmax_resource_subscriptions = 0\n",
            "limits.max_resource_subscriptions",
        ),
        (
            "bad url",
            "[[upstreams]]\nname = \"r\"\ntransport = \"http\"\nurl = \"not a url\"\n",
            "upstreams[0].url",
        ),
        (
            "empty command",
            "[[upstreams]]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"  \"\n",
            "upstreams[0].command",
        ),
        (
            "bad name",
            "[[upstreams]]\nname = \"a__b\"\ntransport = \"stdio\"\ncommand = \"x\"\n",
            "upstreams[0].name",
        ),
        (
            "bad public url",
            "[server]\npublic_url = \"ftp://x\"\n",
            "server.public_url",
        ),
        (
            "bad tool mode",
            "[[upstreams]]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\ntools = { t = { mode = \"x\" } }\n",
            "upstreams[0].tools",
        ),
        ("syntax", "[server\n", "bridge.toml"),
        (
            "the drain's old and new names both",
            "[jobs]\nshutdown_grace_secs = 20\ndrain_secs = 900\n",
            "jobs.shutdown_grace_secs",
        ),
        (
            "a drain past a day",
            "[jobs]\ndrain_secs = 86401\n",
            "jobs.drain_secs",
        ),
        ("no jobs allowed", "[jobs]\nmax_jobs = 0\n", "jobs.max_jobs"),
        (
            "zero timeout",
            "[[upstreams]]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\ntimeout_secs = 0\n",
            "upstreams[0].timeout_secs",
        ),
        (
            "zero idle timeout on a tool",
            "[[upstreams]]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\ntools = { t = { idle_timeout_secs = 0 } }\n",
            "upstreams[0].tools.t.idle_timeout_secs",
        ),
        (
            "bad backend",
            "[store]\nbackend = \"mongo\"\n",
            "store.backend",
        ),
        (
            "redis url of another scheme",
            "[store]\nbackend = \"redis\"\nredis_url = \"http://x:6379\"\n",
            "store.redis_url",
        ),
        (
            "zero lease",
            "[store]\nlease_secs = 0\n",
            "store.lease_secs",
        ),
        (
            "bad key prefix",
            "[store]\nkey_prefix = \"a b\"\n",
            "store.key_prefix",
        ),
        ("unknown store key", "[store]\nredis = 1\n", "redis"),
        (
            "redis CA file for a plain redis url",
            "[store]\nbackend = \"redis\"\nredis_ca_file = \"/etc/hostname\"\n",
            "store.redis_ca_file",
        ),
        (
            "missing redis CA file",
            "[store]\nbackend = \"redis\"\nredis_url = \"rediss://x:6380\"\nredis_ca_file = \"/nonexistent/ca.pem\"\n",
            "store.redis_ca_file",
        ),
        (
            "redis cluster over a unix socket",
            "[store]\nbackend = \"redis\"\nredis_cluster = true\nredis_url = \"unix:///run/redis.sock\"\n",
            "store.redis_cluster",
        ),
        (
            "redis cluster with a database",
            "[store]\nbackend = \"redis\"\nredis_cluster = true\nredis_url = \"redis://x:6379/2\"\n",
            "store.redis_cluster",
        ),
        (
            "redis cluster not a bool",
            "[store]\nredis_cluster = \"yes\"\n",
            "store.redis_cluster",
        ),
        (
            "bad eviction check",
            "[store]\nredis_eviction_check = \"ignore\"\n",
            "store.redis_eviction_check",
        ),
        (
            "missing ca_file",
            "[[upstreams]]\nname = \"t\"\ntransport = \"http\"\nurl = \"https://x/mcp\"\nca_file = \"/nonexistent/ca.pem\"\n",
            "upstreams[0].ca_file",
        ),
        (
            "ca_file that is no PEM",
            "[[upstreams]]\nname = \"t\"\ntransport = \"http\"\nurl = \"https://x/mcp\"\nca_file = \"/proc/version\"\n",
            "upstreams[0].ca_file",
        ),
        (
            "durable tasks on stdio",
            "[[upstreams]]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\ndurable = \"tasks\"\n",
            "upstreams[0].durable",
        ),
        (
            "bad durable",
            "[[upstreams]]\nname = \"h\"\ntransport = \"http\"\nurl = \"http://x/mcp\"\ndurable = \"always\"\n",
            "upstreams[0].durable",
        ),
        (
            "ca_file for an http url",
            "[[upstreams]]\nname = \"t\"\ntransport = \"http\"\nurl = \"http://x/mcp\"\nca_file = \"/proc/version\"\n",
            "upstreams[0].ca_file",
        ),
        (
            "ready_requires names no upstream",
            "[server]\nready_requires = [\"nope\"]\n[[upstreams]]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\n",
            "server.ready_requires[0]",
        ),
    ];
    for (what, toml, key) in cases {
        let (code, stderr) = run_with(toml);
        assert_eq!(code, 2, "{what}: exit code, stderr: {stderr}");
        let line = stderr
            .lines()
            .find(|l| l.contains("config error"))
            .unwrap_or_else(|| panic!("{what}: {stderr}"));
        assert!(
            line.contains("bridge.toml"),
            "{what}: names the file: {line}"
        );
        assert!(line.contains(key), "{what}: names {key}: {line}");
    }
}

#[test]
fn a_missing_file_exits_2() {
    let (code, stderr) = run_path(Path::new("/nonexistent/bridge.toml"));
    assert_eq!(code, 2);
    assert!(stderr.contains("/nonexistent/bridge.toml"), "{stderr}");
}

#[test]
fn a_bad_environment_override_exits_2() {
    let output = Command::new(BIN)
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/bridge.toml"),
        ])
        .env("BRIDGE_LISTEN", "nowhere")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("BRIDGE_LISTEN"));
}

#[test]
fn the_shipped_configs_are_valid() {
    use mcp_progress_bridge::config::{Config, Overrides};
    // The secrets the example configs read from the environment, given to a process of the
    // test's own: set here, they would race with the other tests reading the environment.
    let secrets = [
        ("BRIDGE_AGENT_TOKEN", "example-agent-token-0123456789abcdef"),
        ("BRIDGE_JOB_SECRET", "example-job-secret-0123456789abcdef"),
    ];
    if !crate::common::in_own_process(module_path!(), "the_shipped_configs_are_valid", &secrets) {
        return;
    }
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/config")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            Config::load(Some(&path), &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// `check-config` as the bridge reads it: on `toml` with `env`, (exit code, stdout, stderr).
fn check_config(toml: &str, env: &[(&str, &str)]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.toml");
    std::fs::write(&path, toml).unwrap();
    let output = Command::new(BIN)
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .env_remove("BRIDGE_LISTEN")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        output.status.code().unwrap_or(-1),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// `check-config` names every problem with its key (one per section), exits 2, and starts
/// nothing; a valid config exits 0.
#[test]
fn check_config_names_every_problem_and_its_exit_status_says_if_it_is_usable() {
    let bad = "[server]\nkeep_alive_idle_secs = 0\nready_requires = [\"x\"]\n\
               [limits]\nmax_sessions = 0\n";
    let (code, _, stderr) = check_config(bad, &[]);
    assert_eq!(code, 2, "{stderr}");
    for key in [
        "server.keep_alive_idle_secs",
        "limits.max_sessions",
        "server.ready_requires[0]",
    ] {
        assert!(stderr.contains(&format!("key `{key}`")), "{key}: {stderr}");
    }
    assert!(stderr.contains("3 problem(s)"), "{stderr}");
    let (code, stdout, stderr) = check_config("", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("the config is valid"), "{stdout}");
}

/// Every key from the environment: `BRIDGE__SECTION__KEY`, lists and list entries too; a bad
/// value names the variable, and an unknown key is refused as in the file.
#[test]
fn every_key_can_be_set_from_the_environment() {
    let (code, _, stderr) = check_config(
        "",
        &[
            ("BRIDGE__LIMITS__MAX_SESSIONS", "0"),
            ("BRIDGE__SERVER__ALLOWED_HOSTS", "[\"a.example\"]"),
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("limits.max_sessions") && stderr.contains("BRIDGE__LIMITS__MAX_SESSIONS"),
        "{stderr}"
    );
    let (code, _, stderr) = check_config("", &[("BRIDGE__SERVER__LISTN", "x")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("listn"), "{stderr}");
    let upstream = "[[upstreams]]\nname = \"web\"\ntransport = \"http\"\nurl = \"http://a/mcp\"\n";
    let (code, _, stderr) = check_config(upstream, &[("BRIDGE__UPSTREAMS__0__URL", "ftp://a")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("upstreams[0].url"), "{stderr}");
    let (code, _, stderr) = check_config(
        upstream,
        &[
            ("BRIDGE__UPSTREAMS__0__URL", "http://b/mcp"),
            ("BRIDGE__SERVER__KEEP_ALIVE_IDLE_SECS", "620"),
            ("BRIDGE__SERVER__TRUSTED_PROXIES", "[\"10.0.0.0/8\"]"),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
}

/// An upstream's `url`, `headers` and `env` values may be `env:NAME` or `file:/path`: the
/// credential stays out of the file, and one that cannot be read is named by its key.
#[test]
fn upstream_secrets_come_from_the_environment_or_a_file() {
    let upstream = "[[upstreams]]\nname = \"web\"\ntransport = \"http\"\nurl = \"env:UP_URL\"\n\
                    headers = { Authorization = \"env:UP_AUTH\" }\n";
    let (code, _, stderr) = check_config(upstream, &[("UP_URL", "http://up.example/mcp")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("upstreams[0].headers.Authorization"),
        "{stderr}"
    );
    assert!(stderr.contains("UP_AUTH is not set"), "{stderr}");
    let (code, _, stderr) = check_config(
        upstream,
        &[("UP_URL", "ftp://up.example"), ("UP_AUTH", "Bearer x")],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("upstreams[0].url"), "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "s3cret\n").unwrap();
    let stdio = format!(
        "[[upstreams]]\nname = \"child\"\ntransport = \"stdio\"\ncommand = \"x\"\n\
         env = {{ API_KEY = \"file:{}\" }}\n",
        key.display()
    );
    let (code, _, stderr) = check_config(&stdio, &[]);
    assert_eq!(code, 0, "{stderr}");
    let config = mcp_progress_bridge::config::Config::from_toml(
        &stdio,
        Path::new("bridge.toml"),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(
        config.upstreams[0].env["API_KEY"], "s3cret",
        "read, without the newline"
    );
    let (code, _, stderr) = check_config(
        upstream,
        &[("UP_URL", "http://up.example/mcp"), ("UP_AUTH", "Bearer x")],
    );
    assert_eq!(code, 0, "{stderr}");
}
