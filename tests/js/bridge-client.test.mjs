// Unit tests of the client package (packages/client, built to dist/index.js) with Node's own test runner: `node --test tests/js/`.
// The EventSource is a fake driven by hand; tests/js/real-bridge.test.mjs runs the same client
// against a real bridge.

import assert from "node:assert/strict";
import { beforeEach, describe, it } from "node:test";

import {
  McpClient,
  McpHttpError,
  McpRpcError,
  cancelUrlFor,
  estimateEta,
  formatDuration,
  fractionDone,
  parseJobHandle,
  readSseBody,
  reduceJob,
  emptyJob,
  watchCorrelation,
  watchJob,
} from "../../packages/client/dist/index.js";
import { FakeEventSource } from "./fake-event-source.mjs";

const ID = "0123456789abcdef0123456789abcdef";
const URL_ = `http://bridge.test/jobs/${ID}/events?token=t0k`;

function snapshot(extra = {}) {
  return {
    job_id: ID,
    tool: "demo__slow_count",
    status: "running",
    progress: null,
    total: null,
    message: null,
    seq: 0,
    created_at: 1000,
    ...extra,
  };
}

function progress(n, total = 3, ts = 1000 + n * 100) {
  return { job_id: ID, seq: n, ts, progress: n, total, message: `step ${n} of ${total}` };
}

function recorder() {
  const calls = [];
  const handlers = {};
  for (const name of ["onStatus", "onProgress", "onLog", "onHeartbeat", "onReset", "onDone", "onError", "onConnection"]) {
    handlers[name] = (...args) => calls.push([name, ...args]);
  }
  return { calls, handlers, names: () => calls.map((c) => c[0]) };
}

beforeEach(() => {
  FakeEventSource.instances.length = 0;
});

