// bridge-client.js against a real running bridge (BRIDGE_URL, e.g. http://127.0.0.1:8080):
// tools/call through /mcp, the handle out of the result, the job's event stream followed to
// the end across a dropped connection. Run by tests/it/web.rs, which starts the bridge; skipped
// when BRIDGE_URL is not set.

import assert from "node:assert/strict";
import { it } from "node:test";

import { McpClient, McpRpcError, parseJobHandle, watchJob } from "../../packages/client/dist/index.js";
import { FetchEventSource } from "./fetch-event-source.mjs";

const base = process.env.BRIDGE_URL;
const skip = base ? false : "BRIDGE_URL is not set (tests/it/web.rs sets it after starting a bridge)";

it("calls a slow tool through /mcp and follows its job to the end across a dropped connection", { skip, timeout: 30_000 }, async () => {
  const mcp = new McpClient(`${base}/mcp`, { clientInfo: { name: "real-bridge.test", version: "1" } });
  const tools = await mcp.listTools();
  assert.ok(tools.some((t) => t.name === "demo__slow_count"), "the demo tools are listed");

  const result = await mcp.callTool("demo__slow_count", { to: 6, delay_ms: 150 }, {
    meta: { "mcp-progress-bridge/mode": "async" },
  });
  const handle = parseJobHandle(result);
  assert.ok(handle, `a job handle: ${JSON.stringify(result)}`);
  assert.equal(handle.status, "running");

  const sources = [];
  class TrackedEventSource extends FetchEventSource {
    constructor(url) {
      super(url);
      sources.push(this);
    }
  }
  const progress = [];
  const connections = [];
  const done = await new Promise((resolve, reject) => {
    watchJob(handle.events_url, {
      onProgress: (p) => {
        progress.push(p.progress);
        // Cut the connection once, mid-job: the client must resume with Last-Event-ID.
        if (p.progress === 2) sources[0].dropConnection();
      },
      onConnection: (state) => connections.push(state),
      onDone: (end, job) => resolve({ end, job }),
      onError: reject,
    }, { EventSource: TrackedEventSource });
  });
  assert.deepEqual(progress, [1, 2, 3, 4, 5, 6], "every step exactly once, across the drop");
  assert.ok(connections.includes("reconnecting"), `connection states: ${connections}`);
  assert.equal(sources[0].connections, 2, "one reconnection");
  assert.equal(done.end.status, "completed");
  assert.equal(done.job.result.content[0].text, "counted to 6");
});

it("a sync call reports progress on the request and names its job in _meta", { skip, timeout: 30_000 }, async () => {
  const mcp = new McpClient(`${base}/mcp`);
  const progress = [];
  const result = await mcp.callTool("demo__slow_count", { to: 3, delay_ms: 20 }, {
    meta: { "mcp-progress-bridge/mode": "sync" },
    onProgress: (p) => progress.push(p.progress),
  });
  assert.equal(result.content[0].text, "counted to 3");
  assert.deepEqual(progress, [1, 2, 3]);
  const handle = parseJobHandle(result);
  assert.match(handle.job_id, /^[0-9a-f]{32}$/);
});

it("an unknown mode in _meta is refused with a message saying what is allowed", { skip }, async () => {
  const mcp = new McpClient(`${base}/mcp`);
  await assert.rejects(
    mcp.callTool("demo__echo", { text: "x" }, { meta: { "mcp-progress-bridge/mode": "later" } }),
    (e) => e instanceof McpRpcError && /"async", "sync" or "auto"/.test(e.message),
  );
});

it("the default reader (fetch) resumes after a cut connection with no step lost or repeated", { skip, timeout: 30_000 }, async () => {
  const mcp = new McpClient(`${base}/mcp`);
  const result = await mcp.callTool("demo__slow_count", { to: 6, delay_ms: 150 }, {
    meta: { "mcp-progress-bridge/mode": "async" },
  });
  const handle = parseJobHandle(result);
  // A fetch whose first stream is cut mid-job, the way a network failure would cut it.
  const cuts = [];
  const urls = [];
  const cutting = (url, init) => {
    urls.push(url);
    const controller = new AbortController();
    init.signal?.addEventListener("abort", () => controller.abort());
    cuts.push(controller);
    return fetch(url, { ...init, signal: controller.signal });
  };
  const progress = [];
  const retries = [];
  const done = await new Promise((resolve, reject) => {
    watchJob(handle.events_url, {
      onProgress: (p) => {
        progress.push(p.progress);
        if (p.progress === 2 && cuts.length === 1) cuts[0].abort();
      },
      onRetry: (info) => retries.push(info),
      onDone: (end) => resolve(end),
      onError: reject,
    }, { fetch: cutting });
  });
  assert.deepEqual(progress, [1, 2, 3, 4, 5, 6], "every step exactly once, across the cut");
  assert.equal(retries.length, 1, `one retry: ${JSON.stringify(retries)}`);
  assert.equal(retries[0].reason, "network");
  assert.ok(retries[0].delayMs >= 1000 && retries[0].delayMs <= 2000, "after the stream's retry: 2000, jittered");
  assert.equal(new URL(urls[1]).searchParams.get("last_event_id"), "2");
  assert.equal(done.status, "completed");
});
