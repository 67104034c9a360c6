// bridge-client.js — follow mcp-progress-bridge jobs from a browser (or Node), and call tools
// through the bridge's MCP endpoint. One ES module, no dependencies. Served by every bridge at
// /client.js; the source lives in the bridge's repository at web/bridge-client.js.
//
//   import { watchJob, parseJobHandle } from "http://127.0.0.1:8080/client.js";
//   const handle = parseJobHandle(mcpCallOutputItem);          // Foundry `mcp_call` output item
//   const watch = watchJob(handle.events_url, {
//     onProgress: (p) => bar.update(p.progress, p.total, p.message),
//     onDone: (end) => show(end.status, end.result ?? end.message),
//     onError: (e) => showError(e.message),
//   });
//   cancelButton.onclick = () => watch.cancel();
//
// A tool may ask a question while it runs (status `input_required`): `onInputRequired(question)`
// gets `{key, message, requested_schema}`, and `watch.answer({action: "accept", content})` (or
// `{action: "decline"}` / `{action: "cancel"}`) sends the answer to the handle's `input_url`
// (pass it as options.inputUrl).
//
// URLs handed out by the bridge (events_url, status_url, cancel_url) are used exactly as given:
// they may carry a capability token (`?token=`) that only the bridge knows how to make.

/** The events that end a job's stream. */
export const TERMINAL_EVENTS = Object.freeze(["completed", "failed", "cancelled"]);

/** The `_meta` key under which a bridge result names its job (`{job_id, events_url}`). */
export const JOB_META_KEY = "mcp-progress-bridge/job";

/** The request `_meta` key that picks the call mode of one tools/call: async, sync or auto. */
export const MODE_META_KEY = "mcp-progress-bridge/mode";

/** The events about a tool's question: asked, and answered (by anyone, or the timeout). */
export const INPUT_EVENTS = Object.freeze(["input_required", "input_answered"]);

const JOB_EVENTS = ["status", "progress", "log", "heartbeat", "reset", ...INPUT_EVENTS, ...TERMINAL_EVENTS];

// ---------------------------------------------------------------------------------------------
// Job state: a pure reducer over the event stream, so a page and a test agree on what an event
// means.

/** A fresh job state, before any event. */
export function emptyJob(jobId = null) {
  return {
    job_id: jobId,
    tool: null,
    status: "unknown",
    progress: null,
    total: null,
    message: null,
    created_at: null,
    finished_at: null,
    last_progress_at: null,
    eta_ms: null,
    result: null,
    error: null,
    /** Sequence number of the last stored event applied (the resume position). */
    seq: null,
    /** The latest heartbeat: `{elapsed_ms, since_progress_ms, at}` while running. */
    heartbeat: null,
    logs: [],
    /** The tool's questions waiting for an answer: `{key, message, requested_schema}`. */
    input_requests: [],
  };
}

/** Keep at most this many log lines per job in the state. */
const MAX_LOGS = 50;

/**
 * Apply one event (`type` is the SSE event name, `data` its parsed JSON, `seq` its numeric id)
 * to a job state; returns a new state. Unknown event types leave the state as it was.
 */
export function reduceJob(state, type, data, seq = null) {
  const next = { ...state };
  if (seq !== null && type !== "heartbeat") next.seq = seq;
  switch (type) {
    case "status":
    case "reset":
      return { ...fromSnapshot(data), logs: state.logs, seq: next.seq };
    case "progress":
      next.status = next.status === "unknown" ? "running" : next.status;
      next.progress = data.progress;
      next.total = data.total ?? null;
      if (data.message != null) next.message = data.message;
      next.last_progress_at = data.ts ?? next.last_progress_at;
      next.eta_ms = estimateEta(next);
      next.heartbeat = null;
      return next;
    case "log":
      next.logs = [...state.logs, data].slice(-MAX_LOGS);
      return next;
    case "input_required":
      next.input_requests = [
        ...state.input_requests.filter((q) => q.key !== data.key),
        { key: data.key, message: data.message, requested_schema: data.requested_schema },
      ];
      next.status = "input_required";
      next.heartbeat = null;
      return next;
    case "input_answered":
      next.input_requests = state.input_requests.filter((q) => q.key !== data.key);
      if (next.status === "input_required" && next.input_requests.length === 0) next.status = "running";
      return next;
    case "heartbeat":
      next.heartbeat = {
        elapsed_ms: data.elapsed_ms ?? null,
        since_progress_ms: data.since_progress_ms ?? null,
        at: Date.now(),
      };
      return next;
    case "completed":
    case "failed":
    case "cancelled":
      next.status = data.status ?? type;
      next.result = data.result ?? null;
      next.error =
        type === "completed"
          ? null
          : { reason: data.reason ?? type, message: data.message ?? data.reason ?? type };
      next.finished_at = data.ts ?? next.finished_at;
      next.eta_ms = null;
      next.heartbeat = null;
      next.input_requests = [];
      return next;
    default:
      return state;
  }
}

