//! Rolling restart: three replicas on one Redis behind nginx, jobs of two upstreams running,
//! and each replica restarted in turn (SIGTERM, its drain, started again on its address) while
//! they run. The durable upstream runs each call as an upstream task (task_server.rs): a
//! draining replica hands those jobs over. The stdio demo tools die with their replica, so
//! their jobs are drained, not handed over; they are a third as long, so that the rollout
//! (whose first drain waits for them) ends while the durable jobs still run. Every job has
//! readers through nginx that come back with `Last-Event-ID` (resume.rs). Reported: jobs
//! completed / failed / cancelled, events lost and duplicated on the `id:` line, upstream steps
//! no event carried, the longest gap, how long the rollout took. Fails if a job does not
//! complete or a reader misses or repeats an event of the line (missed steps are reported).

use std::{net::SocketAddr, sync::Arc, time::Duration};

use serde_json::json;
use tokio::{sync::Notify, task::JoinSet, time::Instant};

use crate::{
    Ctx,
    mcp::{self, BenchClient},
    nginx::Nginx,
    proc::{self, BridgeProcess},
    report::Row,
    resume::{self, Followed},
    task_server::TaskServer,
};

const REPLICAS: usize = 3;
/// Longest one replica may take to drain and exit: its longest stdio job, and then some.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

/// How much load, and how long each job runs.
#[derive(Clone, Copy)]
struct Size {
    durable: usize,
    stdio: usize,
    readers_per_job: usize,
    /// Stages of a durable job, `step_ms` apart; a stdio job has a third as many.
    steps: u64,
    step_ms: u64,
}

impl Size {
    fn of(ctx: &Ctx) -> Self {
        Self {
            durable: ctx.pick(4, 90),
            stdio: ctx.pick(2, 10),
            readers_per_job: 2,
            steps: ctx.pick(24, 60),
            step_ms: ctx.pick(500, 1_000),
        }
    }

    fn job_length(self) -> Duration {
        Duration::from_millis(self.steps * self.step_ms)
    }

