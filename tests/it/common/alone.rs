//! A test that reads or changes what belongs to the whole process (its resident memory, its
//! environment variables) runs in a process of its own: this test binary again, told to run
//! that one test and nothing else. The other tests share one process and run side by side.

use std::process::Command;

/// Set in the child process: the name of the test it runs alone.
const ALONE: &str = "BRIDGE_TEST_ALONE";

/// Whether the caller's body should run here: true in the process made for the test. Anywhere
/// else it runs this binary again on the test `name` of `module` (pass `module_path!()`), with
/// `env` added to its environment, shows its output, fails if it failed, and returns false:
/// the caller then returns.
pub fn in_own_process(module: &str, name: &str, env: &[(&str, &str)]) -> bool {
    // The test's name in this binary: its path without the crate's name.
    let module = module.split_once("::").map_or("", |(_, rest)| rest);
    let test = format!("{module}::{name}");
    if std::env::var_os(ALONE).is_some_and(|alone| alone == test.as_str()) {
        return true;
    }
    let output = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([&test, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE, &test)
        .envs(env.iter().copied())
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test}, alone in its process, did not pass ({}; its output is above)",
        output.status
    );
    false
}
