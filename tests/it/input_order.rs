//! What the job's channel says of an answer is recorded before the tool has the answer: a tool
//! may end its job as soon as it has it, and nothing recorded after a job's terminal event is
//! kept. `tests/it/input.rs` lost `input_answered` that way now and then under load (the answer
//! path recorded it after handing the answer over, and the demo tool answered at once).
//!
//! The store is the memory store behind a wrapper (`common::FaultyStore`) that makes writing
//! an answer's events slow (as a loaded machine or a slow Redis may), so the old order loses
//! them every run; the tool is played by the test, which ends the job the moment `Jobs::ask`
//! returns.

use std::{sync::Arc, time::Duration};

use crate::common::*;
use mcp_progress_bridge::{
    config::JobsConfig,
    jobs::{InputError, Jobs},
    metrics::Metrics,
    model::{Channel, EventBody, EventKind, InputAction, InputAnswer, JobId, JobStatus, NewJob},
    shutdown::{Shutdown, Stage},
    store::Store,
};
use serde_json::json;

/// How long writing an `input_answered` or `log` event takes here.
const SLOW_WRITE: Duration = Duration::from_millis(300);

/// Jobs on the slow store, and a running job of theirs.
async fn jobs_with_a_job() -> (Jobs, Arc<dyn Store>, JobId, Shutdown) {
    let slow = FaultyStore::new();
    slow.slow_appends(&[EventKind::InputAnswered, EventKind::Log], SLOW_WRITE);
    let store: Arc<dyn Store> = slow;
    let shutdown = Shutdown::new();
    let jobs = Jobs::new(
        store.clone(),
        JobsConfig::default(),
        "replica-test".into(),
        Arc::new(Metrics::new()),
        shutdown.tasks(Stage::Jobs),
    );
    let id = JobId::random();
    store
        .create_job(NewJob {
            id,
            tool: "demo__ask".into(),
            upstream: "demo".into(),
            upstream_tool: "ask".into(),
            correlation_id: None,
            owner: jobs.replica().to_string(),
            principal: None,
        })
        .await
        .unwrap();
    (jobs, store, id, shutdown)
}

/// The tool: ask, and end the job the moment the answer is in.
fn ask_then_end(
    jobs: &Jobs,
    store: &Arc<dyn Store>,
    id: JobId,
) -> tokio::task::JoinHandle<InputAnswer> {
    let (jobs, store) = (jobs.clone(), store.clone());
    tokio::spawn(async move {
        let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}},
            "required": ["answer"]});
        let answer = jobs.inputs().ask(id, "Port?".into(), schema).await;
        let result = json!({"content": [{"type": "text", "text": "done"}]});
        store
            .append(id, EventBody::Completed { result })
            .await
            .unwrap();
        answer
    })
}

async fn asked(jobs: &Jobs, id: JobId) {
    eventually("the question waits", || async {
        let snapshot = jobs.snapshot(id).await.unwrap().unwrap();
        snapshot.status == JobStatus::InputRequired
    })
    .await;
}

/// The kinds of the job's events, from the start of its history.
async fn kinds(store: &Arc<dyn Store>, id: JobId) -> Vec<EventKind> {
    let replay = store.replay(&Channel::Job(id), 0).await.unwrap();
    replay.events.iter().map(|e| e.kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_answered_is_recorded_before_the_tool_has_the_answer() {
    let (jobs, store, id, _shutdown) = jobs_with_a_job().await;
    let tool = ask_then_end(&jobs, &store, id);
    asked(&jobs, id).await;
    let answer = InputAnswer {
        action: InputAction::Accept,
        content: Some(json!({"answer": "8080"})),
        key: None,
    };
    within("the answer", jobs.inputs().answer(id, answer, "test"))
        .await
        .expect("taken");
    let given = within("the tool", tool).await.unwrap();
    assert_eq!(given.action, InputAction::Accept);
    assert_eq!(
        kinds(&store, id).await,
        [
            EventKind::InputRequired,
            EventKind::InputAnswered,
            EventKind::Completed
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_note_on_an_unfit_answer_is_recorded_before_the_tool_has_the_decline() {
    let (jobs, store, id, _shutdown) = jobs_with_a_job().await;
    let tool = ask_then_end(&jobs, &store, id);
    asked(&jobs, id).await;
    let key = jobs.snapshot(id).await.unwrap().unwrap().input_requests[0]
        .key
        .clone();
    let why = InputError::TooLarge {
        size: 100_000,
        limit: 65_536,
    };
    within(
        "the decline",
        jobs.inputs().decline_unfit(id, &key, &why, "test"),
    )
    .await
    .expect("declined");
    let given = within("the tool", tool).await.unwrap();
    assert_eq!(given.action, InputAction::Decline);
    assert_eq!(
        kinds(&store, id).await,
        [
            EventKind::InputRequired,
            EventKind::InputAnswered,
            EventKind::Log,
            EventKind::Completed
        ]
    );
}
