// What the TypeScript SDK scenario scripts of tests/it/tasks_2025.rs share (ts_tasks_client.mjs,
// ts_tasks_questions.mjs): their checks, and running a tool as a 2025-11-25 task to its end.

/// Print "ok: message", or "FAIL: message" and exit 1.
export function check(condition, message) {
  if (!condition) {
    console.log(`FAIL: ${message}`);
    process.exit(1);
  }
  console.log(`ok: ${message}`);
}

/// Run `callToolStream` to its end: the task it made, the statuses seen, and the result.
export async function streamed(client, name, args) {
  let task = null;
  let result = null;
  let error = null;
  const statuses = [];
  for await (const message of client.experimental.tasks.callToolStream({ name, arguments: args })) {
    if (message.type === "taskCreated") task = message.task;
    if (message.type === "taskStatus") statuses.push(message.task.status);
    if (message.type === "result") result = message.result;
    if (message.type === "error") error = message.error;
  }
  return { task, statuses, result, error };
}