function fromSnapshot(s) {
  const job = emptyJob(s.job_id ?? null);
  for (const key of Object.keys(job)) {
    if (key in s && key !== "logs") job[key] = s[key];
  }
  job.error = s.error ?? null;
  job.input_requests = Array.isArray(s.input_requests) ? s.input_requests : [];
  return job;
}

/** Estimated milliseconds left, from the job's own timestamps (no client clock involved). */
export function estimateEta(job) {
  const { progress, total, created_at: start, last_progress_at: now } = job;
  if (total == null || progress == null || start == null || now == null) return null;
  if (!(progress > 0) || progress >= total || now <= start) return null;
  return Math.round(((now - start) * (total - progress)) / progress);
}

/** `total` known: the fraction done (0 to 1); otherwise null (show an activity indicator). */
export function fractionDone(job) {
  if (job.total == null || job.progress == null || !(job.total > 0)) return null;
  return Math.min(1, Math.max(0, job.progress / job.total));
}

/** "1 h 2 min", "3 min 4 s", "5.2 s" */
export function formatDuration(ms) {
  if (ms == null || !Number.isFinite(ms)) return "";
  if (ms < 10_000) return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// ---------------------------------------------------------------------------------------------
// Following a job

function parseData(event) {
  try {
    return JSON.parse(event.data);
  } catch {
    return { raw: event.data };
  }
}

function parseSeq(event) {
  const n = Number.parseInt(event.lastEventId, 10);
  return Number.isFinite(n) ? n : null;
}

/**
 * Follow a job's event stream.
 *
 * handlers (all optional):
 *   onStatus(snapshot, job)   the first event of a fresh stream: the job as it is
 *   onProgress(data, job)     {job_id, seq, ts, progress, total, message}
 *   onLog(data, job)          {job_id, seq, ts, level, logger, data}
 *   onHeartbeat(data, job)    {elapsed_ms, since_progress_ms}: running, no news
 *   onReset(snapshot, job)    history no longer covered the gap: start over from this snapshot
 *   onInputRequired(question, job)  the tool asks {key, message, requested_schema} (also for a
 *                             question already waiting when the stream opens); answer with
 *                             answer()
 *   onInputAnswered(data, job)  {key, action, by}: a question was answered (by anyone, or
 *                             declined by the timeout); job.input_requests has those left
 *   onDone(data, job)         the terminal event: data.status is completed, failed or cancelled
 *   onError(error, job)       the stream was refused (unknown or expired job, wrong token) or
 *                             broke for good; the watch is closed
 *   onConnection(state)       "connecting", "open", "reconnecting", "closed"
 *   onEvent(type, data, job)  every event, after the specific handler
 * options:
 *   EventSource               the implementation (default: globalThis.EventSource)
 *   cancelUrl                 where cancel() POSTs (default: the events URL with its last path
 *                             segment `events` replaced by `cancel`, query kept)
 *   headers                   sent with cancel() (e.g. {Authorization: "Bearer …"})
 *   fetch                     the fetch implementation for cancel() and answer()
 *   inputUrl                  where answer() POSTs: the handle's `input_url` (it carries a
 *                             token of its own; without it, the events URL's `…/input` with
 *                             options.headers, for a bearer-authenticated page)
 *
 * Returns {cancel(), answer(answer), close(), job, lastEventId, connection}. Replay and resumption are the
 * EventSource's own: after a dropped connection it reconnects with Last-Event-ID and the bridge
 * sends exactly what was missed. Events at or before the resume position are skipped, so a
 * duplicate never moves a progress bar back; the terminal event never is. On the terminal event
 * the EventSource is closed (otherwise it would reconnect for ever).
 */
export function watchJob(eventsUrl, handlers = {}, options = {}) {
  const ES = options.EventSource ?? globalThis.EventSource;
  if (!ES) throw new Error("no EventSource here: pass options.EventSource (Node: a polyfill)");
  if (!eventsUrl) throw new Error("watchJob needs the job's events_url");
  let job = emptyJob();
  let connection = "connecting";
  let closed = false;
  const setConnection = (state) => {
    if (state === connection) return;
    connection = state;
    handlers.onConnection?.(state);
  };
  const source = new ES(eventsUrl);
  handlers.onConnection?.(connection);

  const close = () => {
    if (closed) return;
    closed = true;
    source.close();
    setConnection("closed");
  };

  source.onopen = () => setConnection("open");
  source.onerror = () => {
    if (closed) return;
    // CLOSED: the browser gave up (an HTTP error status or a non-SSE answer): it will not
    // reconnect by itself. CONNECTING: a dropped connection; it is coming back.
    if (source.readyState === 2) {
      const error = new Error(
        "the job's event stream was refused: the job is unknown or expired, its token is wrong, " +
          "or the bridge is unreachable from this page (a different origin without CORS)",
      );
      close();
      handlers.onError?.(error, job);
    } else {
      setConnection("reconnecting");
    }
  };

  for (const type of JOB_EVENTS) {
    source.addEventListener(type, (event) => {
      if (closed) return;
      const seq = parseSeq(event);
      const terminal = TERMINAL_EVENTS.includes(type);
      // A heartbeat repeats the id of the last stored event; anything else at or before the
      // position is a duplicate. Except the terminal event: whatever its id, the job is over
      // (the bridge re-sends it to a reader that reconnects after the end, and older bridges
      // gave it the id of the `reset` before it); skipping it would reconnect for ever.
      if (!terminal && type !== "heartbeat" && type !== "reset" && type !== "status") {
        if (seq !== null && job.seq !== null && seq <= job.seq) return;
      }
      setConnection("open");
      const data = parseData(event);
      const asked = new Set(job.input_requests.map((q) => q.key));
      job = reduceJob(job, type, data, seq);
      const handler = {
        status: handlers.onStatus,
        progress: handlers.onProgress,
        log: handlers.onLog,
        heartbeat: handlers.onHeartbeat,
        reset: handlers.onReset,
        input_answered: handlers.onInputAnswered,
      }[type];
      if (terminal) {
        close();
        handlers.onDone?.(data, job);
      } else {
        handler?.(data, job);
        // A new question, from its event or from a snapshot that already lists it.
        for (const question of job.input_requests) {
          if (!asked.has(question.key)) handlers.onInputRequired?.(question, job);
        }
      }
      handlers.onEvent?.(type, data, job);
    });
  }

  return {
    get job() {
      return job;
    },
    get lastEventId() {
      return job.seq;
    },
    get connection() {
      return connection;
    },
    close,
    /** Ask the bridge to cancel the job. Resolves to {status, snapshot}: 202 requested, 409
     * already ended. The stream then delivers the `cancelled` event. */
    cancel: () =>
      cancelJob(options.cancelUrl ?? cancelUrlFor(eventsUrl), {
        headers: options.headers,
        fetch: options.fetch,
      }),
    /** Answer the tool's question: {action: "accept", content: {…}} or {action: "decline"} /
     * {action: "cancel"}; `key` picks the question (default: the oldest waiting). Resolves when
     * the tool has it; rejects with an InputRefusedError (400 with the field that does not fit,
     * 409 when nothing waits any more). */
    answer: (answer) => {
      const key = answer.key ?? job.input_requests[0]?.key;
      return answerJob(options.inputUrl ?? inputUrlFor(eventsUrl), key ? { ...answer, key } : answer, {
        headers: options.headers,
        fetch: options.fetch,
      });
    },
  };
}

/** The input URL next to an events URL, query kept. The handle's own `input_url` carries the
 * input token; this one only works with a bearer credential in headers. */
export function inputUrlFor(eventsUrl) {
  const url = new URL(eventsUrl, globalThis.location?.href);
  if (!url.pathname.endsWith("/events")) {
    throw new Error(`cannot tell the input URL from ${eventsUrl}: pass options.inputUrl`);
  }
  url.pathname = url.pathname.replace(/\/events$/, "/input");
  return url.toString();
}

/** An answer the bridge did not take. `status` 400: it does not fit the question (`field`
 * names which part, like "content.answer"); 409: no question waits (answered already, timed
 * out); 413: too large; 404: unknown job or wrong token. */
export class InputRefusedError extends Error {
  constructor(status, message, field = null) {
    super(message);
    this.name = "InputRefusedError";
    this.status = status;
    // The bridge's 400 names it in `error.field`; older bridges (and the job tool's text) only
    // in the message: "…: content.answer: must be a string".
    this.field = field ?? /\b(content(?:\.[^:\s]+)?):/.exec(message)?.[1] ?? null;
  }
}

/** POST an answer to a job's input URL. Resolves to the bridge's body ({job_id, answered}). */
export async function answerJob(inputUrl, answer, { headers = {}, fetch: fetchImpl } = {}) {
  const f = fetchImpl ?? globalThis.fetch;
  const response = await f(inputUrl, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify(answer),
  });
  const body = await response.json().catch(() => null);
  if (response.ok) return body;
  const why = body?.error?.message ?? `HTTP ${response.status}`;
  throw new InputRefusedError(response.status, why, body?.error?.field ?? null);
}

