//! What only the Redis store has, against a real Redis: a cancel request is routed to the
//! owner's replica alone, finished jobs expire by Redis TTL, and a Redis that may evict job
//! keys is refused (or only logged); `rediss://` with a private CA and an ACL user. (What both stores share is
//! `store_conformance.rs`; outages, leases and connection counts are `replicas.rs`.) Each test
//! uses its own key prefix, swept when it ends.

use std::time::Duration;

use crate::common::*;
use futures::StreamExt;
use mcp_progress_bridge::{
    events::{Broker, Bus, ChannelSnapshot, Relay, Relayed, RelayedAnswer},
    model::{AnswerVerdict, CancelAck},
    model::{
        Channel, EventBody, EventKind, InputAction, InputAnswer, JobId, NewJob, ProgressUpdate,
    },
};
use serde_json::json;

fn new_job(owner: &str) -> NewJob {
    NewJob {
        id: JobId::random(),
        tool: "demo__t".into(),
        upstream: "demo".into(),
        upstream_tool: "t".into(),
        correlation_id: None,
        owner: owner.into(),
        principal: None,
    }
}

/// An answer relayed by "test" to `owner`'s job `job`.
fn by_test(owner: &str, job: JobId, answer: RelayedAnswer) -> Relay {
    Relay {
        owner: owner.into(),
        job,
        answer,
        by: "test".into(),
        principal: None,
    }
}

fn progress(p: f64) -> EventBody {
    EventBody::Progress(ProgressUpdate {
        progress: p,
        total: None,
        message: None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_is_routed_to_the_owner_alone() {
    let Some(url) = test_redis("redis_store::cancel").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "store-cancel");
    let owner = store_replica(&url, &prefix, 100).await;
    let other = store_replica(&url, &prefix, 100).await;
    let mut requests = owner.store.cancel_requests();
    let mut elsewhere = other.store.cancel_requests();
    let job = owner
        .store
        .create_job(new_job(&owner.name))
        .await
        .unwrap()
        .job_id;
    let ack = other
        .store
        .request_cancel(job, "asked on B".into())
        .await
        .unwrap();
    assert!(matches!(ack, CancelAck::Requested(_)));
    let request = within("the owner gets the request", requests.next())
        .await
        .unwrap();
    assert_eq!(
        (request.job_id, request.reason.as_str()),
        (job, "asked on B")
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), elsewhere.next())
            .await
            .is_err(),
        "only the owner is asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_expires_by_redis_ttl() {
    let Some(url) = test_redis("redis_store::ttl").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "store-ttl");
    let a = store_replica(&url, &prefix, 100).await;
    let running = a.store.create_job(new_job(&a.name)).await.unwrap().job_id;
    let done = a.store.create_job(new_job(&a.name)).await.unwrap().job_id;
    a.store
        .append(done, EventBody::Cancelled { reason: "x".into() })
        .await
        .unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let ttl = |id: JobId, kind: &str| {
        redis::cmd("PTTL")
            .arg(format!("{prefix}:v3:{kind}:{{{id}}}"))
            .clone()
    };
    let done_ttl: i64 = ttl(done, "job").query_async(&mut conn).await.unwrap();
    let done_events_ttl: i64 = ttl(done, "job-events")
        .query_async(&mut conn)
        .await
        .unwrap();
    let running_ttl: i64 = ttl(running, "job").query_async(&mut conn).await.unwrap();
    assert!(
        (1..=60_000).contains(&done_ttl),
        "retention 60 s: {done_ttl}"
    );
    assert!((1..=60_000).contains(&done_events_ttl), "{done_events_ttl}");
    // A running job's keys expire too, should every replica be gone; its owner renews them.
    assert!(
        running_ttl > 0,
        "a running job's record has a TTL: {running_ttl}"
    );
}

/// Every key under `prefix` (SCAN).
async fn keys_under(conn: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Vec<String> {
    let (mut cursor, mut all) = (0u64, Vec::new());
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .unwrap();
        all.extend(keys);
        if next == 0 {
            return all;
        }
        cursor = next;
    }
}

