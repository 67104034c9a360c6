// The client through a rollout, in headless Chromium: the module every bridge serves at
// /client.js (the package's build) follows a job while the bridge under it goes away.
//   1. Memory store, the bridge restarted mid-job: the job is gone with it; the reader retries
//      through the restart, then says so (a StreamError, kind "gone", 404), claims no end.
//   2. Redis store, two replicas behind a load balancer, the job running on B, the reader on A:
//      A is killed and started again; the reader goes on on B with no gap and no duplicate.
//   3. A 503 from the subscriber limit (max_subscribers_per_channel = 1, the place held by
//      another reader): the reader waits the Retry-After, then gets in and sees every event.
// This script starts the bridges itself (they are stopped and started mid-test). Run by
// tests/it/web.rs, which sets:
//   BRIDGE_BIN    the bridge binary
//   JOB_SECRET    an auth.job_secret for every bridge here
//   REDIS_URL, REDIS_PREFIX   the test Redis and a key prefix of this run's own (step 2)
//   CHROMIUM      the browser (default /usr/bin/chromium)
//   CLIENT_JS     optional: a client module to use instead of the bridge's /client.js (to try a
//                 change of packages/client without rebuilding the bridge, or a deliberately
//                 broken one, to see these tests fail)

import { McpClient, parseJobHandle } from "../../packages/client/dist/index.js";
import {
  assert,
  demoUpstream,
  failoverProxy,
  finish,
  freePort,
  launchChromium,
  range,
  sameList,
  startBridge,
  step,
  until,
} from "./harness.mjs";

const secret = process.env.JOB_SECRET;
const browser = await launchChromium();

function server(port, publicPort = port) {
  return `[server]\nlisten = "127.0.0.1:${port}"\npublic_url = "http://127.0.0.1:${publicPort}"\n[auth]\njob_secret = "${secret}"\n`;
}

async function asyncJob(base, args) {
  const mcp = new McpClient(`${base}/mcp`, { clientInfo: { name: "rollout.mjs", version: "1" } });
  const result = await mcp.callTool("demo__slow_count", args, { meta: { "mcp-progress-bridge/mode": "async" } });
  const handle = parseJobHandle(result);
  assert(handle, `a job handle: ${JSON.stringify(result)}`);
  return handle;
}

/** A page on `origin` that follows `eventsUrl` with the served client; returns a reader of
 * what it saw so far: {progress, retries, done, error, job, connections}. */
async function follow(origin, eventsUrl) {
  const page = await browser.newPage();
  if (process.env.CLIENT_JS) {
    await page.route("**/client.js", (route) => route.fulfill({ path: process.env.CLIENT_JS, contentType: "text/javascript" }));
  }
  await page.goto(`${origin}/healthz`);
  await page.evaluate(async (url) => {
    const { watchJob } = await import("/client.js");
    const log = { progress: [], retries: [], done: null, error: null, connections: [] };
    window.__log = log;
    window.__watch = watchJob(url, {
      onProgress: (p) => log.progress.push(p.progress),
      onRetry: (info) => log.retries.push(info),
      onConnection: (c) => log.connections.push(c),
      onDone: (end) => (log.done = end.status),
      onError: (e) => (log.error = { name: e.name, kind: e.kind, status: e.status, message: e.message }),
    });
  }, eventsUrl);
  return {
    page,
    seen: () => page.evaluate(() => ({ ...window.__log, job: window.__watch.job, connection: window.__watch.connection })),
  };
}

await step("memory store, the bridge restarted mid-job: the reader rides the restart, then reports the job lost", async () => {
  const port = await freePort();
  const config = server(port) + demoUpstream();
  let bridge = await startBridge(config, "memory");
  const handle = await asyncJob(bridge.base, { to: 40, delay_ms: 200 });
  const reader = await follow(bridge.base, handle.events_url);
  await until(async () => (await reader.seen()).progress.length >= 3, "three steps");
  await bridge.stop("SIGKILL");
  await until(async () => (await reader.seen()).connection === "reconnecting", "reconnecting");
  bridge = await startBridge(config, "memory, restarted");
  const seen = await until(async () => {
    const s = await reader.seen();
    return s.error || s.done ? s : null;
  }, "the reader's verdict");
  assert(seen.done === null, `no end claimed: ${seen.done}`);
  assert(seen.error?.name === "StreamError" && seen.error.kind === "gone" && seen.error.status === 404, `the job is reported gone: ${JSON.stringify(seen.error)}`);
  assert(/restarted/.test(seen.error.message), `the message says why: ${seen.error.message}`);
  assert(seen.retries.some((r) => r.reason === "network"), `retried while the bridge was away: ${JSON.stringify(seen.retries)}`);
  assert(seen.job.status === "running" && seen.connection === "closed", `state: ${seen.job.status}, ${seen.connection}`);
  const steps = seen.progress;
  assert(sameList(steps, range(steps.length)), `steps before the restart in order, once: ${steps}`);
  await reader.page.close();
  await bridge.stop();
});