describe("watchJob", () => {
  it("reports status, progress and the result, then closes on the terminal event", () => {
    const r = recorder();
    const watch = watchJob(URL_, r.handlers, { EventSource: FakeEventSource });
    const es = FakeEventSource.last();
    assert.equal(es.url, URL_, "the events URL is used exactly as given (token kept)");
    es.open();
    es.emit("status", snapshot(), 0);
    for (const n of [1, 2, 3]) es.emit("progress", progress(n), n);
    es.emit("completed", { job_id: ID, seq: 4, ts: 1400, status: "completed", result: { content: [{ type: "text", text: "counted to 3" }] } }, 4);
    assert.deepEqual(r.names(), ["onConnection", "onConnection", "onStatus", "onProgress", "onProgress", "onProgress", "onConnection", "onDone"]);
    assert.equal(r.calls[1][1], "open");
    assert.equal(r.calls.at(-2)[1], "closed", "closed before onDone runs");
    assert.ok(es.closed, "closed on the terminal event, so it does not reconnect for ever");
    const [, end, job] = r.calls.at(-1);
    assert.equal(end.status, "completed");
    assert.equal(job.status, "completed");
    assert.equal(job.progress, 3);
    assert.equal(job.result.content[0].text, "counted to 3");
    assert.equal(watch.lastEventId, 4);
  });

  it("shows reconnecting after a drop and skips events it already has", () => {
    const r = recorder();
    const watch = watchJob(URL_, r.handlers, { EventSource: FakeEventSource });
    const es = FakeEventSource.last();
    es.open();
    es.emit("status", snapshot(), 0);
    es.emit("progress", progress(1), 1);
    es.emit("progress", progress(2), 2);
    es.drop();
    assert.equal(watch.connection, "reconnecting");
    es.open();
    // A replay that overlaps what was seen: duplicates are ignored.
    es.emit("progress", progress(2), 2);
    es.emit("progress", progress(3), 3);
    assert.equal(watch.connection, "open");
    const seen = r.calls.filter((c) => c[0] === "onProgress").map((c) => c[1].progress);
    assert.deepEqual(seen, [1, 2, 3]);
    assert.ok(r.calls.some((c) => c[0] === "onConnection" && c[1] === "reconnecting"));
  });

  it("a reset replaces the state with the snapshot it carries", () => {
    const r = recorder();
    const watch = watchJob(URL_, r.handlers, { EventSource: FakeEventSource });
    const es = FakeEventSource.last();
    es.emit("status", snapshot(), 0);
    es.emit("progress", progress(1, 10), 1);
    es.emit("reset", snapshot({ progress: 7, total: 10, message: "step 7 of 10", seq: 7 }), 7);
    assert.equal(watch.job.progress, 7);
    assert.equal(watch.job.message, "step 7 of 10");
    assert.equal(watch.lastEventId, 7);
    es.emit("progress", progress(8, 10), 8);
    assert.equal(watch.job.progress, 8);
    assert.ok(r.names().includes("onReset"));
  });

  it("a reset before the terminal event: the terminal event has the next id and ends the watch", () => {
    // What the bridge sends a reader that fell behind past the end of a job: `reset` at the
    // position just before the terminal event, then the terminal event.
    const r = recorder();
    const watch = watchJob(URL_, r.handlers, { EventSource: FakeEventSource });
    const es = FakeEventSource.last();
    es.open();
    es.emit("status", snapshot(), 0);
    es.emit("progress", progress(1, 10), 1);
    es.emit("reset", snapshot({ status: "completed", progress: 10, total: 10, seq: 11 }), 10);
    es.emit("completed", { job_id: ID, seq: 11, status: "completed", result: { content: [] } }, 11);
    assert.deepEqual(r.names().slice(-3), ["onReset", "onConnection", "onDone"]);
    assert.ok(es.closed, "closed: no reconnection");
    assert.equal(watch.connection, "closed");
    assert.equal(watch.lastEventId, 11);
  });

  it("a terminal event at or before the position still ends the watch (no reconnect loop)", () => {
    // An older bridge sent `reset` and the terminal event with the same id; a reader that
    // reconnects after the end gets the terminal event again with the id it already has.
    for (const [resetId, endId] of [[11, 11], [11, 9]]) {
      const r = recorder();
      const watch = watchJob(URL_, r.handlers, { EventSource: FakeEventSource });
      const es = FakeEventSource.last();
      es.open();
      es.emit("reset", snapshot({ status: "completed", seq: 11 }), resetId);
      es.emit("completed", { job_id: ID, seq: 11, status: "completed", result: null }, endId);
      const done = r.calls.filter((c) => c[0] === "onDone");
      assert.equal(done.length, 1, `onDone once for reset ${resetId}, end ${endId}`);
      assert.equal(done[0][2].status, "completed");
      assert.ok(es.closed);
      assert.equal(watch.connection, "closed");
    }
    const r = recorder();
    const es = (watchJob(URL_, r.handlers, { EventSource: FakeEventSource }), FakeEventSource.last());
    es.open();
    es.emit("status", snapshot(), 0);
    es.emit("progress", progress(1), 1);
    es.emit("completed", { job_id: ID, seq: 2, status: "completed" }, 2);
    assert.equal(r.calls.filter((c) => c[0] === "onDone").length, 1);
    assert.ok(es.closed, "a closed watch ignores anything after its end");
  });

  it("heartbeats mark the job as working without news and do not move the position", () => {
    const r = recorder();
    const watch = watchJob(URL_, r.handlers, { EventSource: FakeEventSource });
    const es = FakeEventSource.last();
    es.emit("status", snapshot(), 0);
    es.emit("progress", progress(1), 1);
    es.emit("heartbeat", { job_id: ID, elapsed_ms: 12000, since_progress_ms: 11000 }, 1);
    assert.equal(watch.job.heartbeat.since_progress_ms, 11000);
    assert.equal(watch.lastEventId, 1);
    es.emit("progress", progress(2), 2);
    assert.equal(watch.job.heartbeat, null, "progress clears the heartbeat");
    assert.ok(r.names().includes("onHeartbeat"));
  });

  it("logs, failures and cancellations", () => {
    const r = recorder();
    const watch = watchJob(URL_, r.handlers, { EventSource: FakeEventSource });
    const es = FakeEventSource.last();
    es.emit("status", snapshot(), 0);
    es.emit("log", { job_id: ID, seq: 1, level: "info", logger: "demo", data: "working" }, 1);
    es.emit("failed", { job_id: ID, seq: 2, status: "failed", reason: "tool_error", message: "failed after 2 steps as asked" }, 2);
    assert.equal(watch.job.logs[0].data, "working");
    assert.equal(watch.job.status, "failed");
    assert.deepEqual(watch.job.error, { reason: "tool_error", message: "failed after 2 steps as asked" });
    assert.equal(r.calls.find((c) => c[0] === "onLog")[1].level, "info");

    const r2 = recorder();
    watchJob(URL_, r2.handlers, { EventSource: FakeEventSource });
    const es2 = FakeEventSource.last();
    es2.emit("cancelled", { job_id: ID, seq: 1, status: "cancelled", reason: "cancelled through POST" }, 1);
    const done = r2.calls.find((c) => c[0] === "onDone");
    assert.equal(done[2].status, "cancelled");
    assert.equal(done[2].error.message, "cancelled through POST");
    assert.ok(es2.closed);
  });

  it("a refused stream (404, wrong token) is an error, and the watch closes", () => {
    const r = recorder();
    const watch = watchJob(URL_, r.handlers, { EventSource: FakeEventSource });
    FakeEventSource.last().refuse();
    const error = r.calls.find((c) => c[0] === "onError");
    assert.match(error[1].message, /unknown or expired/);
    assert.equal(watch.connection, "closed");
  });

  it("cancel() POSTs the cancel URL next to the events URL, keeping its query", async () => {
    const requests = [];
    const fetch = async (url, init) => {
      requests.push([url, init]);
      return new Response(JSON.stringify(snapshot()), { status: 202 });
    };
    const watch = watchJob(URL_, {}, { EventSource: FakeEventSource, fetch, headers: { Authorization: "Bearer x" } });
    const answer = await watch.cancel();
    assert.equal(answer.status, 202);
    assert.equal(requests[0][0], `http://bridge.test/jobs/${ID}/cancel?token=t0k`);
    assert.equal(requests[0][1].method, "POST");
    assert.equal(requests[0][1].headers.Authorization, "Bearer x");

    const given = watchJob(URL_, {}, { EventSource: FakeEventSource, fetch, cancelUrl: "http://elsewhere/c?x=1" });
    await given.cancel();
    assert.equal(requests[1][0], "http://elsewhere/c?x=1", "a cancel_url from the handle is used as is");
  });

  it("cancel() of an unknown job rejects with the bridge's message", async () => {
    const fetch = async () => new Response(JSON.stringify({ error: { code: "not_found", message: "no such job" } }), { status: 404 });
    const watch = watchJob(URL_, {}, { EventSource: FakeEventSource, fetch });
    await assert.rejects(watch.cancel(), /no such job/);
  });
});