    fn scenario(self) -> String {
        format!(
            "rolling restart, {REPLICAS} replicas (Redis) behind nginx, {} jobs ({} durable of {:.0} s, {} stdio of {:.0} s), {} readers",
            self.durable + self.stdio,
            self.durable,
            self.job_length().as_secs_f64(),
            self.stdio,
            self.job_length().as_secs_f64() / 3.0,
            (self.durable + self.stdio) * self.readers_per_job
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Durable,
    Stdio,
}

/// A job started, and the paths (with its read token) to follow it by.
struct Job {
    kind: Kind,
    events: String,
    status: String,
}

/// One replica's turn: how long its drain took (SIGTERM to exit), and until it was back.
struct Turn {
    drained: Duration,
    back: Duration,
}

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    let size = Size::of(ctx);
    let missing = if Nginx::installed() {
        TaskServer::missing()
    } else {
        Some("no /usr/sbin/nginx (apt-get install nginx)".into())
    };
    if let Some(why) = missing {
        return Ok(vec![Row::skipped(&size.scenario(), why)]);
    }
    let store = match crate::redis::store_config().await {
        Ok(store) => store,
        Err(why) => return Ok(vec![Row::skipped(&size.scenario(), why)]),
    };
    let upstream = TaskServer::start(&ctx.dir).await?;
    let config = format!("{store}{}", upstreams(&upstream.url, &ctx.bin));
    let result = with_replicas(ctx, size, &config).await;
    upstream.stop().await;
    result
}

/// The `[jobs]` section and the two upstreams: `ts` (durable) and `demo` (stdio).
fn upstreams(task_url: &str, bin: &std::path::Path) -> String {
    format!(
        "[jobs]\nmode = \"async\"\n\n\
         [[upstreams]]\nname = \"ts\"\ntransport = \"http\"\nurl = \"{task_url}\"\n\n\
         [[upstreams]]\nname = \"demo\"\ntransport = \"stdio\"\ncommand = {:?}\nargs = [\"demo-tools\"]\n",
        bin.display().to_string()
    )
}

async fn with_replicas(ctx: &Ctx, size: Size, config: &str) -> Result<Vec<Row>, String> {
    let mut addrs = Vec::with_capacity(REPLICAS);
    for _ in 0..REPLICAS {
        let port = proc::free_port().map_err(|e| e.to_string())?;
        addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    let mut replicas = Vec::with_capacity(REPLICAS);
    for (i, addr) in addrs.iter().enumerate() {
        let name = format!("rollout-{i}-0");
        let replica = proc::start_bridge_on(&ctx.bin, &ctx.dir, &name, *addr, config).await;
        replicas.push(replica.map_err(|e| e.to_string())?);
    }
    let nginx = Nginx::start(&ctx.dir, &addrs).await?;
    let result = roll_under_load(ctx, size, config, &mut replicas, &nginx).await;
    nginx.stop().await;
    for replica in replicas {
        replica.stop().await;
    }
    result
}

/// Start the jobs and their readers, restart every replica in turn, wait for the readers.
async fn roll_under_load(
    ctx: &Ctx,
    size: Size,
    config: &str,
    replicas: &mut [BridgeProcess],
    nginx: &Nginx,
) -> Result<Vec<Row>, String> {
    let jobs = start_jobs(size, replicas).await?;
    let readers = jobs.len() * size.readers_per_job;
    let deadline = Instant::now() + size.job_length() + DRAIN_TIMEOUT * REPLICAS as u32;
    let first = Arc::new(FirstEvents::default());
    let mut following = JoinSet::new();
    for (i, job) in jobs.iter().enumerate() {
        for _ in 0..size.readers_per_job {
            let (path, first) = (job.events.clone(), first.clone());
            let addr = nginx.addr;
            following.spawn(async move {
                let seen = resume::follow(addr, &path, deadline, || first.one()).await;
                (i, seen)
            });
        }
    }
    first.wait_for(readers).await?;
    let started = Instant::now();
    let mut turns = Vec::with_capacity(REPLICAS);
    for (i, replica) in replicas.iter_mut().enumerate() {
        turns.push(restart(ctx, config, i, replica).await?);
    }
    let rollout = started.elapsed();
    let seen = collect(following, jobs.len(), size).await?;
    let statuses = final_statuses(nginx, &jobs).await?;
    judge(size, &jobs, &statuses, &seen, rollout, &turns)
}

/// What every job's readers saw. The readers get a job's length (and a minute) after the
/// rollout to reach their terminal events; one still waiting then (its job never ended) is
/// stopped and counted as such.
async fn collect(
    mut following: JoinSet<(usize, Followed)>,
    jobs: usize,
    size: Size,
) -> Result<Vec<Vec<Followed>>, String> {
    let mut seen: Vec<Vec<Followed>> = (0..jobs).map(|_| Vec::new()).collect();
    let until = Instant::now() + size.job_length() + Duration::from_secs(60);
    while let Ok(Some(joined)) = tokio::time::timeout_at(until, following.join_next()).await {
        let (i, followed) = joined.map_err(|e| format!("a reader panicked: {e}"))?;
        seen[i].push(followed);
    }
    following.abort_all();
    for readers in &mut seen {
        while readers.len() < size.readers_per_job {
            readers.push(Followed {
                error: Some("no terminal event: the job never ended".into()),
                ..Followed::default()
            });
        }
    }
    Ok(seen)
}

/// Counts the readers that have had their first event.
#[derive(Default)]
struct FirstEvents {
    count: std::sync::atomic::AtomicUsize,
    changed: Notify,
}

impl FirstEvents {
    fn one(&self) {
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.changed.notify_waiters();
    }

    /// Wait until `n` readers have had their first event (a minute at most).
    async fn wait_for(&self, n: usize) -> Result<(), String> {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if self.count.load(std::sync::atomic::Ordering::Relaxed) >= n {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .map_err(|_| format!("not all {n} readers had an event within 60 s"))
    }
}

/// Every job, spread over the replicas in turn, each called on its replica directly.
async fn start_jobs(size: Size, replicas: &[BridgeProcess]) -> Result<Vec<Job>, String> {
    let mut clients = Vec::with_capacity(replicas.len());
    for replica in replicas {
        clients.push(Arc::new(
            mcp::connect_http(&replica.mcp_url(), BenchClient::default()).await?,
        ));
    }
    let mut calls = JoinSet::new();
    for i in 0..size.durable + size.stdio {
        let client = clients[i % clients.len()].clone();
        let (kind, tool, arguments) = if i < size.durable {
            let arguments = json!({ "topic": format!("job-{i}"), "steps": size.steps, "step_ms": size.step_ms });
            (Kind::Durable, "ts__staged", arguments)
        } else {
            let arguments = json!({ "to": size.steps / 3, "delay_ms": size.step_ms });
            (Kind::Stdio, "demo__slow_count", arguments)
        };
        calls.spawn(async move {
            let handle = mcp::call(&client, tool, arguments).await?;
            let job = Job {
                kind,
                events: mcp::events_path(&handle)?,
                status: mcp::status_path(&handle)?,
            };
            Ok::<_, String>((i, job))
        });
    }
    let mut jobs: Vec<Option<Job>> = (0..calls.len()).map(|_| None).collect();
    while let Some(joined) = calls.join_next().await {
        let (i, job) = joined.map_err(|e| format!("a call panicked: {e}"))??;
        jobs[i] = Some(job);
    }
    for client in clients {
        if let Ok(client) = Arc::try_unwrap(client) {
            let _ = client.cancel().await;
        }
    }
    Ok(jobs.into_iter().flatten().collect())
}

/// SIGTERM replica `i`, wait for its drain to end, and start it again on its address.
async fn restart(
    ctx: &Ctx,
    config: &str,
    i: usize,
    replica: &mut BridgeProcess,
) -> Result<Turn, String> {
    let t = Instant::now();
    replica.terminate();
    match tokio::time::timeout(DRAIN_TIMEOUT, replica.wait()).await {
        Ok(Ok(status)) if status.success() => {}
        Ok(Ok(status)) => {
            return Err(format!(
                "replica {i} exited {status}: {}",
                replica.log_tail()
            ));
        }
        Ok(Err(e)) => return Err(format!("replica {i}: {e}")),
        Err(_) => {
            return Err(format!(
                "replica {i} did not drain in {} s",
                DRAIN_TIMEOUT.as_secs()
            ));
        }
    }
    let drained = t.elapsed();
    let name = format!("rollout-{i}-1");
    *replica = proc::start_bridge_on(&ctx.bin, &ctx.dir, &name, replica.addr, config)
        .await
        .map_err(|e| format!("replica {i} did not come back: {e}"))?;
    Ok(Turn {
        drained,
        back: t.elapsed(),
    })
}

/// Each job's `status` once every reader is done, read through nginx.
async fn final_statuses(nginx: &Nginx, jobs: &[Job]) -> Result<Vec<String>, String> {
    let http = reqwest::Client::new();
    let mut statuses = Vec::with_capacity(jobs.len());
    for job in jobs {
        let url = format!("http://{}{}", nginx.addr, job.status);
        let snapshot: serde_json::Value = http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {}: {e}", job.status))?
            .json()
            .await
            .map_err(|e| format!("GET {}: {e}", job.status))?;
        statuses.push(snapshot["status"].as_str().unwrap_or("?").to_string());
    }
    Ok(statuses)
}

/// What the jobs of one kind ended as, and what their readers saw, in sum.
#[derive(Default)]
struct Tally {
    jobs: usize,
    completed: usize,
    failed: usize,
    cancelled: usize,
    /// Not ended when the readers gave up on them.
    unfinished: usize,
    readers: usize,
    events: u64,
    lost: u64,
    duplicated: u64,
    reconnects: u64,
    longest_gap: Duration,
    /// Steps the upstream reported that a reader never got (summed over readers).
    steps_missed: u64,
    steps: u64,
    errors: Vec<String>,
}

impl Tally {
    fn of(
        kind: Kind,
        size: Size,
        jobs: &[Job],
        statuses: &[String],
        seen: &[Vec<Followed>],
    ) -> Self {
        let steps = match kind {
            Kind::Durable => size.steps,
            Kind::Stdio => size.steps / 3,
        };
        let mut t = Tally::default();
        for ((job, status), readers) in jobs.iter().zip(statuses).zip(seen) {
            if job.kind != kind {
                continue;
            }
            t.jobs += 1;
            match status.as_str() {
                "completed" => t.completed += 1,
                "failed" => t.failed += 1,
                "cancelled" => t.cancelled += 1,
                _ => t.unfinished += 1,
            }
            for r in readers {
                t.readers += 1;
                t.events += r.events;
                t.lost += r.lost;
                t.duplicated += r.duplicated;
                t.reconnects += r.reconnects;
                t.longest_gap = t.longest_gap.max(r.longest_gap);
                t.steps += steps;
                t.steps_missed += steps.saturating_sub(r.steps.len() as u64);
                match (&r.error, r.terminal.as_deref()) {
                    (Some(e), _) => t.errors.push(format!("a reader: {e}")),
                    (None, Some("completed")) => {}
                    (None, terminal) => t.errors.push(format!("a reader ended with {terminal:?}")),
                }
            }
        }
        t
    }

    fn whole(&self) -> bool {
        self.completed == self.jobs
            && self.lost == 0
            && self.duplicated == 0
            && self.errors.is_empty()
    }
}

/// The rows; an error (with the figures) if a job did not complete or a reader missed,
/// repeated or gave up on an event.
fn judge(
    size: Size,
    jobs: &[Job],
    statuses: &[String],
    seen: &[Vec<Followed>],
    rollout: Duration,
    turns: &[Turn],
) -> Result<Vec<Row>, String> {
    let scenario = size.scenario();
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for kind in [Kind::Durable, Kind::Stdio] {
        let t = Tally::of(kind, size, jobs, statuses, seen);
        rows.extend(t.rows(&scenario, kind, size.step_ms));
        if !t.whole() {
            problems.push(t.problem(kind));
        }
    }
    let per_replica: Vec<String> = turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "replica {}: drained in {:.1} s, back at {:.1} s",
                i + 1,
                t.drained.as_secs_f64(),
                t.back.as_secs_f64()
            )
        })
        .collect();
    rows.push(Row::new(
        &scenario,
        "rollout (SIGTERM, drain, start again; one replica after the other)",
        format!("{:.1} s; {}", rollout.as_secs_f64(), per_replica.join("; ")),
    ));
    if problems.is_empty() {
        Ok(rows)
    } else {
        // The figures of a failed run are worth as much as those of a good one.
        eprint!("{}", crate::report::text(&rows, true));
        Err(problems.join("; "))
    }
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Durable => "durable (upstream tasks, handed over)",
            Kind::Stdio => "stdio (drained)",
        }
    }
}