await step("Redis, two replicas: the reader's replica is restarted; it goes on on the other with no gap, no duplicate", async () => {
  assert(process.env.REDIS_URL && process.env.REDIS_PREFIX, "REDIS_URL and REDIS_PREFIX are set");
  const [portA, portB, portLb] = [await freePort(), await freePort(), await freePort()];
  const store = `[store]\nbackend = "redis"\nredis_url = "${process.env.REDIS_URL}"\nkey_prefix = "${process.env.REDIS_PREFIX}"\nlease_secs = 2\n`;
  const replica = (port) => server(port, portLb) + store + demoUpstream();
  let a = await startBridge(replica(portA), "replica A");
  const b = await startBridge(replica(portB), "replica B");
  const lb = await failoverProxy(portLb, [portA, portB]);
  // The job runs on B (called there directly); its URLs name the load balancer.
  const handle = await asyncJob(b.base, { to: 40, delay_ms: 250 });
  assert(handle.events_url.startsWith(`http://127.0.0.1:${portLb}/`), `events_url on the load balancer: ${handle.events_url}`);
  const reader = await follow(`http://127.0.0.1:${portLb}`, handle.events_url);
  await until(async () => (await reader.seen()).progress.length >= 5, "five steps, read through A");
  assert(lb.routed.every((p) => p === portA), `so far every connection went to A: ${lb.routed}`);
  await a.stop("SIGKILL");
  const atKill = await reader.seen();
  assert(atKill.done === null, `the job still runs when A goes away (step ${atKill.progress.length})`);
  await until(() => lb.routed.includes(portB), "the reader's next connection, through the load balancer to B");
  await until(async () => (await reader.seen()).progress.length >= atKill.progress.length + 3, "more steps, read through B");
  a = await startBridge(replica(portA), "replica A, restarted");
  const seen = await until(async () => {
    const s = await reader.seen();
    return s.done || s.error ? s : null;
  }, "the end", 60_000);
  assert(seen.error === null, `no error: ${JSON.stringify(seen.error)}`);
  assert(seen.done === "completed", `completed: ${seen.done}`);
  assert(sameList(seen.progress, range(40)), `every step exactly once: ${seen.progress}`);
  assert(seen.retries.length >= 1, "it reconnected");
  await reader.page.close();
  await lb.close();
  await a.stop();
  await b.stop();
});

await step("a 503 from the subscriber limit, then room: the reader waits as asked and gets in", async () => {
  const port = await freePort();
  const bridge = await startBridge(`${server(port)}[limits]\nmax_subscribers_per_channel = 1\n${demoUpstream()}`, "one reader a job");
  const handle = await asyncJob(bridge.base, { to: 20, delay_ms: 300 });
  // Another reader holds the job's only place.
  const holder = new AbortController();
  const held = await fetch(handle.events_url, { signal: holder.signal });
  assert(held.status === 200, `the first reader got in: ${held.status}`);
  const body = held.body.getReader();
  await body.read();
  const reader = await follow(bridge.base, handle.events_url);
  const refused = await until(async () => (await reader.seen()).retries[0], "the refusal");
  assert(refused.status === 503 && refused.reason === "status", `503: ${JSON.stringify(refused)}`);
  assert(refused.retryAfterMs === 5000 && refused.delayMs >= 5000, `Retry-After honoured: ${JSON.stringify(refused)}`);
  holder.abort();
  await body.cancel().catch(() => {});
  const seen = await until(async () => {
    const s = await reader.seen();
    return s.done || s.error ? s : null;
  }, "the end", 60_000);
  assert(seen.done === "completed" && seen.error === null, `completed: ${seen.done} ${JSON.stringify(seen.error)}`);
  assert(sameList(seen.progress, range(20)), `every step once: ${seen.progress}`);
  assert(seen.retries.length === 1, `one wait: ${JSON.stringify(seen.retries)}`);
  await reader.page.close();
  await bridge.stop();
});

await browser.close();
await finish();
