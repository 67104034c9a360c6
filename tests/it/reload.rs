//! SIGHUP re-reads the config: static tokens, admins and policies change for the next request
//! without a restart; a file with a problem, or one that would open the bridge, is refused and
//! the running config stays; changed keys that wait for a restart are named in the log.

use std::path::Path;

use crate::common::*;

const ALICE: &str = "alice-reload-token-0123456789abcd";
const BOB: &str = "bob-reload-token-0123456789abcdef";

fn config_with(auth: &str, limits: &str) -> String {
    format!("{SERVER_ON_PORT_0}\n[auth]\njob_secret = \"{TEST_JOB_SECRET}\"\n{auth}\n{limits}\n")
}

fn tokens(entries: &[(&str, &str)]) -> String {
    let list: Vec<String> = entries
        .iter()
        .map(|(name, token)| format!("{{ name = \"{name}\", token = \"{token}\" }}"))
        .collect();
    format!("mcp_tokens = [{}]", list.join(", "))
}

/// `GET /upstreams` with `token`'s bearer: 200 for a caller the bridge knows, 401 otherwise.
async fn status_for(bridge: &BridgeProcess, token: &str) -> u16 {
    let request = bridge
        .http()
        .get(format!("{}/upstreams", bridge.base()))
        .bearer_auth(token);
    within("GET /upstreams", request.send())
        .await
        .expect("GET /upstreams")
        .status()
        .as_u16()
}

async fn reloads(bridge: &BridgeProcess, token: &str, result: &str) -> u64 {
    let request = bridge
        .http()
        .get(format!("{}/metrics", bridge.base()))
        .bearer_auth(token);
    let text = within("GET /metrics", async { request.send().await?.text().await })
        .await
        .expect("GET /metrics");
    let series = format!("bridge_config_reloads_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

fn rewrite(path: &Path, text: &str) {
    std::fs::write(path, text).expect("rewrite the config");
}

#[tokio::test]
async fn sighup_swaps_the_static_tokens_and_refuses_a_config_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reload.toml");
    let first = config_with(&tokens(&[("alice", ALICE)]), "");
    let bridge = BridgeProcess::start(Path::new(BIN), Some(dir.path()), "reload", &first, &[])
        .await
        .unwrap_or_else(|e| panic!("the bridge did not start: {e}"));
    assert_eq!(status_for(&bridge, ALICE).await, 200);
    assert_eq!(status_for(&bridge, BOB).await, 401);

    // Bob replaces alice; a limit changes too, which waits for a restart.
    let second = config_with(&tokens(&[("bob", BOB)]), "[limits]\nmax_sessions = 100\n");
    rewrite(&path, &second);
    bridge.signal(libc::SIGHUP);
    eventually("bob's token is accepted after SIGHUP", || async {
        status_for(&bridge, BOB).await == 200
    })
    .await;
    assert_eq!(
        status_for(&bridge, ALICE).await,
        401,
        "alice's token is gone"
    );
    assert_eq!(reloads(&bridge, BOB, "applied").await, 1);
    let log = bridge.log();
    assert!(
        log.contains("take effect only after a restart") && log.contains("limits"),
        "the log names the key that waits for a restart: {}",
        bridge.log_tail()
    );

    // A file that does not parse: refused, bob still in.
    rewrite(&path, &format!("{second}\n[auth.broken\n"));
    bridge.signal(libc::SIGHUP);
    eventually("the broken file's reload is refused", || async {
        reloads(&bridge, BOB, "refused").await == 1
    })
    .await;
    assert_eq!(status_for(&bridge, BOB).await, 200);

    // No credential at all would open the bridge: refused, it still authenticates.
    rewrite(&path, &config_with("", ""));
    bridge.signal(libc::SIGHUP);
    eventually("the opening reload is refused", || async {
        reloads(&bridge, BOB, "refused").await == 2
    })
    .await;
    assert_eq!(status_for(&bridge, BOB).await, 200);
    assert_eq!(
        status_for(&bridge, "no-such-token-0123456789abcdef").await,
        401
    );
    assert!(
        bridge.log().contains("needs a restart"),
        "the refusal says why: {}",
        bridge.log_tail()
    );
    assert_eq!(reloads(&bridge, BOB, "applied").await, 1);
}
