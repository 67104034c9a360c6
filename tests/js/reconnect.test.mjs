// The client's own stream reader (fetch, the default): reconnection after a break with jittered
// backoff, resuming after the last event seen; `retry:` and `Retry-After` honoured; the watch
// stops only on the terminal event, a 401/403/404 (or another 4xx), close() or its AbortSignal.
// A fetch driven by hand (fake-fetch.mjs) plays the bridge.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { StreamError, parseRetryAfter, retryDelay, watchCorrelation, watchJob } from "../../packages/client/dist/index.js";
import { FakeFetch, sse } from "./fake-fetch.mjs";

const ID = "0123456789abcdef0123456789abcdef";
const URL_ = `http://bridge.test/jobs/${ID}/events?token=t0k`;
const snapshot = (extra = {}) => ({ job_id: ID, tool: "demo__slow_count", status: "running", seq: 0, created_at: 1000, ...extra });
const progress = (n, total = 3) => ({ job_id: ID, seq: n, ts: 1000 + n * 100, progress: n, total, message: `step ${n}` });
const completed = (seq) => ({ job_id: ID, seq, ts: 2000, status: "completed", result: { content: [{ type: "text", text: "done" }] } });

/** Wait (bounded) until `check()` is true. */
async function until(check, what, timeoutMs = 5000) {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

function record() {
  const log = { progress: [], retries: [], connections: [], errors: [], done: [], events: [] };
  const handlers = {
    onProgress: (p) => log.progress.push(p.progress),
    onRetry: (info) => log.retries.push(info),
    onConnection: (c) => log.connections.push(c),
    onError: (e) => log.errors.push(e),
    onDone: (end, job) => log.done.push([end, job]),
    onUpdate: (event) => log.events.push(event.type),
  };
  return { log, handlers };
}

const fast = { initialDelayMs: 5, random: () => 1 };

describe("watchJob over fetch", () => {
  it("a stream that closes before the end is opened again after the last event seen", async () => {
    const f = new FakeFetch();
    const first = f.stream(`retry: 5\n\n${sse("status", snapshot(), 0)}${sse("progress", progress(1), 1)}${sse("progress", progress(2), 2)}`);
    const second = f.stream();
    const { log, handlers } = record();
    const watch = watchJob(URL_, handlers, { fetch: f.fetch, retry: fast });
    await until(() => log.progress.length === 2, "two steps");
    assert.equal(f.calls[0].url, URL_, "the events URL exactly as given");
    assert.equal(f.calls[0].init.headers.Accept, "text/event-stream");
    first.end();
    await f.called(2);
    const resumed = new URL(f.calls[1].url);
    assert.equal(resumed.searchParams.get("last_event_id"), "2", "resumes after the last event seen");
    assert.equal(resumed.searchParams.get("token"), "t0k", "the capability token kept");
    assert.equal(log.retries[0].reason, "closed");
    assert.equal(log.retries[0].delayMs, 5, "the stream's retry: sets the wait");
    assert.ok(log.connections.includes("reconnecting"));
    // The bridge replays from the position; an overlap would be skipped all the same.
    second.send(sse("progress", progress(2), 2) + sse("progress", progress(3), 3) + sse("completed", completed(4), 4));
    await until(() => log.done.length === 1, "the end");
    assert.deepEqual(log.progress, [1, 2, 3], "every step once");
    assert.equal(watch.connection, "closed");
    assert.equal(watch.job.status, "completed");
    assert.ok(second.closed, "the stream is let go after the terminal event");
    assert.equal(f.calls.length, 2, "no attempt after the end");
    assert.deepEqual(log.events, ["status", "progress", "progress", "progress", "completed"], "typed events");
  });

  it("a 503 with Retry-After is waited for, then the reader gets in", async () => {
    const f = new FakeFetch();
    f.refuse(503, { "retry-after": "1", "content-type": "application/json" }, JSON.stringify({ error: { code: "too_many_subscribers" } }));
    f.stream(sse("status", snapshot(), 0) + sse("completed", completed(1), 1));
    const { log, handlers } = record();
    const started = Date.now();
    watchJob(URL_, handlers, { fetch: f.fetch, retry: { ...fast, random: () => 0 } });
    await until(() => log.done.length === 1, "the end");
    assert.equal(log.retries.length, 1);
    assert.deepEqual({ ...log.retries[0] }, { attempt: 1, delayMs: 1000, reason: "status", status: 503, retryAfterMs: 1000 });
    assert.ok(Date.now() - started >= 990, "waited as asked");
    assert.equal(log.errors.length, 0);
  });

  it("without a readable Retry-After header, the body's retry_after_secs counts (another origin)", async () => {
    const f = new FakeFetch();
    f.refuse(503, { "content-type": "application/json" }, JSON.stringify({ error: { retry_after_secs: 0.02 } }));
    f.stream(sse("completed", completed(1), 1));
    const { log, handlers } = record();
    watchJob(URL_, handlers, { fetch: f.fetch, retry: { ...fast, random: () => 0 } });
    await until(() => log.done.length === 1, "the end");
    assert.equal(log.retries[0].retryAfterMs, 20);
  });

  it("network errors and 5xx back off exponentially with jitter, and a working stream starts over", async () => {
    const f = new FakeFetch();
    f.networkError();
    f.refuse(502);
    f.networkError();
    const s = f.stream(sse("status", snapshot(), 0));
    f.networkError();
    f.stream(sse("completed", completed(1), 1));
    const { log, handlers } = record();
    watchJob(URL_, handlers, { fetch: f.fetch, retry: { initialDelayMs: 4, maxDelayMs: 10, random: () => 1 } });
    await until(() => log.events.length === 1, "the status");
    assert.deepEqual(log.retries.map((r) => [r.attempt, r.reason, r.delayMs]), [
      [1, "network", 4],
      [2, "status", 8],
      [3, "network", 10],
    ]);
    assert.equal(log.retries[1].status, 502);
    s.end();
    await until(() => log.done.length === 1, "the end");
    assert.deepEqual(log.retries.slice(3).map((r) => r.attempt), [1, 2], "counting starts over after events arrived");
    assert.equal(retryDelay(1, 1000, 30000, null, () => 0), 500, "half of the wait is jitter");
    assert.equal(retryDelay(6, 1000, 30000, null, () => 1), 30000, "capped");
  });

  for (const status of [401, 403, 404, 400]) {
    it(`a ${status} at the first attempt stops the watch with a StreamError`, async () => {
      const f = new FakeFetch();
      f.refuse(status, { "content-type": "application/json" }, JSON.stringify({ error: { code: "x", message: "no such job" } }));
      const { log, handlers } = record();
      const watch = watchJob(URL_, handlers, { fetch: f.fetch, retry: fast });
      await until(() => log.errors.length === 1, "the refusal");
      const [error] = log.errors;
      assert.ok(error instanceof StreamError);
      assert.equal(error.status, status);
      assert.equal(error.kind, "refused");
      assert.match(error.message, /no such job/);
      assert.equal(watch.connection, "closed");
      assert.equal(watch.error, error);
      await new Promise((resolve) => setTimeout(resolve, 30));
      assert.equal(f.calls.length, 1, "not asked again");
    });
  }

  it("a 404 after the stream was open says the job is gone (a bridge restart without a shared store)", async () => {
    const f = new FakeFetch();
    const s = f.stream(sse("status", snapshot(), 0) + sse("progress", progress(1), 1));
    f.networkError(); // the bridge restarting
    f.refuse(404, { "content-type": "application/json" }, JSON.stringify({ error: { code: "not_found", message: "no such job" } }));
    const { log, handlers } = record();
    const watch = watchJob(URL_, handlers, { fetch: f.fetch, retry: fast });
    await until(() => log.progress.length === 1, "a step");
    s.abort();
    await until(() => log.errors.length === 1, "the refusal");
    assert.equal(log.errors[0].kind, "gone");
    assert.match(log.errors[0].message, /restarted/);
    assert.equal(watch.job.status, "running", "the state does not claim an end it never saw");
    assert.equal(log.done.length, 0);
  });

  it("close() and an AbortSignal end the watch, in a stream or in a wait", async () => {
    const f = new FakeFetch();
    const s = f.stream(sse("status", snapshot(), 0));
    const { log, handlers } = record();
    const watch = watchJob(URL_, handlers, { fetch: f.fetch, retry: fast });
    await until(() => log.events.length === 1, "the status");
    watch.close();
    assert.ok(f.calls[0].init.signal.aborted, "the request is aborted");
    await until(() => s.closed, "the stream let go");
    assert.equal(watch.connection, "closed");

    const g = new FakeFetch();
    g.networkError();
    const controller = new AbortController();
    const aborted = watchJob(URL_, {}, { fetch: g.fetch, retry: { initialDelayMs: 10_000 }, signal: controller.signal });
    await g.called(1);
    await until(() => aborted.connection === "reconnecting", "the wait");
    controller.abort();
    assert.equal(aborted.connection, "closed");
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(g.calls.length, 1);

    const h = new FakeFetch();
    const before = new AbortController();
    before.abort();
    assert.equal(watchJob(URL_, {}, { fetch: h.fetch, signal: before.signal }).connection, "closed");
    assert.equal(h.calls.length, 0, "an aborted signal opens nothing");
  });

  it("a 200 that is not an event stream (a proxy's page) is retried", async () => {
    const f = new FakeFetch();
    f.refuse(200, { "content-type": "text/html" }, "<html>maintenance</html>");
    f.stream(sse("completed", completed(1), 1));
    const { log, handlers } = record();
    watchJob(URL_, handlers, { fetch: f.fetch, retry: fast });
    await until(() => log.done.length === 1, "the end");
    assert.equal(log.retries[0].reason, "closed");
  });

  it("streamHeaders go with the stream; headers go with cancel", async () => {
    const f = new FakeFetch();
    f.stream(sse("completed", completed(1), 1));
    watchJob(URL_, {}, { fetch: f.fetch, streamHeaders: { Authorization: "Bearer x" } });
    await f.called(1);
    assert.equal(f.calls[0].init.headers.Authorization, "Bearer x");
  });

  it("Retry-After as an HTTP date", () => {
    assert.equal(parseRetryAfter("5"), 5000);
    assert.equal(parseRetryAfter(new Date(10_000).toUTCString(), 4_000), 6000);
    assert.equal(parseRetryAfter("soon"), null);
    assert.equal(parseRetryAfter(null), null);
  });
});

describe("watchCorrelation over fetch", () => {
  it("resumes after a break, and waits for a correlation an older bridge does not know yet", async () => {
    const f = new FakeFetch();
    f.refuse(404);
    const s = f.stream(sse("job_started", snapshot(), 1) + sse("progress", progress(1), 2));
    f.stream(sse("progress", progress(2), 3));
    const started = [];
    const seen = [];
    const states = [];
    const watch = watchCorrelation("http://bridge.test/correlations/turn-1/events", {
      onJobStarted: (snap) => started.push(snap.job_id),
      onJobEvent: (type, data) => seen.push([type, data.progress]),
      onConnection: (c) => states.push(c),
    }, { fetch: f.fetch, retryMs: 5, retry: { random: () => 1 } });
    await until(() => seen.length === 1, "the first step");
    assert.ok(states.includes("waiting"), `states: ${states}`);
    s.end();
    await until(() => seen.length === 2, "the second step");
    assert.equal(new URL(f.calls[2].url).searchParams.get("last_event_id"), "2");
    assert.deepEqual(started, [ID]);
    assert.equal(watch.jobs.get(ID).progress, 2);
    watch.close();
    assert.equal(watch.connection, "closed");
  });
});
