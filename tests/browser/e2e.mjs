// End-to-end test of the jobs page in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core; no browser is downloaded). Run by tests/it/web.rs, which starts a bridge with the
// demo tools behind a TCP proxy that can cut every connection, and sets:
//   BRIDGE_URL      the page's base URL (through the proxy)
//   CONTROL_URL     POST {CONTROL_URL}/drop cuts every open connection (optional: the resume
//                   step is skipped without it)
//   SCREENSHOT_DIR  where the screenshots go (default ../../target/browser)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//   JOB_SECRET      the bridge's auth.job_secret, to mint a correlation token as an
//                   application backend would (the correlation step is skipped without it)
// By hand: start a bridge (`cargo run`), then `BRIDGE_URL=http://127.0.0.1:8080 node e2e.mjs`.

import { createHmac } from "node:crypto";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

const here = path.dirname(fileURLToPath(import.meta.url));
const base = process.env.BRIDGE_URL ?? "http://127.0.0.1:8080";
const control = process.env.CONTROL_URL;
const shots = process.env.SCREENSHOT_DIR ?? path.join(here, "..", "..", "target", "browser");
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const STEP_TIMEOUT = 30_000;
const jobSecret = process.env.JOB_SECRET;

/// A correlation token valid for an hour, by the formula in docs/security.md (what an
/// application backend mints): `<expires>.` + base64url(HMAC(secret, "v2:correlation:<expires>:<cid>")).
function correlationToken(cid) {
  const expires = Math.floor(Date.now() / 1000) + 3600;
  const mac = createHmac("sha256", jobSecret).update(`v2:correlation:${expires}:${cid}`).digest("base64url");
  return `${expires}.${mac}`;
}

mkdirSync(shots, { recursive: true });
let failures = 0;
let passed = 0;

function log(line) {
  process.stdout.write(`${line}\n`);
}

async function step(name, body) {
  const started = Date.now();
  try {
    await body();
    passed += 1;
    log(`ok - ${name} (${Date.now() - started} ms)`);
  } catch (error) {
    failures += 1;
    log(`not ok - ${name}\n  ${String(error?.stack ?? error).split("\n").join("\n  ")}`);
    await page?.screenshot({ path: path.join(shots, `failed-${name.replace(/\W+/g, "-")}.png`), fullPage: true }).catch(() => {});
  }
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

function sameList(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

const range = (n) => Array.from({ length: n }, (_, i) => i + 1);

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
  ],
});
const context = await browser.newContext({ viewport: { width: 1000, height: 900 }, deviceScaleFactor: 1 });
const page = await context.newPage();
const pageErrors = [];
page.on("pageerror", (error) => pageErrors.push(String(error)));
page.on("console", (message) => {
  // A cut connection makes Chromium log a network error for the EventSource: expected.
  if (message.type() === "error" && !/net::|Failed to load resource|EventSource/.test(message.text())) {
    pageErrors.push(message.text());
  }
});

/** Start a call from the form; returns the new card's locator once it has a job ID. */
async function callTool(args, { mode = "", correlation = "", tool = "demo__slow_count" } = {}) {
  const before = await page.locator("#jobs > li").count();
  await page.getByLabel("Tool", { exact: true }).selectOption(tool);
  await page.getByLabel("Arguments (JSON object)").fill(JSON.stringify(args));
  await page.getByLabel("Mode").selectOption(mode);
  await page.getByLabel("Correlation ID (optional)").fill(correlation);
  await page.getByRole("button", { name: "Call tool" }).click();
  await page.waitForFunction((n) => document.querySelectorAll("#jobs > li").length > n, before);
  const card = page.locator("#jobs > li").first();
  return card;
}

async function jobIdOf(card) {
  await card.locator("code.job-id").filter({ hasText: /[0-9a-f]{32}/ }).waitFor({ timeout: STEP_TIMEOUT });
  return (await card.locator("code.job-id").textContent()).trim();
}

async function seen(jobId) {
  return page.evaluate((id) => window.bridgePage.seen()[id], jobId);
}

async function progressOf(card) {
  return card.evaluate((node) => node.querySelector("progress").value);
}

async function waitStatus(card, status) {
  await card.locator(`.job-status[data-status="${status}"]`).waitFor({ timeout: STEP_TIMEOUT });
}

await step("the page loads and lists the bridge's tools", async () => {
  await page.goto(`${base}/`);
  await page.waitForFunction(() => !document.querySelector("#tool").disabled, null, { timeout: STEP_TIMEOUT });
  const options = await page.locator("#tool option").allTextContents();
  assert(options.includes("demo__slow_count"), `tools: ${options}`);
  assert(options.includes("wait_for_job"), `tools: ${options}`);
  const args = JSON.parse(await page.getByLabel("Arguments (JSON object)").inputValue());
  assert(args.to === 10 && args.delay_ms === 500, `arguments prefilled from the schema defaults: ${JSON.stringify(args)}`);
});

