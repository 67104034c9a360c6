//! Micro-benchmarks of the per-event work on the hot path, for repeatable comparisons
//! (`cargo bench --bench store`; under `valgrind --tool=callgrind` for instruction counts).
//! The end-to-end figures come from the `bench` binary (see BENCHMARKS.md).

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use mcp_progress_bridge::{
    events::{Broker, StoredEvent},
    model::{Channel, EventBody, EventKind, JobId, NewJob, ProgressUpdate, wire::render_job_event},
    store::MemoryStore,
};

fn progress(p: f64) -> EventBody {
    EventBody::Progress(ProgressUpdate {
        progress: p,
        total: Some(1e6),
        message: Some("sent_at_us=1795972361522123".into()),
    })
}

fn new_job() -> NewJob {
    NewJob {
        id: JobId::random(),
        tool: "up__bench_progress".into(),
        upstream: "up".into(),
        upstream_tool: "bench_progress".into(),
        correlation_id: None,
        owner: "bench".into(),
        principal: None,
    }
}

/// Rendering one progress event: its JSON and its SSE frame, done once per event.
fn render(c: &mut Criterion) {
    let id = JobId::random();
    let body = progress(42.0);
    c.bench_function("render progress event", |b| {
        b.iter(|| {
            let data = render_job_event(id, 42, 1_795_972_361_522, &body);
            StoredEvent::render(42, EventKind::Progress, data, false)
        })
    });
}

/// Appending a progress event to the memory store: sequence, snapshot, history, live ring.
fn append(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for readers in [0usize, 1, 100] {
        let store = MemoryStore::new(1000, 3600);
        let job = rt
            .block_on(store.create_job(new_job()))
            .expect("job")
            .job_id;
        // Readers that keep up: each drains its live stream after every append.
        let mut lives: Vec<_> = (0..readers)
            .map(|_| {
                rt.block_on(store.open(&Channel::Job(job), None))
                    .expect("open")
                    .expect("job exists")
                    .live
            })
            .collect();
        let mut p = 0.0;
        c.bench_function(&format!("append progress, {readers} live readers"), |b| {
            b.iter_batched(
                || {
                    p += 1.0;
                    progress(p)
                },
                |body| {
                    rt.block_on(async {
                        store.append(job, body).await.expect("append");
                        for live in lives.iter_mut() {
                            live.next().await;
                        }
                    })
                },
                BatchSize::SmallInput,
            )
        });
    }
}

criterion_group!(benches, render, append);
criterion_main!(benches);