/**
 * The content of an answer from form values (strings, as inputs give them), typed as the
 * question's requested_schema says: numbers and integers parsed, booleans from true/false or
 * checkbox state, empty optional fields left out. Throws an InputRefusedError (status 400,
 * `field` set) for a value that cannot be read as its type, before anything is sent.
 */
export function contentFromForm(schema, values) {
  const content = {};
  const required = new Set(schema?.required ?? []);
  for (const [name, property] of Object.entries(schema?.properties ?? {})) {
    const raw = values[name];
    if (raw === undefined || raw === null || raw === "") {
      if (required.has(name) && property?.type !== "boolean") {
        throw new InputRefusedError(400, `content.${name}: is required`);
      }
      if (property?.type !== "boolean") continue;
    }
    switch (property?.type) {
      case "number":
      case "integer": {
        const n = Number(raw);
        if (!Number.isFinite(n) || (property.type === "integer" && !Number.isInteger(n))) {
          throw new InputRefusedError(400, `content.${name}: must be a${property.type === "integer" ? "n integer" : " number"}`);
        }
        content[name] = n;
        break;
      }
      case "boolean":
        content[name] = raw === true || raw === "true" || raw === "on";
        break;
      default:
        content[name] = String(raw);
    }
  }
  return content;
}

/** The cancel URL next to an events URL: `…/jobs/ID/events?q` → `…/jobs/ID/cancel?q`. Used
 * only when the job handle carries no `cancel_url` of its own. */
