//! One owner for every background task of the bridge, and the order in which they stop.
//!
//! A task is never spawned bare: it goes through the [`Tasks`] handle of its [`Stage`] (one
//! `TaskTracker` per stage, and the stage's token to stop on). [`Shutdown::stop`] ends one
//! stage: it fires the token, waits for the stage's tasks, and past a bound drops those still
//! running. The app stops the stages in order ([`Stage::ALL`]), so each stage's tasks can
//! still use what the later ones run. A [`ShutdownGuard`] fires every token when the bridge
//! is dropped without an orderly shutdown: no task outlives its owner.
//!
//! HTTP connections are tracked tasks ([`Tasks::spawn_tracked`]). Tasks that rmcp and the
//! redis crate spawn are not tracked, but each ends with one that is (a redis connection's
//! push handler carries a [`Tasks::hold`] token): docs/design/shutdown.md.

use std::{future::Future, time::Duration};

use futures::FutureExt as _;
use tokio_util::{
    future::FutureExt as _,
    sync::CancellationToken,
    task::{TaskTracker, task_tracker::TaskTrackerToken},
};

/// How long the tasks of a stage that overran its bound get to drop what they hold.
pub const DROP_WAIT: Duration = Duration::from_secs(1);

/// Groups of tasks that stop together, in the order they stop ([`Stage::ALL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The job runners, and the routing of cancel requests to them.
    Jobs,
    /// The HTTP servers (MCP sessions and SSE streams stop on this stage's token too) and the
    /// announcer of tool-list changes to MCP sessions.
    Http,
    /// The upstream supervisors, and the tasks that read a stdio child's stderr and wait for
    /// its exit.
    Upstreams,
    /// The store's upkeep: the expiry sweep; with Redis, the subscription task and the lease
    /// maintenance (which gives the lease up as it stops).
    Store,
    /// The store's connections (Redis).
    Connections,
    /// The export of traces (when they are on): flushed last, so that the spans of the jobs
    /// the shutdown ended are in it.
    Traces,
}

impl Stage {
    /// Every stage, in the order the bridge stops them.
    pub const ALL: [Stage; 6] = [
        Stage::Jobs,
        Stage::Http,
        Stage::Upstreams,
        Stage::Store,
        Stage::Connections,
        Stage::Traces,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// Spawns and tracks the tasks of one stage. A cheap handle: clone it into whatever spawns.
#[derive(Clone)]
pub struct Tasks {
    stage: Stage,
    stop: CancellationToken,
    /// Fired when the stage overran its bound: every task still running is dropped.
    abort: CancellationToken,
    tracker: TaskTracker,
}

impl Tasks {
    fn new(stage: Stage) -> Self {
        Self {
            stage,
            stop: CancellationToken::new(),
            abort: CancellationToken::new(),
            tracker: TaskTracker::new(),
        }
    }

    /// Spawn a task that ends by itself: it watches [`Tasks::stopping`] to wind down (or, like
    /// a job runner, ends with its work).
    ///
    /// The task is wrapped in named futures (`with_cancellation_token_owned`), which hold it
    /// once. `CancellationToken::run_until_cancelled_owned` is an `async fn` that calls another
    /// one, and each keeps its argument beside the future it awaits: with an `async` block
    /// around it, a spawned task held four copies of its future's state (a job's runner,
    /// 2.3 KB, took 9.6 KB a job).
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(until(&self.abort, task));
    }

    /// Spawn a task that has nothing to finish: it is dropped where it waits when the stage
    /// stops.
    pub fn spawn_until_stopped<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.spawn(until(&self.stop, task));
    }

    /// Spawn a task that its owner ends: tracked (the stage waits for it) but not dropped by
    /// the stage itself past its bound. For the many tasks of one owner that stops them
    /// through a channel of its own, and ends them at once when the owner (a task spawned with
    /// [`Tasks::spawn`]) is dropped: the HTTP connections of a listener. A task spawned with
    /// [`Tasks::spawn`] checks the stage's shared token at every wake-up, which with 10,000
    /// connections woken for every SSE event is a contended lock.
    pub fn spawn_tracked<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(task);
    }

    /// Fires when the stage stops.
    pub fn stopping(&self) -> &CancellationToken {
        &self.stop
    }

    /// Counts as a task of this stage until dropped: for work a dependency runs on a task of
    /// its own that the bridge cannot spawn (see the module doc).
    pub fn hold(&self) -> TaskTrackerToken {
        self.tracker.token()
    }
}

/// `task`, dropped where it waits once `token` fires (at its next poll).
fn until<F>(token: &CancellationToken, task: F) -> impl Future<Output = ()> + use<F>
where
    F: Future<Output = ()>,
{
    task.with_cancellation_token_owned(token.clone()).map(drop)
}

