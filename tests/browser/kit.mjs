// The frontend kit in headless Chromium: the React example (examples/react, its development
// build, so StrictMode mounts every component twice) served by its backend-for-frontend on one
// origin, against a real bridge on another origin that lists the app's in server.cors_origins.
// Run by tests/it/web.rs, which starts the bridge (with an MCP token and a job secret) and sets:
//   BRIDGE_URL    the bridge (its origin differs from the app's: another port)
//   APP_PORT      the port the backend listens on (the bridge's cors_origins names it)
//   BRIDGE_TOKEN  the bridge's MCP token, given to the backend only
//   JOB_SECRET    the bridge's auth.job_secret, for the backend's correlation tokens
//   APP_DIST      the built app (default examples/react/dist-dev)
//   CHROMIUM      the browser (default /usr/bin/chromium)

import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { STEP_TIMEOUT, assert, finish, launchChromium, pageErrors, startProcess, step, until } from "./harness.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const example = path.join(here, "..", "..", "examples", "react");
const bridge = process.env.BRIDGE_URL;
const token = process.env.BRIDGE_TOKEN;
const require = createRequire(import.meta.url);

const backend = await startProcess("node", [path.join(example, "server.mjs")], {
  env: {
    PORT: process.env.APP_PORT,
    BRIDGE_URL: bridge,
    BRIDGE_TOKEN: token,
    JOB_SECRET: process.env.JOB_SECRET,
    APP_DIST: process.env.APP_DIST ?? path.join(example, "dist-dev"),
  },
  banner: /backend on (http:\/\/[\d.:]+)/,
  name: "the example's backend",
});
const app = backend.match[1];

const browser = await launchChromium();
const page = await browser.newPage({ viewport: { width: 1000, height: 1200 } });
const errors = pageErrors(page);
const requests = [];
page.on("request", (r) => requests.push({ url: r.url(), method: r.method(), headers: r.headers() }));
const handedOut = [];
page.on("response", async (r) => {
  if (r.url().endsWith("/api/jobs")) handedOut.push(await r.text().catch(() => ""));
});

const cards = () => page.locator("ul.jobs > li");
const card = (jobId) => page.locator(`ul.jobs > li[data-job-id="${jobId}"]`);
const statusOf = (jobId) => card(jobId).locator("article.mpb-job").getAttribute("data-status");
const barOf = (jobId) => card(jobId).locator("progress").evaluate((p) => (p.hasAttribute("value") ? p.value : null));

async function start(kind, steps) {
  const before = await cards().count();
  if (steps) await page.getByLabel("Steps").fill(String(steps));
  await page.getByRole("button", { name: kind === "ask" ? "Start a job that asks a question" : "Start counting" }).click();
  await until(async () => (await cards().count()) > before, "a new card");
  return cards().first().getAttribute("data-job-id");
}

async function axe(what) {
  if (!(await page.evaluate(() => "axe" in window))) {
    await page.addScriptTag({ path: require.resolve("axe-core/axe.min.js") });
  }
  const result = await page.evaluate(() => window.axe.run(document));
  const found = result.violations.map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
  assert(found.length === 0, `axe-core finds violations ${what}:\n${found.join("\n")}`);
  assert(result.passes.length > 10, `axe ran its rules ${what}`);
}

const jobs = {};

await step("the app on its own origin starts jobs through its backend and shows their progress live", async () => {
  assert(new URL(app).origin !== new URL(bridge).origin, "two origins");
  await page.goto(app);
  await page.getByRole("heading", { name: "Jobs, live" }).waitFor();
  jobs.a = await start("count", 8);
  jobs.b = await start("count", 12);
  // Both bars move at once: live progress of several jobs.
  await until(async () => {
    const [a, b] = [await barOf(jobs.a), await barOf(jobs.b)];
    return a > 0 && a < 1 && b > 0 && b < 1;
  }, "both bars partly filled");
  const count = await card(jobs.b).locator(".mpb-count").textContent();
  assert(/% \(\d+ of 12\)/.test(count), `the count: ${count}`);
  await until(async () => (await statusOf(jobs.a)) === "completed" && (await statusOf(jobs.b)) === "completed", "both completed", 60_000);
  assert((await barOf(jobs.a)) === 1, "bar at 100 %");
  const result = await card(jobs.a).locator(".mpb-result").textContent();
  assert(result.includes("counted to 8"), `result shown: ${result}`);
});

