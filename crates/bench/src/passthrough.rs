//! Pass-through: a tiny tool (`echo`) called in sync mode through the bridge, against the
//! same call straight to the upstream (the floor) and through the two peer gateways users
//! pick today, all fronting the same stdio demo tools. Calls go round-robin over the
//! targets, one at a time, so every target sees the same machine conditions.

use serde_json::json;

use crate::{
    Ctx, Demo,
    mcp::{self, BenchClient, Client},
    peers, proc,
    report::Row,
    stats::{Samples, ms, ratio},
};

const SCENARIO: &str = "pass-through (echo, sync)";
const DIRECT_HTTP: &str = "direct over HTTP";

struct Target {
    name: String,
    client: Client,
    tool: &'static str,
    samples: Samples,
    /// A peer that failed during the run: reported, not fatal (it is not our code).
    failed: Option<String>,
}

impl Target {
    fn new(name: &str, client: Client, tool: &'static str) -> Self {
        Self {
            name: name.into(),
            client,
            tool,
            samples: Samples::default(),
            failed: None,
        }
    }
}

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    let bridge = proc::start_bridge(
        &ctx.bin,
        &ctx.dir,
        "passthrough",
        &crate::stdio_upstream_config(&ctx.bin, "sync"),
    )
    .await
    .map_err(|e| e.to_string())?;
    let demo = Demo::start().await?;
    let mut targets = vec![
        Target::new(
            "direct",
            mcp::connect_stdio(&ctx.bin, &["demo-tools"], BenchClient::default()).await?,
            "echo",
        ),
        Target::new(
            "bridge",
            mcp::connect_http(&bridge.mcp_url(), BenchClient::default()).await?,
            "demo__echo",
        ),
        // What one Streamable HTTP hop costs by itself: the same tools served by rmcp over
        // HTTP in this process. The bridge adds such a hop to a stdio upstream.
        Target::new(
            DIRECT_HTTP,
            mcp::connect_http(&demo.url, BenchClient::default()).await?,
            "echo",
        ),
    ];
    let (mut rows, helpers) = add_peers(ctx, &mut targets).await;
    let result = measure(ctx, &mut targets).await;
    if result.is_ok() {
        let skipped = std::mem::take(&mut rows);
        rows = summarise(&targets);
        rows.extend(skipped);
    }
    for t in targets {
        let _ = t.client.cancel().await;
    }
    for h in helpers {
        h.stop().await;
    }
    bridge.stop().await;
    result.map(|()| rows)
}

/// Start the peer gateways and add them as targets; a peer that cannot start or answer is a
/// `skipped` row, not a failure (it is not our code). Returns those rows and the processes.
async fn add_peers(ctx: &Ctx, targets: &mut Vec<Target>) -> (Vec<Row>, Vec<proc::Helper>) {
    let mut rows = Vec::new();
    let mut helpers = Vec::new();
    if ctx.no_peers {
        rows.push(Row::skipped(SCENARIO, "peers left out (--no-peers)"));
        return (rows, helpers);
    }
    for name in ["supergateway", "mcp-proxy"] {
        let peer = match start_peer(ctx, name).await {
            Ok(peer) => peer,
            Err(e) => {
                rows.push(Row::skipped(SCENARIO, format!("{name}: {e}")));
                continue;
            }
        };
        match mcp::connect_http(&peer.url, BenchClient::default()).await {
            Ok(client) => targets.push(Target::new(name, client, "echo")),
            Err(e) => rows.push(Row::skipped(SCENARIO, format!("{name}: {e}"))),
        }
        helpers.push(peer.helper);
    }
    (rows, helpers)
}

/// Rows: each target's p50/p99, the bridge's added latency over the floor, bridge/peer ratios.
fn summarise(targets: &[Target]) -> Vec<Row> {
    let get = |name: &str| targets.iter().find(|t| t.name == name);
    let (Some(direct), Some(bridge)) = (get("direct"), get("bridge")) else {
        return Vec::new();
    };
    let (Some(d), Some(b)) = (direct.samples.summary(), bridge.samples.summary()) else {
        return vec![Row::new(SCENARIO, "FAILED", "no samples")];
    };
    let mut rows = vec![
        Row::new(SCENARIO, "call p50", ms(b.p50)).vs("direct", ms(d.p50), ratio(b.p50, d.p50)),
        Row::new(SCENARIO, "call p99", ms(b.p99)).vs("direct", ms(d.p99), ratio(b.p99, d.p99)),
        Row::new(SCENARIO, "added p50", ms(b.p50.saturating_sub(d.p50)))
            .target("≤ 0.300 ms", b.p50.saturating_sub(d.p50) <= 300),
        Row::new(SCENARIO, "added p99", ms(b.p99.saturating_sub(d.p99))),
    ];
    for peer in targets
        .iter()
        .filter(|t| t.name != "direct" && t.name != "bridge")
    {
        // The HTTP floor is ours, not a peer: it goes first and is never "skipped".
        match &peer.failed {
            Some(why) => rows.push(Row::skipped(SCENARIO, format!("{}: {why}", peer.name))),
            None => {
                if let Some(p) = peer.samples.summary() {
                    rows.push(Row::new(SCENARIO, "call p50", ms(b.p50)).vs(
                        &peer.name,
                        ms(p.p50),
                        ratio(b.p50, p.p50),
                    ));
                    rows.push(Row::new(SCENARIO, "call p99", ms(b.p99)).vs(
                        &peer.name,
                        ms(p.p99),
                        ratio(b.p99, p.p99),
                    ));
                }
            }
        }
    }
    rows.push(Row::new(SCENARIO, "calls timed", b.count.to_string()).vs(
        "each target",
        d.count.to_string(),
        "",
    ));
    rows
}

async fn start_peer(ctx: &Ctx, name: &str) -> Result<peers::Peer, String> {
    let log = ctx.dir.join(format!("{name}.log"));
    match name {
        "supergateway" => {
            let bin = peers::install_supergateway(&ctx.peers_dir).await?;
            peers::start_supergateway(&bin, &ctx.bin, &log).await
        }
        _ => {
            let bin = peers::install_mcp_proxy(&ctx.peers_dir).await?;
            peers::start_mcp_proxy(&bin, &ctx.bin, &log).await
        }
    }
}

/// Blocks of calls per target, the targets taking turns, so every target sees the same
/// machine conditions over the run, while a block is not disturbed by what the previous
/// target still does after its answer (a peer's runtime tidying up on the shared cores).
async fn measure(ctx: &Ctx, targets: &mut [Target]) -> Result<(), String> {
    let (rounds, block) = ctx.pick((5, 20), (20, 100));
    // The first block of every target is a warm-up: not timed.
    for round in 0..=rounds {
        for t in targets.iter_mut() {
            for _ in 0..block {
                if t.failed.is_some() {
                    break;
                }
                let started = std::time::Instant::now();
                let result = mcp::call(&t.client, t.tool, json!({ "text": "ping" })).await;
                let us = started.elapsed().as_micros() as u64;
                let error = match result {
                    Ok(r) if mcp::first_text(&r) == "ping" => None,
                    Ok(r) => Some(format!("echo answered {:?}", mcp::first_text(&r))),
                    Err(e) => Some(e),
                };
                if let Some(error) = error {
                    if t.name == "direct" || t.name == "bridge" || t.name == DIRECT_HTTP {
                        return Err(format!("{}: {error}", t.name));
                    }
                    t.failed = Some(error);
                    break;
                }
                if round > 0 {
                    t.samples.push(us);
                }
            }
        }
    }
    Ok(())
}