/// Correlation IDs may contain `:`. In the first key scheme (`<prefix>:corr:<id>:events`),
/// correlation `T:events` had correlation `T`'s history stream for its hash: the second to
/// come failed with `WRONGTYPE` and left a job record running with no TTL. Now each ID has
/// keys of its own, and every key the bridge writes expires, running jobs' keys included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_correlation_ids_get_keys_of_their_own_and_every_key_expires() {
    let Some(url) = test_redis("redis_store::hostile_ids").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "store-keys");
    let a = store_replica(&url, &prefix, 100).await;
    let cids = [
        "T", "T:events", "T:jobs", "T:live", "events", "T:v2", "corr:T",
    ];
    let mut jobs = Vec::new();
    for cid in cids {
        let job = a
            .store
            .create_job(NewJob {
                correlation_id: Some(cid.parse().unwrap()),
                ..new_job(&a.name)
            })
            .await
            .unwrap_or_else(|e| panic!("correlation {cid}: {e}"))
            .job_id;
        a.store.append(job, progress(1.0)).await.unwrap();
        jobs.push(job);
    }
    a.store
        .append(jobs[0], EventBody::Cancelled { reason: "x".into() })
        .await
        .unwrap();
    for (cid, job) in cids.iter().zip(&jobs) {
        let channel = Channel::Correlation(cid.parse().unwrap());
        let opened = a.store.open(&channel, Some(0)).await.unwrap().unwrap();
        let ChannelSnapshot::Correlation(snapshots) = &opened.snapshot else {
            panic!("not a correlation")
        };
        let ids: Vec<JobId> = snapshots.iter().map(|s| s.job_id).collect();
        assert_eq!(ids, vec![*job], "correlation {cid} has its own job only");
        let kinds: Vec<EventKind> = opened.backlog.iter().map(|e| e.kind).collect();
        let mut expected = vec![EventKind::JobStarted, EventKind::Progress];
        if *cid == "T" {
            expected.push(EventKind::Cancelled);
        }
        assert_eq!(kinds, expected, "correlation {cid}");
    }
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys = keys_under(&mut conn, &prefix).await;
    // Per job: hash and history; per correlation: hash, history, job list; and the replica's
    // lease, running set and the replicas set.
    assert!(keys.len() >= 5 * cids.len() + 3, "{keys:?}");
    for key in &keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }
}

/// A create that fails leaves nothing behind: here a value of another type sits where the
/// correlation's history goes (a key written by something else than the bridge).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_fails_writes_nothing() {
    let Some(url) = test_redis("redis_store::create_fails").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "store-create");
    let a = store_replica(&url, &prefix, 100).await;
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}:v3:corr-events:{{taken}}"))
        .arg("not a stream")
        .query_async(&mut conn)
        .await
        .unwrap();
    let job = NewJob {
        correlation_id: Some("taken".parse().unwrap()),
        ..new_job(&a.name)
    };
    let id = job.id;
    let error = a.store.create_job(job).await.unwrap_err();
    assert!(error.to_string().contains("WRONGTYPE"), "{error}");
    assert!(a.store.snapshot(id).await.unwrap().is_none());
    let mut keys = keys_under(&mut conn, &prefix).await;
    keys.retain(|k| !k.contains(":lease:") && !k.ends_with(":replicas"));
    assert_eq!(
        keys,
        vec![format!("{prefix}:v3:corr-events:{{taken}}")],
        "nothing but the foreign key"
    );
}

/// The `id=` of the connection named `name` in `CLIENT LIST`.
async fn client_id(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Option<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .unwrap();
    list.lines()
        .find(|l| l.split(' ').any(|f| f == format!("name={name}")))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_string)
}

/// A command that gets no answer in time fails alone: the connection is not dropped and made
/// again (which would fail every other command in flight and send every reader back to
/// history). Here Redis holds every client's commands for 0.9 s (`CLIENT PAUSE`), three
/// command timeouts: the command fails, the liveness probe is answered when the pause ends,
/// and the replica goes on with the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_command_fails_alone_and_the_connection_stays() {
    let Some(redis) = PrivateRedis::start("redis_store::slow").await else {
        return;
    };
    let prefix = RedisPrefix::new(&redis.url, "store-slow");
    let a = store_replica_with(&redis.url, &prefix, 100, Duration::from_millis(300)).await;
    let job = a.store.create_job(new_job(&a.name)).await.unwrap().job_id;
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let name = format!("{prefix}:{}:cmd", a.name);
    let before = client_id(&mut conn, &name)
        .await
        .expect("the cmd connection");
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(900)
        .arg("ALL")
        .query_async(&mut conn)
        .await
        .unwrap();
    let error = a.store.snapshot(job).await.unwrap_err();
    assert!(
        error.to_string().contains("did not answer within 300 ms"),
        "{error}"
    );
    eventually("the store answers again", || async {
        a.store.snapshot(job).await.is_ok_and(|s| s.is_some())
    })
    .await;
    a.store.ping().await.unwrap();
    let after = client_id(&mut conn, &name).await;
    assert_eq!(after, Some(before), "the same connection, not a new one");
}