describe("watchCorrelation", () => {
  it("tracks every job of the correlation", () => {
    const started = [];
    const events = [];
    const watch = watchCorrelation("http://bridge.test/correlations/turn-1/events", {
      onJobStarted: (s) => started.push(s.job_id),
      onJobEvent: (type, data, job) => events.push([type, job.job_id, job.status, job.progress]),
    }, { EventSource: FakeEventSource });
    const es = FakeEventSource.last();
    const other = "f".repeat(32);
    es.emit("job_started", snapshot(), 1);
    es.emit("job_started", snapshot({ job_id: other }), 2);
    es.emit("progress", progress(1), 3);
    es.emit("progress", { ...progress(5), job_id: other }, 4);
    es.emit("completed", { job_id: ID, status: "completed", result: {} }, 5);
    assert.deepEqual(started, [ID, other]);
    assert.deepEqual(events, [
      ["progress", ID, "running", 1],
      ["progress", other, "running", 5],
      ["completed", ID, "completed", 1],
    ]);
    assert.equal(watch.jobs.get(other).progress, 5);
    assert.ok(!es.closed, "a correlation stream stays open when one job ends");
    watch.close();
    assert.ok(es.closed);
  });
});

describe("parseJobHandle", () => {
  const handle = {
    job_id: ID,
    status: "running",
    tool: "demo__slow_count",
    events_url: URL_,
    status_url: `http://bridge.test/jobs/${ID}?token=t0k`,
    instructions: "Call wait_for_job…",
  };

  it("reads a Foundry mcp_call output item", () => {
    const item = {
      type: "mcp_call",
      id: "mcp_123",
      server_label: "bridge",
      name: "demo__slow_count",
      arguments: '{"to":10}',
      output: JSON.stringify(handle),
      error: null,
    };
    assert.deepEqual(parseJobHandle(item), handle);
  });

  it("reads MCP results: structuredContent, text, and a sync answer's _meta", () => {
    assert.deepEqual(parseJobHandle({ structuredContent: handle, content: [] }), handle);
    assert.deepEqual(parseJobHandle({ content: [{ type: "text", text: JSON.stringify(handle) }] }), handle);
    const sync = {
      content: [{ type: "text", text: "counted to 3" }],
      structuredContent: { counted: 3 },
      _meta: { "mcp-progress-bridge/job": { job_id: ID, events_url: URL_ } },
    };
    assert.deepEqual(parseJobHandle(sync), { job_id: ID, events_url: URL_ });
  });

  it("returns null when there is no handle", () => {
    assert.equal(parseJobHandle({ type: "mcp_call", output: "counted to 3" }), null);
    assert.equal(parseJobHandle({ type: "mcp_call", output: JSON.stringify(handle), error: "boom" }), null);
    assert.equal(parseJobHandle("{not json"), null);
    assert.equal(parseJobHandle(null), null);
    assert.equal(parseJobHandle({ content: [{ type: "text", text: "hi" }] }), null);
  });
});

