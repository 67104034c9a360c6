// A Streamable HTTP MCP server (the TypeScript SDK 1.x, its 2025-11-25 tasks) for the bridge's
// upstream-task tests. Run: `node task_http_server.mjs <port> [--json]`.
//
// - `--json`: answers every POST with a plain JSON body (`enableJsonResponse`), never an SSE
//   stream, so `tools/list` reaches the bridge as one JSON document.
// - Its tool `staged` declares `execution.taskSupport: "required"`: a task that goes through
//   `steps` stages (`stage 1/3` …), `step_ms` apart, and completes with `done: <topic>`.
// - Tasks are kept by the process, not by the MCP session (the store ignores the session ID),
//   as a server that binds tasks to its callers' credentials would: a client that reconnects
//   (a new session) can still poll and fetch a task it started before.
// - `--session-tasks`: each task is known only to the session that made it (server-everything's
//   way): another client must use that session's `Mcp-Session-Id` to poll it.
// - `POST /admin/outage?ms=N` answers every other request with 503 for N ms and ends the open
//   sessions (and their streams): a cut connection, with the tasks running on.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from "@modelcontextprotocol/sdk/experimental/tasks";
import { z } from "zod";

const port = Number(process.argv[2]);
const json = process.argv.includes("--json");
const sessionTasks = process.argv.includes("--session-tasks");

/** The SDK's store: every session's tasks visible to every session, or (`--session-tasks`)
 * each task only to the session that made it, as server-everything keeps them. */
const inner = new InMemoryTaskStore();
const bound = (sessionId) => (sessionTasks ? sessionId : undefined);
const store = {
  createTask: (params, requestId, request, sessionId) =>
    inner.createTask(params, requestId, request, bound(sessionId)),
  getTask: (taskId, sessionId) => inner.getTask(taskId, bound(sessionId)),
  storeTaskResult: (taskId, status, result, sessionId) =>
    inner.storeTaskResult(taskId, status, result, bound(sessionId)),
  getTaskResult: (taskId, sessionId) => inner.getTaskResult(taskId, bound(sessionId)),
  updateTaskStatus: (taskId, status, message, sessionId) =>
    inner.updateTaskStatus(taskId, status, message, bound(sessionId)),
  listTasks: (cursor, sessionId) => inner.listTasks(cursor, bound(sessionId)),
};
const queue = new InMemoryTaskMessageQueue();

function newServer() {
  const server = new McpServer(
    { name: "task-http-server", version: "1.0.0" },
    {
      capabilities: { tools: {}, tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
      taskStore: store,
      taskMessageQueue: queue,
    },
  );
  server.experimental.tasks.registerToolTask(
    "staged",
    {
      description: "A task in stages",
      inputSchema: { topic: z.string(), steps: z.number().optional(), step_ms: z.number().optional() },
      execution: { taskSupport: "required" },
    },
    {
      createTask: async (args, extra) => {
        const task = await extra.taskStore.createTask({ ttl: 600000, pollInterval: 200 });
        const steps = args.steps ?? 3;
        const stepMs = args.step_ms ?? 300;
        // A task cancelled meanwhile ends its stages with an error and is terminal: no status may
        // follow, so the attempt to mark it failed is let go (unhandled, it would stop node).
        (async () => {
          for (let i = 1; i <= steps; i++) {
            await store.updateTaskStatus(task.taskId, "working", `stage ${i}/${steps}`);
            await new Promise((r) => setTimeout(r, stepMs));
          }
          await store.storeTaskResult(task.taskId, "completed", {
            content: [{ type: "text", text: `done: ${args.topic}` }],
          });
        })().catch((e) => store.updateTaskStatus(task.taskId, "failed", String(e)).catch(() => {}));
        return { task };
      },
      getTask: async (_args, extra) => store.getTask(extra.taskId, extra.sessionId),
      getTaskResult: async (_args, extra) => store.getTaskResult(extra.taskId, extra.sessionId),
    },
  );
  return server;
}

const sessions = new Map();
let outageUntil = 0;

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? JSON.parse(text) : undefined;
}

http
  .createServer(async (req, res) => {
    try {
      const url = new URL(req.url, "http://localhost");
      if (url.pathname === "/admin/outage") {
        outageUntil = Date.now() + Number(url.searchParams.get("ms") ?? 1000);
        const open = [...sessions.values()];
        sessions.clear();
        for (const transport of open) await transport.close();
        res.writeHead(200).end(`closed ${open.length} session(s)`);
        return;
      }
      if (Date.now() < outageUntil) {
        res.writeHead(503, { "retry-after": "1" }).end();
        return;
      }
      const sessionId = req.headers["mcp-session-id"];
      if (sessionId) {
        const transport = sessions.get(sessionId);
        if (!transport) {
          res.writeHead(404).end();
          return;
        }
        const body = req.method === "POST" ? await readBody(req) : undefined;
        await transport.handleRequest(req, res, body);
        return;
      }
      if (req.method !== "POST") {
        res.writeHead(400).end();
        return;
      }
      const body = await readBody(req);
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: json,
        onsessioninitialized: (id) => sessions.set(id, transport),
      });
      await newServer().connect(transport);
      await transport.handleRequest(req, res, body);
    } catch (e) {
      if (!res.headersSent) res.writeHead(500).end(String(e));
    }
  })
  .listen(port, "127.0.0.1", () => console.log(`listening on ${port}`));