/// Wait until `replica`'s control channel has its subscriber (the store subscribes it once its
/// pub/sub connection is up, which may be after `ping` first answers).
async fn until_listening(url: &str, prefix: &str, replica: &str) {
    let channel = format!("{prefix}:v3:control:{{{replica}}}");
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    eventually("the control channel is subscribed", || {
        let mut conn = conn.clone();
        let channel = channel.clone();
        async move {
            let (_, count): (String, u64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut conn)
                .await
                .unwrap();
            count == 1
        }
    })
    .await;
    let _: () = redis::cmd("PING").query_async(&mut conn).await.unwrap();
}

/// An answer relayed to the job's replica: it arrives there alone with what was sent, and the
/// verdict that replica sends back is the relay's outcome. One it does not answer in time is
/// unconfirmed (and expired for the owner by then); one for a replica nobody hears is
/// `OwnerAway` at once; a control message past `jobs.max_input_bytes` plus its overhead is
/// dropped unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_answer_gets_the_owners_verdict_or_is_unconfirmed() {
    let Some(url) = test_redis("redis_store::relay").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "store-relay");
    let owner = store_replica(&url, &prefix, 100).await;
    let other = store_replica(&url, &prefix, 100).await;
    until_listening(&url, &prefix, &owner.name).await;
    until_listening(&url, &prefix, &other.name).await;
    let mut requests = owner.store.answer_requests();
    let mut elsewhere = other.store.answer_requests();
    let job = JobId::random();
    let answer = RelayedAnswer::Question(InputAnswer {
        action: InputAction::Accept,
        content: Some(serde_json::json!({"answer": 5})),
        key: Some("q1".into()),
    });

    // A verdict comes back.
    let relay = other
        .store
        .relay_answer(by_test(&owner.name, job, answer.clone()));
    let owner_side = async {
        let request = within("the owner gets the answer", requests.next())
            .await
            .unwrap();
        assert_eq!(
            (request.job_id, &request.answer, request.by.as_str()),
            (job, &answer, "test")
        );
        assert!(!request.reply.expired());
        let verdict = AnswerVerdict::Mismatch {
            field: "content.answer".into(),
            problem: "must be a string".into(),
        };
        owner
            .store
            .reply_answer(request.reply, verdict)
            .await
            .unwrap();
    };
    let (relayed, ()) = tokio::join!(relay, owner_side);
    assert_eq!(
        relayed.unwrap(),
        Relayed::Verdict(AnswerVerdict::Mismatch {
            field: "content.answer".into(),
            problem: "must be a string".into(),
        })
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), elsewhere.next())
            .await
            .is_err(),
        "only the owner gets it"
    );

    // No verdict: unconfirmed, and the owner must not take it any more.
    let relayed = other
        .store
        .relay_answer(by_test(&owner.name, job, answer.clone()))
        .await
        .unwrap();
    assert!(
        matches!(relayed, Relayed::Unconfirmed { .. }),
        "{relayed:?}"
    );
    let late = within("the unanswered request", requests.next())
        .await
        .unwrap();
    assert!(late.reply.expired(), "its sender stopped waiting");

    // Nobody listens for that replica.
    let relayed = other
        .store
        .relay_answer(by_test("replica-nobody", job, answer.clone()))
        .await
        .unwrap();
    assert_eq!(relayed, Relayed::OwnerAway);

    // Too large a control message is dropped; the one after it arrives.
    let channel = format!("{prefix}:v3:control:{{{}}}", owner.name);
    let message = |text: &str| {
        serde_json::json!({
            "answer_for": job, "answer": {"action": "accept", "content": {"answer": text}},
            "by": "raw", "reply_to": other.name, "request": 999_999,
            "expires_ms": u64::MAX / 2,
        })
        .to_string()
    };
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for text in ["x".repeat(65_536 + 4096), "small".to_string()] {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg(message(&text))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let next = within("the small message", requests.next()).await.unwrap();
    let RelayedAnswer::Question(next) = next.answer else {
        panic!("not an answer to a question: {next:?}");
    };
    assert_eq!(next.content.unwrap()["answer"], "small");

    // An answer to a sample the job's tool asked its caller for travels as one, and the
    // owner's verdict on its shape comes back whole.
    let sample = RelayedAnswer::CallerRequest {
        key: "sample-1".into(),
        value: serde_json::json!({"role": "assistant"}),
    };
    let unfit = AnswerVerdict::Unfit {
        expected: "CreateMessageResult".into(),
        method: "sampling/createMessage".into(),
        error: "missing field `model`".into(),
    };
    let relay = other
        .store
        .relay_answer(by_test(&owner.name, job, sample.clone()));
    let owner_side = async {
        let request = within("the owner gets the sample", requests.next())
            .await
            .unwrap();
        assert_eq!(request.answer, sample);
        owner
            .store
            .reply_answer(request.reply, unfit.clone())
            .await
            .unwrap();
    };
    let (relayed, ()) = tokio::join!(relay, owner_side);
    assert_eq!(relayed.unwrap(), Relayed::Verdict(unfit));
}

