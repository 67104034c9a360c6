//! What the tests need from outside Rust (a Python with the MCP SDK, node, Chromium): finding
//! it, skipping without it (or failing, under `BRIDGE_TEST_STRICT=1`, as CI runs), and running
//! such a program to its end with its output shown.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

/// Whether CI asked for every prerequisite to be present (`BRIDGE_TEST_STRICT=1`).
pub fn strict() -> bool {
    std::env::var("BRIDGE_TEST_STRICT").is_ok_and(|v| v == "1")
}

/// A test that needs something outside Rust (node, Chromium, a Python venv) calls this when it
/// is missing: it prints why the test is skipped and returns, unless `BRIDGE_TEST_STRICT=1`,
/// where a missing prerequisite is a failure.
pub fn skip_or_fail(test: &str, why: &str) {
    if strict() {
        panic!("{test}: {why} (BRIDGE_TEST_STRICT=1: prerequisites must be present; run .ci/run)");
    }
    // Straight to the process's stderr: `eprintln!` would be captured, and the reason lost,
    // for a test that passes by skipping.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (.ci/run installs it)"
    );
}

/// Skip `test` with a printed reason, or fail it in strict mode (see [`skip_or_fail`]).
pub fn skip<T>(test: &str, reason: &str) -> Option<T> {
    skip_or_fail(test, reason);
    None
}

/// Whether a prerequisite is present; when it is not, the test is skipped with the reason
/// printed, or, under `BRIDGE_TEST_STRICT=1`, fails (see [`skip_or_fail`]).
pub fn prerequisite(present: bool, what: &str) -> bool {
    if !present {
        skip_or_fail(std::thread::current().name().unwrap_or("test"), what);
    }
    present
}

/// A Python 3 to run test fixtures with (`BRIDGE_TEST_PYTHON`, else `python3`), or `None`
/// after saying why the caller skips; with `BRIDGE_TEST_STRICT=1` a missing one fails.
pub fn python() -> Option<String> {
    let python = std::env::var("BRIDGE_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let works = std::process::Command::new(&python)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(python);
    }
    let why = format!("{python} does not run: install Python 3 or set BRIDGE_TEST_PYTHON");
    if strict() {
        panic!("{why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// The Python interpreter of a venv that has the official MCP SDK: `BRIDGE_TEST_PYTHON`, or
/// the repository's `.venv` if it has one.
pub fn python_with_mcp() -> Option<PathBuf> {
    let candidate = std::env::var_os("BRIDGE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv/bin/python"));
    let ok = std::process::Command::new(&candidate)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(candidate)
}

/// [`python_with_mcp`], or `None` once the test is skipped for want of it (failed, under
/// `BRIDGE_TEST_STRICT=1`: see [`prerequisite`]).
pub fn python_with_mcp_or_skip() -> Option<PathBuf> {
    let python = python_with_mcp();
    prerequisite(
        python.is_some(),
        "a Python with the `mcp` package (BRIDGE_TEST_PYTHON or .venv)",
    );
    python
}

/// Run the official Python SDK client `tests/interop/<script>` with `python` against the
/// bridge's `mcp_url`; the test fails, showing its output, unless it ends well after "all
/// checks passed".
pub async fn run_python_client(python: &Path, script: &str, mcp_url: &str) {
    let script = repo_root().join("tests/interop").join(script);
    // The SDK client takes 16-20 s on a machine at load 10-13: a generous limit, not `within`.
    let mut command = tokio::process::Command::new(python);
    command.arg(script).arg(mcp_url);
    let output = run_to_end(command, Duration::from_secs(120)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "the Python SDK client failed:\n{stdout}\n{stderr}"
    );
}

/// `node`, if it is on PATH and answers.
pub fn node() -> Option<PathBuf> {
    let ok = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| "node".into())
}

/// The repository root (where Cargo.toml is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The target directory (`target/` or CARGO_TARGET_DIR): where tests leave files for people.
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .to_path_buf()
}

/// Run a command to its end (bounded by `limit`) from an async test, with its output captured;
/// the output is printed so a failing test shows it.
pub async fn run_to_end(
    mut command: tokio::process::Command,
    limit: Duration,
) -> std::process::Output {
    command.kill_on_drop(true);
    let output = tokio::time::timeout(limit, command.output())
        .await
        .unwrap_or_else(|_| panic!("{command:?} did not finish within {limit:?}"))
        .unwrap_or_else(|e| panic!("{command:?} could not start: {e}"));
    println!(
        "--- {:?} exited {:?}\n--- stdout\n{}\n--- stderr\n{}",
        command.as_std().get_program(),
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The entry point of npm's `@modelcontextprotocol/server-everything` (installed by `.ci/run`
/// into tests/interop/node_modules), if it and node are there.
pub fn server_everything() -> Option<PathBuf> {
    let entry = repo_root()
        .join("tests/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    (node().is_some() && entry.exists()).then_some(entry)
}

/// The Python interpreter of a venv with the MCP Python SDK 1.x (`BRIDGE_TEST_PYTHON_MCP1`, or
/// the repository's `.venv-mcp1`; `.ci/run` makes it from tests/interop/requirements-mcp1.txt).
pub fn python_with_mcp1() -> Option<PathBuf> {
    let candidate = std::env::var_os("BRIDGE_TEST_PYTHON_MCP1")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv-mcp1/bin/python"));
    let ok = std::process::Command::new(&candidate)
        .args([
            "-c",
            "import importlib.metadata as m, sys; sys.exit(m.version('mcp').split('.')[0] != '1')",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(candidate)
}

/// The Python interpreter of a venv that can `import` every one of `modules`: the one named by
/// the environment variable `env`, or the repository's `venv` (`.ci/run` makes both).
pub fn python_in_venv(env: &str, venv: &str, modules: &[&str]) -> Option<PathBuf> {
    let candidate = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(venv).join("bin/python"));
    let ok = std::process::Command::new(&candidate)
        .args(["-c", &format!("import {}", modules.join(", "))])
        .output()
        .is_ok_and(|o| o.status.success());
    prerequisite(
        ok,
        &format!(
            "a Python with {} ({env} or {venv}; .ci/run makes it)",
            modules.join(", ")
        ),
    );
    ok.then_some(candidate)
}
