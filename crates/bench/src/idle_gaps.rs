//! POSTs through nginx after idle gaps (issue 27 item 3): a proxy sends a request on a kept-alive
//! connection to the bridge, and if the bridge is closing that connection at that moment the
//! proxy answers 502 (nginx does not retry a POST). The rule that prevents it: the bridge keeps
//! an idle connection longer (`server.keep_alive_idle_secs`, 75 s) than the proxy (nginx's
//! upstream `keepalive_timeout`, 60 s in deploy/nginx/nginx.conf). Three clients POST
//! `initialize` through nginx after gaps on both sides of the proxy's idle time for 3 minutes
//! (quick mode: both idle times scaled down to 2 s and 3 s, for 15 s); any answer but 200
//! fails the run. On loopback the race itself does not show: with the rule reversed (bridge
//! 1 s, nginx 3 s, gaps at 1 s) 50 of 50 POSTs passed, as nginx sees the bridge's FIN before it
//! reuses the connection; the run shows that the shipped settings serve every POST.

use std::time::{Duration, Instant};

use crate::{Ctx, nginx::Nginx, proc, report::Row};

const SCENARIO: &str = "POSTs through nginx after idle gaps";
const CLIENTS: usize = 3;

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    if !Nginx::installed() {
        return Ok(vec![Row::skipped(SCENARIO, "nginx is not installed")]);
    }
    // (nginx's upstream idle time, the bridge's, the gaps between one client's POSTs, how long)
    let (proxy_idle, bridge_idle, gaps, length) = ctx.pick(
        (2, 3, vec![0.5, 1.9, 2.1, 2.9, 3.1, 1.0], 15),
        (60, 75, vec![5.0, 30.0, 59.0, 61.0, 45.0, 20.0], 180),
    );
    let listen = std::net::SocketAddr::from((
        [127, 0, 0, 1],
        proc::free_port().map_err(|e| e.to_string())?,
    ));
    let idle = (
        "BRIDGE__SERVER__KEEP_ALIVE_IDLE_SECS",
        bridge_idle.to_string(),
    );
    let bridge = proc::start_bridge_on_with_env(
        &ctx.bin,
        &ctx.dir,
        "idle-gaps",
        listen,
        &crate::stdio_upstream_config(&ctx.bin, "async"),
        &[(idle.0, idle.1.as_str())],
    )
    .await
    .map_err(|e| e.to_string())?;
    let nginx =
        Nginx::start_with_idle(&ctx.dir, &[listen], Duration::from_secs(proxy_idle)).await?;
    let url = format!("http://{}/mcp", nginx.addr);
    let until = Instant::now() + Duration::from_secs(length);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let mut schedule = gaps.clone();
            schedule.rotate_left(i * 2 % gaps.len());
            tokio::spawn(post_after_gaps(url.clone(), schedule, until))
        })
        .collect();
    let mut tally = Tally::default();
    for client in clients {
        let t = client.await.map_err(|e| e.to_string())?;
        tally.ok += t.ok;
        tally.bad.extend(t.bad);
    }
    nginx.stop().await;
    bridge.stop().await;
    let setting = format!("nginx idle {proxy_idle} s, bridge idle {bridge_idle} s, {length} s");
    if !tally.bad.is_empty() {
        return Err(format!(
            "{setting}: {} of {} POSTs failed: {:?}",
            tally.bad.len(),
            tally.ok + tally.bad.len(),
            tally.bad
        ));
    }
    Ok(vec![Row::new(
        SCENARIO,
        &format!("{setting}: POSTs answered 200 / other"),
        format!("{} / 0", tally.ok),
    )])
}

#[derive(Default)]
struct Tally {
    ok: usize,
    /// What each POST that was not answered 200 got: a status, or the client's error.
    bad: Vec<String>,
}

/// POST `initialize` to `url`, waiting each gap of `schedule` in turn before the next, until
/// `until`. A client of its own: its connection to nginx is kept alive across the gaps.
async fn post_after_gaps(url: String, schedule: Vec<f64>, until: Instant) -> Tally {
    let http = reqwest::Client::new();
    let mut tally = Tally::default();
    for gap in schedule.iter().cycle() {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"idle-gaps","version":"1"}}}"#;
        let answer = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .send()
            .await;
        match answer {
            Ok(response) if response.status() == 200 => tally.ok += 1,
            Ok(response) => tally
                .bad
                .push(format!("HTTP {}", response.status().as_u16())),
            Err(e) => tally.bad.push(format!("client error: {e}")),
        }
        let next = Instant::now() + Duration::from_secs_f64(*gap);
        if next >= until {
            break;
        }
        tokio::time::sleep_until(next.into()).await;
    }
    tally
}