/// `store.redis_eviction_check`: on a Redis whose `maxmemory-policy` may evict keys with a TTL
/// (a private redis-server set to `allkeys-lru`), the refusing store stays unready and says
/// what to do; the warning one serves; once the policy is `noeviction` the refusing one
/// connects by itself, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_may_evict_job_keys_is_refused_until_its_policy_is_noeviction() {
    let Some(redis) = PrivateRedis::start("redis_store::eviction").await else {
        return;
    };
    let set_policy = |policy: &'static str| {
        let url = redis.url.clone();
        async move {
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg(policy)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    };
    set_policy("allkeys-lru").await;
    let prefix = unique_prefix("eviction");
    let warning = open_store_replica(&redis.url, &prefix, 10, Duration::from_secs(2), false, None);
    let refusing = open_store_replica(&redis.url, &prefix, 10, Duration::from_secs(2), true, None);
    eventually("the warning store serves", || async {
        warning.store.ping().await.is_ok()
    })
    .await;
    let refused = eventually("the refusing store says why", || async {
        let error = refusing.store.ping().await.err()?.to_string();
        error.contains("maxmemory-policy").then_some(error)
    })
    .await;
    for words in ["allkeys-lru", "noeviction", "store.redis_eviction_check"] {
        assert!(refused.contains(words), "{words} in: {refused}");
    }
    assert!(!refused.contains("unreachable"), "{refused}");
    let job = new_job(&refusing.name);
    assert!(
        refusing.store.create_job(job).await.is_err(),
        "no job on it"
    );
    set_policy("noeviction").await;
    eventually(
        "the refusing store connects once the policy is safe",
        || async { refusing.store.ping().await.is_ok() },
    )
    .await;
    refusing
        .store
        .create_job(new_job(&refusing.name))
        .await
        .expect("a job once the policy is noeviction");
}

