// A reader that comes back after history has lost its gap, on a job that has ended, in headless
// Chromium with the bridge's own client (`/client.js`): it gets `reset`, then the terminal
// event with a later id, and `watchJob` calls onDone and stops (no reconnecting for ever).
// Run by tests/it/web.rs against a bridge whose `[jobs] history` is 3; sets BRIDGE_URL, CHROMIUM.

import { chromium } from "playwright-core";

const base = process.env.BRIDGE_URL ?? "http://127.0.0.1:8080";
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
});
let failed = false;
try {
  const page = await browser.newPage();
  await page.goto(`${base}/`);
  const outcome = await page.evaluate(async () => {
    const { McpClient, parseJobHandle, watchJob, TERMINAL_EVENTS } = await import("/client.js");
    const mcp = new McpClient("/mcp");
    const result = await mcp.callTool(
      "demo__slow_count",
      { to: 12, delay_ms: 1 },
      { meta: { "mcp-progress-bridge/mode": "async" } },
    );
    const handle = parseJobHandle(result);
    const watchToEnd = (url, EventSource) =>
      new Promise((resolve) => {
        const timer = setTimeout(() => resolve({ done: null, watch }), 15_000);
        const watch = watchJob(
          url,
          {
            onDone: (data) => {
              clearTimeout(timer);
              resolve({ done: data, watch });
            },
          },
          { EventSource },
        );
      });
    // First to the end, so history (3 events) has moved past event 1.
    const first = await watchToEnd(handle.events_url, globalThis.EventSource);
    // Then as a reader coming back at event 1: every frame it is sent, with its id.
    const frames = [];
    let opened = 0;
    class Spy extends EventSource {
      constructor(url) {
        super(url);
        this.addEventListener("open", () => (opened += 1));
        for (const type of ["status", "progress", "reset", ...TERMINAL_EVENTS]) {
          this.addEventListener(type, (e) => frames.push([e.lastEventId, type]));
        }
      }
    }
    const url = new URL(handle.events_url, location.href);
    url.searchParams.set("last_event_id", "1");
    const again = await watchToEnd(url.toString(), Spy);
    return {
      first: first.done?.status ?? null,
      done: again.done?.status ?? null,
      connection: again.watch.connection,
      frames,
      opened,
    };
  });
  console.log(JSON.stringify(outcome));
  const check = (ok, what) => {
    console.log(`${ok ? "ok" : "not ok"} - ${what}`);
    if (!ok) failed = true;
  };
  check(outcome.first === "completed", "the job completed");
  check(outcome.done === "completed", "the returning reader's onDone ran with the terminal event");
  check(outcome.connection === "closed", "the watch closed");
  check(
    JSON.stringify(outcome.frames) === JSON.stringify([["12", "reset"], ["13", "completed"]]),
    `reset, then the terminal event with a later id: ${JSON.stringify(outcome.frames)}`,
  );
  check(outcome.opened === 1, `one connection, no reconnect: ${outcome.opened}`);
} catch (error) {
  console.log(`not ok - ${error?.stack ?? error}`);
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