let firstJob;
await step("a slow_count job: the bar goes to 100 % and the result appears", async () => {
  const card = await callTool({ to: 8, delay_ms: 250 }, { mode: "async" });
  firstJob = await jobIdOf(card);
  // Mid-job: the bar is determinate and moving; this is the README's screenshot.
  await page.waitForFunction((id) => (window.bridgePage.seen()[id] ?? []).length >= 4, firstJob, { timeout: STEP_TIMEOUT });
  const mid = await progressOf(card);
  assert(mid > 0 && mid < 1, `bar partly filled mid-job: ${mid}`);
  await page.screenshot({ path: path.join(shots, "jobs-page-running.png") });
  await waitStatus(card, "completed");
  assert((await progressOf(card)) === 1, "bar at 100 %");
  assert((await card.locator(".job-count").textContent()).includes("100 %"), "count says 100 %");
  const result = await card.locator(".job-result").textContent();
  assert(result.includes("counted to 8"), `result shown: ${result}`);
  assert(sameList(await seen(firstJob), range(8)), `every step once: ${await seen(firstJob)}`);
  await page.screenshot({ path: path.join(shots, "jobs-page-completed.png"), fullPage: true });
});

await step("a second job is cancelled with its Cancel button (keyboard)", async () => {
  const card = await callTool({ to: 1000, delay_ms: 100 }, { mode: "async" });
  const id = await jobIdOf(card);
  await page.waitForFunction((j) => (window.bridgePage.seen()[j] ?? []).length >= 2, id, { timeout: STEP_TIMEOUT });
  await card.getByRole("button", { name: "Cancel" }).focus();
  await page.keyboard.press("Enter");
  await waitStatus(card, "cancelled");
  const outcome = await card.locator(".job-outcome").textContent();
  assert(/Cancelled/.test(outcome) && /cancel/i.test(outcome), `cancellation shown: ${outcome}`);
  assert(await card.getByRole("button", { name: "Cancel" }).isDisabled(), "Cancel disabled after the end");
  await page.screenshot({ path: path.join(shots, "jobs-page-cancelled.png"), fullPage: true });
});

await step("cutting the SSE connection mid-job: the page shows reconnecting and resumes with no lost step", async () => {
  if (!control) {
    log("# skipped: CONTROL_URL not set, no way to cut connections");
    return;
  }
  const card = await callTool({ to: 12, delay_ms: 300 }, { mode: "async" });
  const id = await jobIdOf(card);
  await page.waitForFunction((j) => (window.bridgePage.seen()[j] ?? []).length >= 3, id, { timeout: STEP_TIMEOUT });
  const response = await fetch(`${control}/drop`, { method: "POST" });
  assert(response.ok, `drop answered ${response.status}`);
  await card.locator('.job-connection[data-connection="reconnecting"]').waitFor({ timeout: STEP_TIMEOUT });
  await page.screenshot({ path: path.join(shots, "jobs-page-reconnecting.png") });
  // Resumed and running, beside a finished and a cancelled job: the README's picture.
  await page.waitForFunction((j) => (window.bridgePage.seen()[j] ?? []).length >= 7, id, { timeout: STEP_TIMEOUT });
  await page.locator("section[aria-labelledby=jobs-heading]").screenshot({ path: path.join(shots, "readme-jobs.png") });
  await waitStatus(card, "completed");
  const steps = await seen(id);
  assert(sameList(steps, range(12)), `every step exactly once across the cut: ${steps}`);
});

await step("a sync call shows progress from the MCP request itself, then its job", async () => {
  const card = await callTool({ to: 4, delay_ms: 200 }, { mode: "sync" });
  await waitStatus(card, "completed");
  const result = await card.locator(".job-result").textContent();
  assert(result.includes("counted to 4"), `result: ${result}`);
  const id = await jobIdOf(card);
  assert(sameList(await seen(id), range(4)), `steps: ${await seen(id)}`);
});

await step("a tool's question is answered through the page's form, and the job completes with the answer", async () => {
  const card = await callTool({ question: "Which colour?" }, { mode: "async", tool: "demo__ask" });
  await jobIdOf(card);
  await waitStatus(card, "input_required");
  const form = card.locator(".job-input form");
  await form.waitFor({ timeout: STEP_TIMEOUT });
  const asked = await form.locator(".question-message").textContent();
  assert(asked === "Which colour?", `the question is shown: ${asked}`);
  const field = form.locator("input[name=answer]");
  assert(await field.isVisible(), "a field for the schema's `answer`");
  assert((await field.getAttribute("required")) !== null, "required, as the schema says");
  for (const name of ["Send answer", "Decline", "Cancel"]) {
    assert(await form.getByRole("button", { name, exact: true }).isVisible(), `button ${name}`);
  }
  // Empty: refused on the page, naming the field, before anything is sent.
  await form.getByRole("button", { name: "Send answer" }).click();
  await form.locator(".error", { hasText: "content.answer" }).waitFor({ timeout: STEP_TIMEOUT });
  assert((await field.getAttribute("aria-invalid")) === "true", "the field is marked invalid");
  assert((await card.locator(".job-status").getAttribute("data-status")) === "input_required", "still asking");
  await page.screenshot({ path: path.join(shots, "jobs-page-question.png"), fullPage: true });
  await field.fill("teal");
  await form.getByRole("button", { name: "Send answer" }).click();
  await waitStatus(card, "completed");
  const result = await card.locator(".job-result").textContent();
  assert(result.includes("you said: teal"), `the tool got the answer: ${result}`);
  assert(await card.locator(".job-input").isHidden(), "the form goes away once answered");
});

