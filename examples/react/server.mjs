// The backend-for-frontend of the example: the only part that holds the bridge's MCP token.
// The browser asks it to start a job; it calls the bridge's /mcp (as an MCP client, with the
// token) and hands the browser only the job's capability URLs, each scoped to that one job.
// It also mints the correlation token of the browser session's "my jobs" stream, with the
// bridge's auth.job_secret, so the browser can follow all its jobs without a credential.
//
//   BRIDGE_URL    the bridge, e.g. http://127.0.0.1:8080 (default)
//   BRIDGE_TOKEN  a bearer token of the bridge's auth.mcp_tokens (none: an open bridge)
//   JOB_SECRET    the bridge's auth.job_secret (optional: without it, no "my jobs" stream)
//   PORT          where this listens (default 5174; 0 picks one), on 127.0.0.1
//   APP_DIST      the built app it serves (default ./dist, from `npm run build`)
//
// Plain node:http, no framework: two API routes and static files.

import { createHmac, randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { MODE_META_KEY, McpClient, parseJobHandle } from "@mcp-progress-bridge/client";

const here = path.dirname(fileURLToPath(import.meta.url));
const bridge = (process.env.BRIDGE_URL ?? "http://127.0.0.1:8080").replace(/\/$/, "");
const jobSecret = process.env.JOB_SECRET ?? null;
const dist = path.resolve(process.env.APP_DIST ?? path.join(here, "dist"));
const mcp = new McpClient(`${bridge}/mcp`, {
  token: process.env.BRIDGE_TOKEN ?? null,
  clientInfo: { name: "react-example-backend", version: "1" },
});

/** What the browser may start: the backend decides the tools and bounds the arguments. */
const KINDS = {
  count: (body) => ["demo__slow_count", { to: Math.min(100, Math.max(1, Number(body.steps) || 10)), delay_ms: 300 }],
  ask: () => ["demo__ask", { question: "Which colour should the result be?" }],
};

/** A correlation token (docs/security.md, the token formula), valid for `ttl` seconds. */
function correlationToken(cid, ttl = 3600) {
  const expires = Math.floor(Date.now() / 1000) + ttl;
  const mac = createHmac("sha256", jobSecret).update(`v2:correlation:${expires}:${cid}`).digest("base64url");
  return `${expires}.${mac}`;
}

/** The browser session: a random ID in an HttpOnly cookie; its jobs share one correlation ID. */
function session(request, response) {
  const sid = /(?:^|;\s*)sid=([0-9a-f-]{36})/.exec(request.headers.cookie ?? "")?.[1];
  if (sid) return sid;
  const fresh = randomUUID();
  response.setHeader("Set-Cookie", `sid=${fresh}; HttpOnly; SameSite=Strict; Path=/`);
  return fresh;
}

function json(response, status, body) {
  response.writeHead(status, { "Content-Type": "application/json", "Cache-Control": "no-store" });
  response.end(JSON.stringify(body));
}

async function readBody(request) {
  let text = "";
  for await (const chunk of request) {
    text += chunk;
    if (text.length > 10_000) throw new Error("body too large");
  }
  return text ? JSON.parse(text) : {};
}

async function startJob(request, response) {
  const sid = session(request, response);
  const body = await readBody(request);
  const kind = KINDS[body.kind];
  if (!kind) return json(response, 400, { error: `kind must be one of ${Object.keys(KINDS).join(", ")}` });
  const [tool, args] = kind(body);
  const result = await mcp.callTool(tool, args, {
    meta: { [MODE_META_KEY]: "async" },
    headers: { "X-Correlation-Id": `app-${sid}` },
  });
  const handle = parseJobHandle(result);
  if (!handle) return json(response, 502, { error: `the bridge answered without a job: ${JSON.stringify(result).slice(0, 200)}` });
  // Only the capability URLs: never the MCP token, nothing else of the bridge's answer.
  const { job_id, events_url, cancel_url, input_url } = handle;
  json(response, 200, { job_id, tool, events_url, cancel_url, input_url });
}

function myJobs(request, response) {
  const sid = session(request, response);
  if (!jobSecret) return json(response, 404, { error: "no JOB_SECRET: the backend cannot mint correlation tokens" });
  const cid = `app-${sid}`;
  json(response, 200, { events_url: `${bridge}/correlations/${cid}/events?token=${correlationToken(cid)}` });
}

const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml" };

async function serveStatic(request, response) {
  const pathname = decodeURIComponent(new URL(request.url, "http://x").pathname);
  const file = path.join(dist, pathname === "/" ? "index.html" : pathname);
  if (!file.startsWith(dist + path.sep)) return json(response, 404, { error: "not found" });
  try {
    const body = await readFile(file);
    response.writeHead(200, { "Content-Type": TYPES[path.extname(file)] ?? "application/octet-stream" });
    response.end(body);
  } catch {
    json(response, 404, { error: "not found (build the app first: npm run build)" });
  }
}

const server = createServer(async (request, response) => {
  try {
    if (request.method === "POST" && request.url === "/api/jobs") return await startJob(request, response);
    if (request.method === "GET" && request.url === "/api/my-jobs") return myJobs(request, response);
    if (request.method === "GET") return await serveStatic(request, response);
    json(response, 405, { error: "method not allowed" });
  } catch (error) {
    json(response, 502, { error: `the bridge did not start the job: ${error.message}` });
  }
});

server.listen(Number(process.env.PORT ?? 5174), "127.0.0.1", () => {
  // The first line names the address (what the tests read).
  console.log(`react example backend on http://127.0.0.1:${server.address().port} (bridge ${bridge})`);
});
