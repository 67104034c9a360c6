// A 2025-11-25 task's question asked of the client on its tasks/result, and the task's
// notifications/tasks/status, with the official TypeScript SDK 1.x client
// (`client.experimental.tasks`), driven by tests/it/tasks_2025.rs.
//
// Usage: node ts_tasks_questions.mjs URL TOKEN INPUT_TIMEOUT_MS MAX_STATUS_NOTIFICATIONS
// (TOKEN empty: no Authorization header, for a bridge without MCP tokens)
// The bridge behind URL serves the demo tools as `demo` (demo__ask asks a question `times`
// times, a form with a required string `answer`) with `jobs.input_timeout_secs` =
// INPUT_TIMEOUT_MS / 1000 and `jobs.max_task_status_notifications` = MAX_STATUS_NOTIFICATIONS.
// Prints "ok: …" lines and "all checks passed", or exits 1 after "FAIL: …".

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, CreateTaskResultSchema, ElicitRequestSchema, TaskStatusNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { check, streamed } from "./scenario.mjs";

const [url, token, timeoutArg, maxNotesArg] = process.argv.slice(2);
const inputTimeoutMs = Number(timeoutArg);
const maxNotes = Number(maxNotesArg);
const ASK = "demo__ask";
const RELATED = "io.modelcontextprotocol/related-task";

// What the client does with the next question; set per scenario.
let onQuestion = async () => ({ action: "decline" });
const questions = [];
// notifications/tasks/status received, by task ID: the statuses in order.
const notes = {};

async function connect(elicits) {
  const client = new Client(
    { name: "bridge-tasks-questions", version: "1.0.0" },
    { capabilities: elicits ? { elicitation: { form: {} } } : {} },
  );
  if (elicits) {
    client.setRequestHandler(ElicitRequestSchema, async (request, extra) => {
      questions.push(request);
      return onQuestion(request, extra);
    });
  }
  client.setNotificationHandler(TaskStatusNotificationSchema, (n) => {
    (notes[n.params.taskId] ??= []).push(n.params.status);
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: token ? { headers: { Authorization: `Bearer ${token}` } } : {},
  });
  await client.connect(transport);
  return client;
}

/// The job's whole event stream (it ends after the terminal event).
async function events(result) {
  const eventsUrl = result._meta?.["mcp-progress-bridge/job"]?.events_url;
  const response = await fetch(eventsUrl, { signal: AbortSignal.timeout(30_000) });
  return response.text();
}

const text = (result) => result?.content?.[0]?.text;

/// The statuses notified for a task, once its end has been notified.
async function notified(taskId) {
  const terminal = ["completed", "failed", "cancelled"];
  for (let i = 0; i < 300 && !terminal.includes(notes[taskId]?.at(-1)); i++) {
    await new Promise((r) => setTimeout(r, 100));
  }
  return notes[taskId] ?? [];
}
const a = await connect(true);
// callToolStream makes a task only of a tool it has seen listed with taskSupport.
await a.listTools();

// 1. The question reaches the client on tasks/result; its answer reaches the tool.
let seenStatus = null;
onQuestion = async (request) => {
  const taskId = request.params._meta?.[RELATED]?.taskId;
  seenStatus = taskId ? (await a.experimental.tasks.getTask(taskId)).status : null;
  return { action: "accept", content: { answer: "blue" } };
};
const run = await streamed(a, ASK, { question: "Which colour?" });
check(run.error == null, `callToolStream ran without error (${run.error?.message})`);
check(run.statuses.includes("input_required"), `tasks/get showed input_required (${run.statuses})`);
check(questions.length === 1 && questions[0].params.message === "Which colour?", "the client was asked the question once");
check(questions[0].params._meta?.[RELATED]?.taskId === run.task.taskId, "the question names its task (related-task)");
check(seenStatus === "input_required", `tasks/get while the question waits: ${seenStatus}`);
check(text(run.result) === "you said: blue", `the client's answer reached the tool (${text(run.result)})`);
check(run.result._meta?.[RELATED]?.taskId === run.task.taskId, "tasks/result names its task");
const answered = await events(run.result);
check(/event: input_answered\ndata: .*"by":"tasks\/result"/.test(answered), "the job's channel says tasks/result answered");
const told = await notified(run.task.taskId);
// A change may be passed over when the next one comes first (working between the answer and
// the end): each notification tells where the task is then.
check(told[0] === "input_required" && told.at(-1) === "completed", `notifications/tasks/status told the changes (${told})`);
check(told.every((s, i) => i === 0 || s !== told[i - 1]), "no status is told twice in a row");