await step("the follow view: a pasted job ID, and a correlation ID followed before its job starts", async () => {
  // The job's events URL, as an application hands it to its frontend (it carries the job's
  // read token).
  const eventsUrl = await page.locator(`#jobs > li[data-job-id="${firstJob}"] .job-events`).getAttribute("href");
  await page.getByLabel("Job ID, correlation ID or events URL").fill(eventsUrl);
  await page.getByRole("button", { name: "Follow" }).click();
  const followed = page.locator("#followed > li.job").first();
  await waitStatus(followed, "completed");
  assert((await followed.locator(".job-result").textContent()).includes("counted to 8"), "replayed result");

  if (!jobSecret) {
    log("# no JOB_SECRET: the correlation part of this step is skipped");
    return;
  }
  const cid = `e2e-${Date.now()}`;
  await page.getByLabel("Job ID, correlation ID or events URL").fill(cid);
  await page.getByLabel("Token (optional)").fill(correlationToken(cid));
  await page.getByRole("button", { name: "Follow" }).click();
  await page.locator("#followed > li.correlation").first().waitFor();
  await callTool({ to: 5, delay_ms: 150 }, { mode: "async", correlation: cid });
  const inCorrelation = page.locator("#followed > li.correlation").first().locator("li.job").first();
  await waitStatus(inCorrelation, "completed");
  const id = await jobIdOf(inCorrelation);
  assert(sameList(await seen(id), range(5)), `correlation view saw every step: ${await seen(id)}`);
});

await step("a reload keeps the jobs started here, replayed from their streams", async () => {
  const before = await page.locator("#jobs > li").count();
  await page.reload();
  await page.waitForFunction(
    (n) => {
      const cards = [...document.querySelectorAll("#jobs > li")];
      return cards.length === n && cards.every((c) => ["completed", "cancelled", "failed"].includes(c.dataset.status));
    },
    before,
    { timeout: STEP_TIMEOUT },
  );
  assert(sameList(await seen(firstJob), range(8)), `the first job replayed every step: ${await seen(firstJob)}`);
});

await step("bad arguments are reported next to the field", async () => {
  // After the reload, the form submits once the tool list is back.
  await page.locator("#tool option[value='demo__slow_count']").waitFor({ state: "attached", timeout: STEP_TIMEOUT });
  await page.getByLabel("Arguments (JSON object)").fill("{to: 3");
  await page.getByRole("button", { name: "Call tool" }).click();
  await page.locator("#args-error", { hasText: "Invalid arguments" }).waitFor({ timeout: STEP_TIMEOUT });
  const error = await page.locator("#args-error").textContent();
  assert(/Invalid arguments/.test(error), `error: ${error}`);
  assert((await page.getByLabel("Arguments (JSON object)").getAttribute("aria-invalid")) === "true", "aria-invalid set");
});

await step("when /mcp answers 401 the page asks for the bearer token and sends it", async () => {
  // The bridge's auth layer is stood in for by a gate in front of /mcp (this bridge runs without
  // tokens): no or a wrong Authorization header gets 401, the right one goes through.
  const gated = await context.newPage();
  const seenAuth = [];
  await gated.route("**/mcp", (route) => {
    const auth = route.request().headers().authorization;
    seenAuth.push(auth ?? null);
    if (auth !== "Bearer s3cret") {
      return route.fulfill({ status: 401, headers: { "www-authenticate": "Bearer" }, body: "missing or wrong bearer token" });
    }
    return route.continue();
  });
  await gated.goto(`${base}/`);
  await gated.getByLabel("Bearer token for /mcp").waitFor({ timeout: STEP_TIMEOUT });
  const why = await gated.locator("#auth-why").textContent();
  assert(/needs a token/.test(why), `the page says why: ${why}`);
  await gated.getByLabel("Bearer token for /mcp").fill("s3cret");
  await gated.getByRole("button", { name: "Use token" }).click();
  await gated.waitForFunction(() => !document.querySelector("#tool").disabled, null, { timeout: STEP_TIMEOUT });
  assert(await gated.locator("#auth-form").isHidden(), "the token form goes away");
  assert(seenAuth.at(-1) === "Bearer s3cret", `the token is sent: ${seenAuth}`);
  await gated.close();
});

await step("no script errors on the page", async () => {
  assert(pageErrors.length === 0, `page errors:\n${pageErrors.join("\n")}`);
});

await page.screenshot({ path: path.join(shots, "jobs-page.png"), fullPage: true }).catch(() => {});
await browser.close();
log(`# screenshots in ${shots}`);
log(`${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