/// A redis-server of the test's own serving TLS only, with a certificate of a private CA, the
/// `default` user off and an ACL user that may not run `CONFIG`. Killed when dropped.
struct TlsRedis {
    port: u16,
    dir: tempfile::TempDir,
    child: std::process::Child,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TlsRedis {
    fn start(test: &str) -> Option<Self> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        if !make_certificates(dir.path()) {
            return skip(test, "the openssl command is missing");
        }
        let port = free_port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", "0", "--bind", "127.0.0.1"])
            .args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
            .args(["--tls-cert-file", "leaf.pem", "--tls-key-file", "leaf.key"])
            .args([
                "--tls-ca-cert-file",
                "ca.pem",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--user", "default", "off"])
            .args([
                "--user",
                "bridge",
                "on",
                ">s3cret-pass",
                "~*",
                "&*",
                "+@all",
                "-config",
            ])
            .args(["--logfile", "redis.log"])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .ok()?;
        Some(Self { port, dir, child })
    }
}

/// `rediss://` with `store.redis_ca_file` and an ACL user in the URL: the store connects and
/// serves (the user may not read `maxmemory-policy`: logged, not refused); without the CA the
/// certificate is refused, and a wrong password is refused, neither message showing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_redis_of_a_private_ca_serves_an_acl_user() {
    let Some(redis) = TlsRedis::start("redis_store::tls") else {
        return;
    };
    let ca = Some(redis.dir.path().join("ca.pem"));
    let port = redis.port;
    let url = format!("rediss://bridge:s3cret-pass@localhost:{port}");
    let prefix = unique_prefix("tls");
    let open = |url: &str, ca: Option<std::path::PathBuf>| {
        open_store_replica(url, &prefix, 10, Duration::from_secs(2), true, ca)
    };
    let trusted = open(&url, ca.clone());
    eventually("the store connects over TLS as the ACL user", || async {
        trusted.store.ping().await.is_ok()
    })
    .await;
    trusted
        .store
        .create_job(new_job(&trusted.name))
        .await
        .expect("a job over TLS");
    let untrusted = open(&url, None);
    let wrong_user = open(&format!("rediss://bridge:not-it@localhost:{port}"), ca);
    for (replica, says) in [(&untrusted, "certificate"), (&wrong_user, "WRONGPASS")] {
        let error = eventually(says, || async {
            let error = replica.store.ping().await.err()?.to_string();
            error.contains(says).then_some(error)
        })
        .await;
        assert!(
            !error.contains("s3cret-pass") && !error.contains("not-it"),
            "{error}"
        );
    }
}

/// Every primary of a Redis Cluster fails over (`CLUSTER FAILOVER` on each replica) while a job
/// runs: the bridge follows the slots to their new primaries, the job's events go on without a
/// gap, its cancel and terminal event are written on the new primaries, its whole history is
/// read back from them, and a new job runs after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_on_through_a_failover_of_every_cluster_primary() {
    let Some(cluster) = RedisCluster::start_with_replicas("redis_store::cluster_failover").await
    else {
        return;
    };
    let config = format!(
        "[jobs]\nmode = \"async\"\n[store]\nbackend = \"redis\"\nredis_url = \"{}\"\n\
         redis_cluster = true\nkey_prefix = \"failover\"\n{}",
        cluster.url(),
        demo_upstream_toml("{}")
    );
    let bridge = spawn_bridge(&config, &[]).await;
    let client = connect_url(&bridge.mcp_url()).await;
    // Far longer (100 s) than a failover on a busy machine: it is cancelled once past it.
    let arguments = json!({"to": 1000, "delay_ms": 100});
    let handle = running_job(&client, "demo__slow_count", arguments).await;
    let first = read_sse(&handle.events_url, Some(0), |e| {
        e.event == "progress" && e.data["progress"] == 3.0
    })
    .await;

    cluster.fail_over_every_primary().await;
    let (status, during) = get_json(&handle.status_url).await;
    assert_eq!(status, 200, "{during}");
    assert_eq!(during["status"], "running", "{during}");

    // Three more steps written on the new primaries, then the cancel and the terminal event.
    let last_seen = first.last().unwrap().seq();
    let mut more = read_sse(&handle.events_url, Some(last_seen), |e| {
        e.event == "progress" && e.seq() >= last_seen + 3
    })
    .await;
    let (status, body) = post_json(&handle.cancel_url).await;
    assert!(status < 300, "{status}: {body}");
    let rest = read_sse(
        &handle.events_url,
        Some(more.last().unwrap().seq()),
        SseEvent::is_terminal,
    )
    .await;
    more.extend(rest);
    let all: Vec<SseEvent> = first.into_iter().chain(more).collect();
    assert_consecutive(&all);
    assert_eq!(all.last().unwrap().event, "cancelled", "{all:#?}");

    let again = read_sse(&handle.events_url, Some(0), SseEvent::is_terminal).await;
    let seqs = |events: &[SseEvent]| events.iter().map(SseEvent::seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(&again),
        seqs(&all),
        "the history, read back after the failover"
    );

    let after = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 2, "delay_ms": 10}),
    )
    .await;
    let events = read_sse(&after.events_url, Some(0), SseEvent::is_terminal).await;
    assert_eq!(events.last().unwrap().event, "completed", "{events:#?}");
}