describe("job state helpers", () => {
  it("estimates the ETA from the job's own timestamps", () => {
    assert.equal(estimateEta({ progress: 1, total: 4, created_at: 0, last_progress_at: 1000 }), 3000);
    assert.equal(estimateEta({ progress: 1, total: null, created_at: 0, last_progress_at: 1000 }), null);
    assert.equal(estimateEta({ progress: 0, total: 4, created_at: 0, last_progress_at: 1000 }), null);
    let job = reduceJob(emptyJob(), "status", snapshot({ created_at: 1000 }), 0);
    job = reduceJob(job, "progress", progress(1, 4, 2000), 1);
    assert.equal(job.eta_ms, 3000);
  });

  it("fraction, durations, cancel URL", () => {
    assert.equal(fractionDone({ progress: 3, total: 4 }), 0.75);
    assert.equal(fractionDone({ progress: 3, total: null }), null);
    assert.equal(formatDuration(1500), "1.5 s");
    assert.equal(formatDuration(125_000), "2 min 5 s");
    assert.equal(formatDuration(3_723_000), "1 h 2 min");
    assert.equal(cancelUrlFor(URL_), `http://bridge.test/jobs/${ID}/cancel?token=t0k`);
    assert.throws(() => cancelUrlFor("http://bridge.test/other"), /cancel URL/);
  });
});