await step("a question is shown as a form and answered; the job completes with the answer", async () => {
  jobs.ask = await start("ask");
  await until(async () => (await statusOf(jobs.ask)) === "input_required", "the question");
  const form = card(jobs.ask).getByRole("form");
  const asked = await form.locator(".mpb-question-message").textContent();
  assert(/colour/.test(asked), `the question: ${asked}`);
  await axe("with the question form open");
  // Empty: refused on the page, naming the field, before anything is sent.
  await form.getByRole("button", { name: "Send answer" }).click();
  await form.locator(".mpb-question-error", { hasText: "content.answer" }).waitFor({ timeout: STEP_TIMEOUT });
  assert((await form.locator("input[name=answer]").getAttribute("aria-invalid")) === "true", "the field is marked");
  await axe("with a refused answer");
  await form.locator("input[name=answer]").fill("teal");
  await form.getByRole("button", { name: "Send answer" }).click();
  await until(async () => (await statusOf(jobs.ask)) === "completed", "the job completes");
  const result = await card(jobs.ask).locator(".mpb-result").textContent();
  assert(result.includes("you said: teal"), `the tool got the answer: ${result}`);
});

await step("Cancel in the component cancels the job", async () => {
  jobs.cancelled = await start("count", 100);
  await until(async () => (await barOf(jobs.cancelled)) > 0, "progress");
  await card(jobs.cancelled).getByRole("button", { name: "Cancel", exact: true }).click();
  await until(async () => (await statusOf(jobs.cancelled)) === "cancelled", "cancelled");
  assert(await card(jobs.cancelled).getByRole("button", { name: "Cancel", exact: true }).isDisabled(), "Cancel disabled at the end");
});

await step("StrictMode mounts every component twice, and each job's stream is opened once", async () => {
  for (const [name, id] of Object.entries(jobs)) {
    const opened = requests.filter((r) => r.method === "GET" && new URL(r.url).pathname === `/jobs/${id}/events`);
    assert(opened.length === 1, `job ${name}: ${opened.length} requests for its stream:\n${opened.map((r) => r.url).join("\n")}`);
  }
});

await step("the browser holds only capability URLs: no MCP call, no credential, the token nowhere", async () => {
  const toBridge = requests.filter((r) => r.url.startsWith(bridge));
  assert(toBridge.length >= 5, `requests to the bridge: ${toBridge.length}`);
  for (const r of toBridge) {
    assert(!new URL(r.url).pathname.startsWith("/mcp"), `the page called /mcp: ${r.url}`);
    assert(new URL(r.url).searchParams.get("token"), `a capability URL: ${r.url}`);
    assert(!("authorization" in r.headers), `no Authorization header: ${r.url}`);
  }
  const started = Object.keys(jobs).length;
  assert(handedOut.length === started, `the backend answered ${started} starts: ${handedOut.length}`);
  for (const body of handedOut) {
    assert(!body.includes(token), "the MCP token is not in what the backend hands out");
    const handle = JSON.parse(body);
    assert(sameKeys(handle, ["job_id", "tool", "events_url", "cancel_url", "input_url"]), `only the URLs: ${body}`);
  }
});

await step("'my jobs' follows the session's correlation stream (minted by the backend)", async () => {
  const mine = page.locator("ul.mine > li");
  const started = Object.keys(jobs).length;
  // As patient as the steps above on a machine busy with the other tests (30 s timed out once).
  await until(async () => (await mine.count()) === started, `${started} jobs in 'my jobs'`, 60_000);
  await until(async () => (await page.locator("ul.mine > li[data-status=completed]").count()) === started - 1, "all but one completed", 60_000);
  assert((await page.locator("ul.mine > li[data-status=cancelled]").count()) === 1, "one cancelled");
});

await step("axe-core finds no violation in the finished components", async () => {
  await axe("with completed and cancelled jobs");
  await page.screenshot({ path: path.join(process.env.SCREENSHOT_DIR ?? here, "react-example.png"), fullPage: true });
});

await step("no script errors", async () => {
  assert(errors.length === 0, `page errors:\n${errors.join("\n")}`);
});

function sameKeys(object, keys) {
  return JSON.stringify(Object.keys(object).sort()) === JSON.stringify([...keys].sort());
}

await browser.close();
await finish();