export function cancelUrlFor(eventsUrl) {
  const url = new URL(eventsUrl, globalThis.location?.href);
  if (!url.pathname.endsWith("/events")) {
    throw new Error(`cannot tell the cancel URL from ${eventsUrl}: pass options.cancelUrl`);
  }
  url.pathname = url.pathname.replace(/\/events$/, "/cancel");
  return url.toString();
}

/** POST a job's cancel URL. Resolves to {status, snapshot} for 202 and 409. */
export async function cancelJob(cancelUrl, { headers = {}, fetch: fetchImpl } = {}) {
  const f = fetchImpl ?? globalThis.fetch;
  const response = await f(cancelUrl, { method: "POST", headers });
  const body = await response.json().catch(() => null);
  if (response.status === 202 || response.status === 409) {
    return { status: response.status, snapshot: body };
  }
  const why = body?.error?.message ?? `HTTP ${response.status}`;
  throw new Error(`cancel refused (${response.status}): ${why}`);
}

/**
 * Follow a correlation stream (`/correlations/{cid}/events`): every job started by MCP requests
 * that carried that correlation ID. handlers: onJobStarted(snapshot, job), onJobEvent(type,
 * data, job) for the events of each job (data.job_id says which), onReset({jobs}), onWaiting()
 * (the bridge has no job with this ID yet), onError, onConnection. The stream does not end by
 * itself (more jobs may join): call close().
 *
 * The stream opens empty before the correlation's first job starts (an application usually
 * subscribes before it calls the agent). Older bridges answered 404 until then, on Redis: so a
 * refused stream is opened again every options.retryMs (2000) until options.waitMs (600000)
 * have passed, then onError.
 */