describe("McpClient", () => {
  function sseResponse(messages, headers = {}) {
    const body = messages.map((m) => `event: message\ndata: ${JSON.stringify(m)}\n\n`).join("");
    return new Response(body, { status: 200, headers: { "content-type": "text/event-stream", ...headers } });
  }

  it("initializes, keeps the session, reads SSE answers and progress for its token", async () => {
    const sent = [];
    const fetch = async (url, init) => {
      const message = JSON.parse(init.body);
      sent.push({ message, headers: init.headers });
      if (message.method === "initialize") {
        return sseResponse([{ jsonrpc: "2.0", id: message.id, result: { protocolVersion: "2025-06-18", serverInfo: { name: "b", version: "1" } } }], { "mcp-session-id": "s1" });
      }
      if (message.method === "notifications/initialized") return new Response(null, { status: 202 });
      const token = message.params._meta?.progressToken;
      return sseResponse([
        { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: token, progress: 1, total: 2 } },
        { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: "someone else", progress: 9 } },
        { jsonrpc: "2.0", id: message.id, result: { content: [{ type: "text", text: "done" }] } },
      ]);
    };
    const client = new McpClient("http://bridge.test/mcp", { fetch, token: "secret" });
    const progressSeen = [];
    const result = await client.callTool("demo__slow_count", { to: 2 }, {
      meta: { "mcp-progress-bridge/mode": "sync" },
      headers: { "X-Correlation-Id": "turn-1" },
      onProgress: (p) => progressSeen.push(p.progress),
    });
    assert.equal(result.content[0].text, "done");
    assert.deepEqual(progressSeen, [1]);
    const call = sent.at(-1);
    assert.equal(call.headers["Mcp-Session-Id"], "s1");
    assert.equal(call.headers.Authorization, "Bearer secret");
    assert.equal(call.headers["X-Correlation-Id"], "turn-1");
    assert.equal(call.headers["MCP-Protocol-Version"], "2025-06-18");
    assert.equal(call.message.params._meta["mcp-progress-bridge/mode"], "sync");
    assert.deepEqual(sent.map((s) => s.message.method), ["initialize", "notifications/initialized", "tools/call"]);
  });

  it("401 is an McpHttpError with status 401; JSON-RPC errors are McpRpcError", async () => {
    const unauthorized = async () =>
      new Response("missing bearer token", { status: 401, headers: { "www-authenticate": "Bearer" } });
    const client = new McpClient("http://bridge.test/mcp", { fetch: unauthorized });
    await assert.rejects(client.connect(), (e) => e instanceof McpHttpError && e.status === 401 && /token/.test(e.message));

    const fetch = async (url, init) => {
      const message = JSON.parse(init.body);
      if (message.method === "initialize") {
        return new Response(JSON.stringify({ jsonrpc: "2.0", id: message.id, result: {} }), { headers: { "content-type": "application/json", "mcp-session-id": "s" } });
      }
      if (!("id" in message)) return new Response(null, { status: 202 });
      return new Response(JSON.stringify({ jsonrpc: "2.0", id: message.id, error: { code: -32602, message: "unknown tool \"x\"" } }), { headers: { "content-type": "application/json" } });
    };
    const rpc = new McpClient("http://bridge.test/mcp", { fetch });
    await assert.rejects(rpc.callTool("x"), (e) => e instanceof McpRpcError && /unknown tool/.test(e.message));
  });

  it("re-initializes once when the session expired (404)", async () => {
    let sessions = 0;
    let expired = true;
    const fetch = async (url, init) => {
      const message = JSON.parse(init.body);
      if (message.method === "initialize") {
        sessions += 1;
        return new Response(JSON.stringify({ jsonrpc: "2.0", id: message.id, result: {} }), { headers: { "content-type": "application/json", "mcp-session-id": `s${sessions}` } });
      }
      if (!("id" in message)) return new Response(null, { status: 202 });
      if (expired) {
        expired = false;
        return new Response("session not found", { status: 404 });
      }
      return new Response(JSON.stringify({ jsonrpc: "2.0", id: message.id, result: { tools: [{ name: "a" }] } }), { headers: { "content-type": "application/json" } });
    };
    const client = new McpClient("http://bridge.test/mcp", { fetch });
    const tools = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name), ["a"]);
    assert.equal(sessions, 2);
  });

  it("readSseBody joins multi-line data and handles CRLF and comments", async () => {
    const text = ": keep-alive\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nid: 3\ndata: [2]\n\n";
    const seen = [];
    await readSseBody(new Response(text).body, (d) => seen.push(d));
    assert.deepEqual(seen, ['{"a":\n1}', "[2]"]);
  });
});

describe("watchCorrelation before the first job", () => {
  it("opens the stream again while the bridge does not know the correlation yet", async () => {
    const waiting = [];
    const started = [];
    const watch = watchCorrelation("http://bridge.test/correlations/later/events", {
      onWaiting: () => waiting.push(true),
      onJobStarted: (s) => started.push(s.job_id),
    }, { EventSource: FakeEventSource, retryMs: 5 });
    FakeEventSource.last().refuse();
    assert.equal(watch.connection, "waiting");
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(FakeEventSource.instances.length, 2, "opened again");
    const es = FakeEventSource.last();
    es.open();
    es.emit("job_started", snapshot(), 1);
    assert.deepEqual(started, [ID]);
    assert.equal(waiting.length, 1);
    watch.close();
  });

  it("gives up after waitMs", () => {
    const errors = [];
    watchCorrelation("http://bridge.test/correlations/x/events", { onError: (e) => errors.push(e) }, {
      EventSource: FakeEventSource,
      waitMs: 0,
    });
    FakeEventSource.last().refuse();
    assert.equal(errors.length, 1);
  });
});