// 2. An answer that does not fit the schema: the question is declined, and the job says why.
questions.length = 0;
onQuestion = async () => ({ action: "accept", content: { colour: "blue" } });
const unfit = await streamed(a, ASK, { question: "Which colour, again?" });
check(text(unfit.result) === "no answer: declined", `an unfit answer is declined (${text(unfit.result)})`);
const unfitEvents = await events(unfit.result);
check(unfitEvents.includes("was declined: the answer from tasks/result was not taken") && unfitEvents.includes("answer"),
  "the job's channel says why it was declined");
check(!unfitEvents.includes('"by":"timeout"'), "declined at once, not by the timeout");

// 3. A client that never answers: the question times out as for anybody, and the client's
// request is cancelled.
questions.length = 0;
let aborted = false;
onQuestion = (_request, extra) =>
  new Promise(() => extra.signal.addEventListener("abort", () => { aborted = true; }));
const started = Date.now();
const silent = await streamed(a, ASK, { question: "Anyone?" });
check(text(silent.result) === "no answer: declined", `an unanswered question is declined (${text(silent.result)})`);
check(Date.now() - started >= inputTimeoutMs - 500, `after jobs.input_timeout_secs (${Date.now() - started} ms)`);
check(/"by":"timeout"/.test(await events(silent.result)), "the job's channel says by timeout");
for (let i = 0; i < 100 && !aborted; i++) await new Promise((r) => setTimeout(r, 100));
check(aborted, "the client's request for the question was cancelled");

// 4. A person answers on input_url while the client is asked: the first answer wins.
questions.length = 0;
const created = await a.request({ method: "tools/call", params: { name: ASK, arguments: { question: "Race?" }, task: {} } }, CreateTaskResultSchema);
const inputUrl = created._meta?.["mcp-progress-bridge/job"]?.input_url;
check(typeof inputUrl === "string", "the task carries input_url");
let personStatus = null;
// The person's answer ends the job, so the task's result can reach the client before the
// response to the person's POST does: the handler is awaited before its status is read.
let asking = null;
onQuestion = () => {
  asking = (async () => {
    const response = await fetch(inputUrl, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ action: "accept", content: { answer: "from a person" } }),
    });
    personStatus = response.status;
    return { action: "accept", content: { answer: "from the client" } };
  })();
  return asking;
};
const raced = await a.experimental.tasks.getTaskResult(created.task.taskId, CallToolResultSchema);
await asking?.catch(() => {});
check(personStatus === 200, `the person's answer was taken (${personStatus})`);
check(text(raced) === "you said: from a person", `the first answer won (${text(raced)})`);

// 5. A flood of status changes (a tool asking again and again, answered at once): at most
// MAX_STATUS_NOTIFICATIONS are sent, and the end always.
onQuestion = async () => ({ action: "accept", content: { answer: "again" } });
const times = maxNotes + 5;
const flood = await streamed(a, ASK, { question: "Again?", times });
check(text(flood.result) === Array(times).fill("you said: again").join("; "), `every question was answered (${text(flood.result)})`);
const flooded = await notified(flood.task.taskId);
check(flooded.length <= maxNotes + 1 && flooded.at(-1) === "completed", `at most ${maxNotes} notifications and the end (${flooded})`);

await a.close();
console.log("all checks passed");