impl Tally {
    fn ended(&self) -> String {
        let mut ended = format!("{} / {} / {}", self.completed, self.failed, self.cancelled);
        if self.unfinished > 0 {
            ended.push_str(&format!(" ({} never ended)", self.unfinished));
        }
        ended
    }

    fn delivery(&self) -> String {
        format!(
            "{} / {} ({} readers, {} events, {} reconnects)",
            self.lost, self.duplicated, self.readers, self.events, self.reconnects
        )
    }

    /// The rows of one kind of job; the durable upstream's carry issue 25's targets.
    fn rows(&self, scenario: &str, kind: Kind, step_ms: u64) -> [Row; 4] {
        let label = kind.label();
        let metric = |what: &str| format!("{label}: {what}");
        let mut ended = Row::new(
            scenario,
            &metric("jobs completed / failed / cancelled"),
            self.ended(),
        );
        let mut delivery = Row::new(
            scenario,
            &metric("events lost / duplicated"),
            self.delivery(),
        );
        let steps = format!(
            "{} of {} (summed over readers)",
            self.steps_missed, self.steps
        );
        let mut steps = Row::new(
            scenario,
            &metric("upstream steps no event carried to a reader"),
            steps,
        );
        if kind == Kind::Durable {
            ended = ended.target("0 failed, 0 cancelled", self.completed == self.jobs);
            delivery = delivery.target("0 / 0", self.lost == 0 && self.duplicated == 0);
            steps = steps.target("0", self.steps_missed == 0);
        }
        let gap = format!(
            "{:.1} s (a stage every {:.1} s)",
            self.longest_gap.as_secs_f64(),
            step_ms as f64 / 1000.0
        );
        [
            ended,
            delivery,
            steps,
            Row::new(scenario, &metric("longest gap a reader saw"), gap),
        ]
    }

    fn problem(&self, kind: Kind) -> String {
        let first = self.errors.first().cloned().unwrap_or_default();
        format!(
            "{}: jobs {}, lost / duplicated {}; {} reader problems (first: {first})",
            kind.label(),
            self.ended(),
            self.delivery(),
            self.errors.len()
        )
    }
}