export function watchCorrelation(url, handlers = {}, options = {}) {
  const ES = options.EventSource ?? globalThis.EventSource;
  if (!ES) throw new Error("no EventSource here: pass options.EventSource (Node: a polyfill)");
  const retryMs = options.retryMs ?? 2000;
  const waitUntil = Date.now() + (options.waitMs ?? 600_000);
  const jobs = new Map();
  let closed = false;
  let connection = "connecting";
  let source = null;
  let timer = null;
  let everOpened = false;
  const setConnection = (state) => {
    if (state === connection) return;
    connection = state;
    handlers.onConnection?.(state);
  };
  const close = () => {
    if (closed) return;
    closed = true;
    clearTimeout(timer);
    source?.close();
    setConnection("closed");
  };
  const open = () => {
    source = new ES(url);
    source.onopen = () => {
      everOpened = true;
      setConnection("open");
    };
    source.onerror = () => {
      if (closed) return;
      if (source.readyState !== 2) {
        setConnection("reconnecting");
        return;
      }
      source.close();
      if (!everOpened && Date.now() + retryMs < waitUntil) {
        setConnection("waiting");
        handlers.onWaiting?.();
        timer = setTimeout(open, retryMs);
        return;
      }
      close();
      handlers.onError?.(
        new Error("the correlation stream was refused: malformed or unknown ID, wrong token, or unreachable"),
      );
    };
    source.addEventListener("job_started", (event) => {
      const snapshot = parseData(event);
      everOpened = true;
      setConnection("open");
      jobs.set(snapshot.job_id, reduceJob(emptyJob(snapshot.job_id), "status", snapshot));
      handlers.onJobStarted?.(snapshot, jobs.get(snapshot.job_id));
    });
    source.addEventListener("reset", (event) => {
      const data = parseData(event);
      setConnection("open");
      for (const snapshot of data.jobs ?? []) {
        jobs.set(snapshot.job_id, reduceJob(emptyJob(snapshot.job_id), "reset", snapshot));
      }
      handlers.onReset?.(data);
    });
    for (const type of ["progress", "log", "heartbeat", ...INPUT_EVENTS, ...TERMINAL_EVENTS]) {
      source.addEventListener(type, (event) => {
        const data = parseData(event);
        setConnection("open");
        const before = jobs.get(data.job_id) ?? emptyJob(data.job_id);
        const job = reduceJob(before, type, data);
        jobs.set(data.job_id, job);
        handlers.onJobEvent?.(type, data, job);
      });
    }
  };
  handlers.onConnection?.(connection);
  open();
  return {
    jobs,
    close,
    get connection() {
      return connection;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Job handles

/**
 * The job handle in what an agent platform or MCP client got back from a bridge tool call, or
 * null when there is none (the tool answered directly without naming a job). Accepts:
 *   - a Foundry / Responses API `mcp_call` output item ({type: "mcp_call", output: "<text>"}):
 *     its `output` is the tool's text, the handle as JSON;
 *   - that text itself;
 *   - an MCP CallToolResult: structuredContent, the JSON in content[0].text, or for a sync
 *     answer `_meta["mcp-progress-bridge/job"]` ({job_id, events_url});
 *   - a handle object ({job_id, events_url, …}).
 */
export function parseJobHandle(value) {
  if (value == null) return null;
  if (typeof value === "string") {
    const text = value.trim();
    if (!text.startsWith("{")) return null;
    try {
      return parseJobHandle(JSON.parse(text));
    } catch {
      return null;
    }
  }
  if (typeof value !== "object") return null;
  if (value.type === "mcp_call") {
    if (value.error) return null;
    return parseJobHandle(value.output);
  }
  if (typeof value.job_id === "string" && typeof value.events_url === "string") return value;
  const fromStructured = parseJobHandle(value.structuredContent);
  if (fromStructured) return fromStructured;
  if (Array.isArray(value.content)) {
    for (const block of value.content) {
      if (block?.type === "text") {
        const handle = parseJobHandle(block.text);
        if (handle) return handle;
      }
    }
  }
  const meta = value._meta?.[JOB_META_KEY];
  if (meta && typeof meta.job_id === "string") return meta;
  return null;
}

// ---------------------------------------------------------------------------------------------
// A small MCP Streamable HTTP client, enough to list and call tools through the bridge.

/** An HTTP answer from the MCP endpoint that is not a success. `status` 401: a bearer token
 * is needed (or the one given is wrong). */
export class McpHttpError extends Error {
  constructor(status, message, wwwAuthenticate = null) {
    super(message);
    this.name = "McpHttpError";
    this.status = status;
    this.wwwAuthenticate = wwwAuthenticate;
  }
}

/** A JSON-RPC error answer to a request. */
export class McpRpcError extends Error {
  constructor(error) {
    super(error?.message ?? "JSON-RPC error");
    this.name = "McpRpcError";
    this.code = error?.code;
    this.data = error?.data;
  }
}

const PROTOCOL_VERSION = "2025-06-18";

/**
 * Read an SSE body incrementally; calls onMessage(dataText) for every event's data.
 * Exported for tests.
 */
export async function readSseBody(body, onMessage) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data = [];
  const flushLine = (line) => {
    if (line === "") {
      if (data.length) {
        const text = data.join("\n");
        data = [];
        if (onMessage(text) === false) return false;
      }
      return true;
    }
    if (line.startsWith(":")) return true;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    return true;
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let index;
      while ((index = buffer.search(/\r\n|\r|\n/)) !== -1) {
        const line = buffer.slice(0, index);
        const eol = buffer[index] === "\r" && buffer[index + 1] === "\n" ? 2 : 1;
        buffer = buffer.slice(index + eol);
        if (flushLine(line) === false) return;
      }
    }
    flushLine(buffer);
    flushLine("");
  } finally {
    reader.cancel().catch(() => {});
  }
}

/**
 * const mcp = new McpClient("/mcp", {token});
 * await mcp.connect();
 * const tools = await mcp.listTools();
 * const result = await mcp.callTool("demo__slow_count", {to: 5}, {onProgress});
 */
export class McpClient {
  constructor(url, { token = null, headers = {}, fetch: fetchImpl, clientInfo } = {}) {
    this.url = url;
    this.token = token;
    this.headers = headers;
    this.fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
    this.clientInfo = clientInfo ?? { name: "bridge-client.js", version: "1" };
    this.sessionId = null;
    this.protocolVersion = PROTOCOL_VERSION;
    this.nextId = 1;
    this.serverInfo = null;
  }

  setToken(token) {
    this.token = token || null;
    this.sessionId = null;
  }

  async connect() {
    this.sessionId = null;
    const { result } = await this.#post(
      {
        jsonrpc: "2.0",
        id: this.nextId++,
        method: "initialize",
        params: {
          protocolVersion: PROTOCOL_VERSION,
          capabilities: {},
          clientInfo: this.clientInfo,
        },
      },
      {},
      true,
    );
    this.protocolVersion = result.protocolVersion ?? PROTOCOL_VERSION;
    this.serverInfo = result.serverInfo ?? null;
    await this.#post({ jsonrpc: "2.0", method: "notifications/initialized" });
    return result;
  }

  async listTools() {
    const tools = [];
    let cursor;
    do {
      const params = cursor ? { cursor } : {};
      const { result } = await this.request("tools/list", params);
      tools.push(...(result.tools ?? []));
      cursor = result.nextCursor;
    } while (cursor);
    return tools;
  }

  /**
   * Call a tool. options: meta (merged into params._meta), headers (this request only, e.g.
   * {"X-Correlation-Id": "turn-1"}), onProgress(params) (sends a progressToken and reports the
   * notifications/progress for it), onRequestId(id) (to cancel it with cancelRequest).
   */
  async callTool(name, args = {}, { meta, headers, onProgress, onRequestId } = {}) {
    const params = { name, arguments: args };
    const _meta = { ...(meta ?? {}) };
    if (onProgress) _meta.progressToken = `page-${Date.now()}-${this.nextId}`;
    if (Object.keys(_meta).length) params._meta = _meta;
    const { result } = await this.request("tools/call", params, { headers, onProgress, onRequestId });
    return result;
  }

  /** Tell the server to stop a request of ours (notifications/cancelled). */
  async cancelRequest(requestId, reason = "cancelled by the user") {
    await this.#post({
      jsonrpc: "2.0",
      method: "notifications/cancelled",
      params: { requestId, reason },
    });
  }

  /** Send a request; re-initializes once when the session has expired (404). */
  async request(method, params, options = {}) {
    if (!this.sessionId) await this.connect();
    const send = () => {
      const id = this.nextId++;
      options.onRequestId?.(id);
      return this.#post({ jsonrpc: "2.0", id, method, params }, options);
    };
    try {
      return await send();
    } catch (error) {
      if (error instanceof McpHttpError && error.status === 404 && this.sessionId) {
        await this.connect();
        return send();
      }
      throw error;
    }
  }

  async #post(message, { headers = {}, onProgress } = {}, initializing = false) {
    const h = {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      ...this.headers,
      ...headers,
    };
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    if (this.sessionId) h["Mcp-Session-Id"] = this.sessionId;
    if (!initializing) h["MCP-Protocol-Version"] = this.protocolVersion;
    let response;
    try {
      response = await this.fetch(this.url, { method: "POST", headers: h, body: JSON.stringify(message) });
    } catch (error) {
      throw new McpHttpError(0, `cannot reach the bridge at ${this.url}: ${error.message}`);
    }
    if (initializing) this.sessionId = response.headers.get("mcp-session-id");
    if (!response.ok) {
      const text = await response.text().catch(() => "");
      throw httpError(response, text);
    }
    if (message.id === undefined) {
      await response.body?.cancel().catch(() => {});
      return {};
    }
    const type = response.headers.get("content-type") ?? "";
    let answer = null;
    const consider = (msg) => {
      if (msg.id === message.id && ("result" in msg || "error" in msg)) {
        answer = msg;
        return false;
      }
      const token = message.params?._meta?.progressToken;
      if (msg.method === "notifications/progress" && onProgress && msg.params?.progressToken === token) {
        onProgress(msg.params);
      }
      return true;
    };
    if (type.includes("text/event-stream")) {
      await readSseBody(response.body, (text) => {
        let msg;
        try {
          msg = JSON.parse(text);
        } catch {
          return true;
        }
        return consider(msg);
      });
    } else {
      const body = await response.json();
      for (const msg of Array.isArray(body) ? body : [body]) if (consider(msg) === false) break;
    }
    if (!answer) throw new McpHttpError(response.status, `no answer to ${message.method} from the bridge`);
    if (answer.error) throw new McpRpcError(answer.error);
    return answer;
  }
}

function httpError(response, text) {
  let detail = text.trim().slice(0, 300);
  try {
    const body = JSON.parse(text);
    detail = body?.error?.message ?? body?.message ?? detail;
  } catch {
    // plain text
  }
  const status = response.status;
  const auth = response.headers.get("www-authenticate");
  const hint =
    status === 401
      ? "the bridge wants a bearer token for /mcp: enter the token it was configured with"
      : status === 403
        ? "the bridge refused this page's Origin or Host: add it to server.allowed_hosts / allowed_origins"
        : status === 404
          ? "the MCP session expired or the endpoint is wrong"
          : `HTTP ${status}`;
  return new McpHttpError(status, detail ? `${hint} (${detail})` : hint, auth);
}
