// MCP 2025-11-25 tasks through the bridge, with the official TypeScript SDK 1.x client
// (npm @modelcontextprotocol/sdk, `client.experimental.tasks`), driven by tests/it/tasks_2025.rs.
//
// Usage: node ts_tasks_client.mjs URL TOKEN_A TOKEN_B PAGE_SIZE MAX_TTL_MS
// The bridge behind URL serves the demo tools as `demo` and server-everything as `everything`,
// every call in sync mode, and `jobs.task_list_page_size` = PAGE_SIZE. MAX_TTL_MS: the largest
// ttl a task may report (the retention plus a margin).
// Prints "ok: …" lines and "all checks passed", or exits 1 after "FAIL: …".

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, CreateTaskResultSchema, ListTasksResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { check, streamed } from "./scenario.mjs";

const [url, tokenA, tokenB, pageSizeArg, maxTtlArg] = process.argv.slice(2);
const pageSize = Number(pageSizeArg);
const maxTtl = Number(maxTtlArg);
const SLOW = "demo__slow_count";
const RESEARCH = "everything__simulate-research-query";

async function connect(token) {
  const client = new Client({ name: "bridge-tasks-ts", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

/// The JSON-RPC error code a promise is refused with (null if it is not refused).
async function codeOf(promise) {
  try {
    await promise;
    return null;
  } catch (e) {
    return e.code ?? e.name;
  }
}

/// What a result says, without the `_meta` that names its job (another job for each call).
const content = (result) => JSON.stringify({ content: result.content, isError: result.isError ?? false });

/// Create a task without waiting for it.
async function createTask(client, name, args, task = {}) {
  return client.request({ method: "tools/call", params: { name, arguments: args, task } }, CreateTaskResultSchema);
}

async function until(what, probe) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) check(false, `in time: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const a = await connect(tokenA);
const caps = a.getServerCapabilities();
check(caps?.tasks?.requests?.tools?.call != null, "the bridge declares tasks.requests.tools.call");
check(caps?.tasks?.list != null && caps?.tasks?.cancel != null, "the bridge declares tasks.list and tasks.cancel");

const { tools } = await a.listTools();
const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
check(byName[SLOW]?.execution?.taskSupport === "optional", `${SLOW} is listed taskSupport optional`);
check(byName[RESEARCH]?.execution?.taskSupport === "optional", `${RESEARCH} (required upstream) is listed optional`);
check(byName.wait_for_job && byName.wait_for_job.execution == null, "the job tools are not offered as tasks");

// A slow tool as a task: the same result a plain call gives.
const args = { to: 4, delay_ms: 150 };
const plain = await a.callTool({ name: SLOW, arguments: args });
const run = await streamed(a, SLOW, args);
check(run.error == null, `callToolStream ran without error (${run.error?.message})`);
check(/^[0-9a-f]{32}$/.test(run.task?.taskId ?? ""), `the task ID is a job ID (${run.task?.taskId})`);
check(run.task.ttl <= maxTtl && run.task.pollInterval > 0, `the task has a bounded ttl (${run.task.ttl}) and a pollInterval`);
check(run.statuses.includes("working") && run.statuses.at(-1) === "completed", `statuses: ${run.statuses}`);
check(content(run.result) === content(plain), "the task's result is what a plain call returns");
check(run.result._meta?.["io.modelcontextprotocol/related-task"]?.taskId === run.task.taskId, "tasks/result names its task");
check(run.result._meta?.["mcp-progress-bridge/job"]?.events_url?.includes(run.task.taskId), "and the job's events_url");

// The tool its upstream runs only as a task: plainly, and as a task.
const research = await a.callTool({ name: RESEARCH, arguments: { topic: "bridges" } });
check(!research.isError && research.content[0].text.includes("Research Report: bridges"), "a plain callTool of the required tool works");
const researched = await streamed(a, RESEARCH, { topic: "bridges" });
check(researched.error == null && content(researched.result) === content(research), "as a task it gives the same report");

// tasks/cancel reaches the upstream.
const long = await createTask(a, SLOW, { to: 1000, delay_ms: 50 });
const cancelled = await a.experimental.tasks.cancelTask(long.task.taskId);
check(["cancelled", "working"].includes(cancelled.status), `tasks/cancel answers with the task (${cancelled.status})`);
await until("the task is cancelled", async () => (await a.experimental.tasks.getTask(long.task.taskId)).status === "cancelled");
check(true, "the cancelled task reads cancelled");
const seen = await until("the upstream saw the cancel", async () => {
  const r = await a.callTool({ name: "demo__cancellations", arguments: {} });
  const list = JSON.parse(r.content[0].text).cancelled ?? [];
  return list.some((c) => c.tool === "slow_count") && list;
});
check(seen.length >= 1, "the upstream got notifications/cancelled");
check((await codeOf(a.experimental.tasks.cancelTask(long.task.taskId))) === -32602, "cancelling an ended task is -32602");
const afterCancel = await a.experimental.tasks.getTaskResult(long.task.taskId, CallToolResultSchema);
check(afterCancel.isError === true && afterCancel.content[0].text.includes("cancelled"), "tasks/result of a cancelled task is the sync call's tool error");

// tasks/list: the caller's own, a page at a time.
const mine = [run.task.taskId, researched.task.taskId, long.task.taskId];
const listed = [];
let cursor;
let pages = 0;
do {
  const page = await a.experimental.tasks.listTasks(cursor);
  check(page.tasks.length <= pageSize, `a page holds at most ${pageSize} tasks (${page.tasks.length})`);
  listed.push(...page.tasks.map((t) => t.taskId));
  cursor = page.nextCursor;
  pages += 1;
} while (cursor && pages < 100);
check(mine.every((id) => listed.includes(id)), "tasks/list holds every task of this caller");
check(new Set(listed).size === listed.length, "no task is listed twice");
check(pages >= 2, `the list came in pages (${pages})`);

// Another principal sees none of them.
const b = await connect(tokenB);
for (const id of mine) {
  check((await codeOf(b.experimental.tasks.getTask(id))) === -32602, `tasks/get of A's task as B is -32602`);
  check((await codeOf(b.experimental.tasks.getTaskResult(id, CallToolResultSchema))) === -32602, `tasks/result of A's task as B is -32602`);
}
check((await codeOf(b.experimental.tasks.cancelTask(long.task.taskId))) === -32602, "tasks/cancel of A's task as B is -32602");
const theirs = await b.experimental.tasks.listTasks();
check(!theirs.tasks.some((t) => mine.includes(t.taskId)), "B's tasks/list holds none of A's tasks");
check((await codeOf(b.experimental.tasks.listTasks(run.task.taskId))) === -32602, "A's task ID is no cursor for B");

// Hostile requests.
check((await codeOf(a.experimental.tasks.listTasks("garbage"))) === -32602, "a garbage cursor is -32602");
check((await codeOf(a.request({ method: "tasks/list", params: { cursor: 5 } }, ListTasksResultSchema))) === -32602, "a cursor that is no string is -32602");
check((await codeOf(a.experimental.tasks.getTaskResult("0".repeat(32), CallToolResultSchema))) === -32602, "tasks/result of an unknown task is -32602");
check((await codeOf(a.experimental.tasks.getTask("x".repeat(10000)))) === -32602, "tasks/get of a long garbage ID is -32602");
const huge = await createTask(a, SLOW, { to: 1, delay_ms: 1 }, { ttl: 1e15 });
check(huge.task.ttl <= maxTtl, `a huge requested ttl is bounded by the retention (${huge.task.ttl})`);
check((await codeOf(createTask(a, SLOW, { to: 1 }, { ttl: "forever" }))) === -32602, "a ttl that is no number is -32602");
check((await codeOf(createTask(a, SLOW, { to: 1 }, "now"))) === -32602, "a task that is no object is -32602");
check((await codeOf(createTask(a, "wait_for_job", { job_id: "0".repeat(32) }))) === -32601, "a job tool as a task is -32601");
check((await codeOf(createTask(a, "demo__no_such_tool", {}))) !== null, "an unknown tool as a task is an error");

await a.close();
await b.close();
console.log("all checks passed");