/// The owner of every background task of the bridge. Cheap to clone; stopping is the app's.
#[derive(Clone)]
pub struct Shutdown {
    stages: [Tasks; 6],
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        Self {
            stages: Stage::ALL.map(Tasks::new),
        }
    }

    /// The handle that spawns the tasks of `stage`.
    pub fn tasks(&self, stage: Stage) -> Tasks {
        self.stages[stage.index()].clone()
    }

    /// Stop `stage` and return when all its tasks have ended: fire its token, and wait. Tasks
    /// still running after `within` are dropped (with a warning: one of them did not stop on
    /// its token).
    pub async fn stop(&self, stage: Stage, within: Duration) {
        let tasks = &self.stages[stage.index()];
        tasks.stop.cancel();
        tasks.tracker.close();
        if tokio::time::timeout(within, tasks.tracker.wait())
            .await
            .is_ok()
        {
            return;
        }
        tracing::warn!(
            stage = ?tasks.stage,
            running = tasks.tracker.len(),
            ?within,
            "tasks did not stop in time; dropping them"
        );
        tasks.abort.cancel();
        if tokio::time::timeout(DROP_WAIT, tasks.tracker.wait())
            .await
            .is_err()
        {
            tracing::error!(
                stage = ?tasks.stage,
                running = tasks.tracker.len(),
                "tasks still running after they were dropped (a connection is still held)"
            );
        }
    }

    /// Fire every stage's token at once, with no order and no waiting (a bridge dropped
    /// without [`Shutdown::stop`]ping its stages).
    pub fn cancel(&self) {
        for tasks in &self.stages {
            tasks.stop.cancel();
        }
    }

    /// Fires every token when dropped (see [`Shutdown::cancel`]).
    pub fn drop_guard(&self) -> ShutdownGuard {
        ShutdownGuard(self.clone())
    }

    /// How many tasks run, across all stages (for tests and diagnostics).
    pub fn count(&self) -> TaskCount {
        TaskCount {
            trackers: self.stages.iter().map(|t| t.tracker.clone()).collect(),
            aborts: self.stages.iter().map(|t| t.abort.clone()).collect(),
        }
    }
}

/// See [`Shutdown::drop_guard`].
pub struct ShutdownGuard(Shutdown);

impl Drop for ShutdownGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// A view of the bridge's tasks that outlives the bridge.
#[derive(Clone)]
pub struct TaskCount {
    trackers: Vec<TaskTracker>,
    aborts: Vec<CancellationToken>,
}

impl TaskCount {
    /// Tasks (and holds) that have not ended yet.
    pub fn running(&self) -> usize {
        self.trackers.iter().map(TaskTracker::len).sum()
    }

    /// Whether every stage has been stopped.
    pub fn all_stopped(&self) -> bool {
        self.trackers.iter().all(TaskTracker::is_closed)
    }

    /// Whether a stage overran its bound and had its tasks dropped (cut mid-way).
    pub fn any_dropped(&self) -> bool {
        self.aborts.iter().any(CancellationToken::is_cancelled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_held_once() {
        let token = CancellationToken::new();
        let task = async {
            let state = [1u8; 4096];
            tokio::task::yield_now().await;
            std::hint::black_box(state);
        };
        let own = std::mem::size_of_val(&task);
        let wrapped = until(&token, until(&token, task));
        assert!(
            std::mem::size_of_val(&wrapped) < own + 512,
            "{} bytes to run a task of {own}",
            std::mem::size_of_val(&wrapped)
        );
    }

    #[tokio::test]
    async fn a_stage_stops_when_its_tasks_end_and_only_then() {
        let shutdown = Shutdown::new();
        let jobs = shutdown.tasks(Stage::Jobs);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        // Ends on its token, after finishing something.
        jobs.spawn({
            let stop = jobs.stopping().clone();
            async move {
                stop.cancelled().await;
                let _ = rx.await;
            }
        });
        jobs.spawn_until_stopped(std::future::pending());
        let count = shutdown.count();
        assert_eq!(count.running(), 2);
        let stopping = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { shutdown.stop(Stage::Jobs, Duration::from_secs(30)).await }
        });
        tokio::task::yield_now().await;
        assert!(
            !stopping.is_finished(),
            "waits for the task that is finishing"
        );
        tx.send(()).unwrap();
        stopping.await.unwrap();
        assert_eq!(count.running(), 0);
        assert!(!count.all_stopped(), "the other stages were not stopped");
        assert!(
            !shutdown.tasks(Stage::Http).stopping().is_cancelled(),
            "stopping one stage leaves the others running"
        );
    }

    #[tokio::test]
    async fn a_task_that_ignores_its_token_is_dropped_past_the_bound() {
        let shutdown = Shutdown::new();
        let held = shutdown.tasks(Stage::Http);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        held.spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await
        });
        assert!(!shutdown.count().any_dropped());
        shutdown.stop(Stage::Http, Duration::from_millis(50)).await;
        assert_eq!(shutdown.count().running(), 0);
        assert!(shutdown.count().any_dropped());
        assert!(rx.recv().await.is_none(), "the task's future was dropped");
    }

    #[tokio::test]
    async fn a_hold_counts_until_dropped_and_the_guard_fires_every_token() {
        let shutdown = Shutdown::new();
        let hold = shutdown.tasks(Stage::Connections).hold();
        assert_eq!(shutdown.count().running(), 1);
        drop(hold);
        assert_eq!(shutdown.count().running(), 0);
        drop(shutdown.drop_guard());
        for stage in Stage::ALL {
            assert!(shutdown.tasks(stage).stopping().is_cancelled(), "{stage:?}");
        }
    }
}
