// @mcp-progress-bridge/client — follow mcp-progress-bridge jobs from a browser or Node, and call
// tools through the bridge's MCP endpoint. One ES module, no dependencies: the package's main
// entry, and the file every bridge serves at /client.js for pages without a bundler. Source:
// packages/client/src/index.ts in the bridge's repository (dist/index.js is its build).
//
//   import { watchJob } from "@mcp-progress-bridge/client";
//   const watch = watchJob(handle.events_url, { onProgress: (p) => bar.update(p.progress, p.total) });
//   cancelButton.onclick = () => watch.cancel();
//
// URLs handed out by the bridge (events_url, status_url, cancel_url, input_url) are used exactly
// as given: they may carry a capability token (`?token=`) that only the bridge knows how to make.
//
// Reconnection: a stream that breaks (network error, 5xx, 429, a stream closed before the job's
// terminal event) is opened again after a jittered backoff, resuming after the last event seen
// (`last_event_id`); `retry:` from the stream and `Retry-After` from a refusal set the wait. The
// watch stops only on the terminal event, a 401/403/404 (or another 4xx), close(), or its
// AbortSignal.

/** This client's version: the bridge's version it was released with. */
export const VERSION = "0.1.0";

// ---------------------------------------------------------------------------------------------
// The bridge's vocabulary, typed (docs/events.md, docs/http-api.md)

/** A job's status as the bridge reports it. */
export type JobStatus = "running" | "input_required" | "completed" | "failed" | "cancelled";

/** Why a job failed (`failed` event `reason`); see docs/events.md. */
export type FailureReason =
  | "tool_error"
  | "upstream_error"
  | "upstream_lost"
  | "upstream_unavailable"
  | "timeout"
  | "unsupported"
  | "result_too_large"
  | "owner_lost"
  | "store_unavailable"
  | (string & {});

/** An MCP `CallToolResult`, as the upstream answered it. */
export interface CallToolResult {
  content?: Array<{ type: string; text?: string; [key: string]: unknown }>;
  structuredContent?: unknown;
  isError?: boolean;
  _meta?: Record<string, unknown>;
  [key: string]: unknown;
}

/** A JSON Schema property of a question's `requested_schema` (MCP elicitation: flat, primitive). */
export interface SchemaProperty {
  type?: "string" | "number" | "integer" | "boolean";
  title?: string;
  description?: string;
  format?: string;
  enum?: Array<string | number>;
  enumNames?: string[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  default?: unknown;
}

/** The schema a tool's question asks its answer to fit. */
export interface RequestedSchema {
  type?: "object";
  properties?: Record<string, SchemaProperty>;
  required?: string[];
}

/** A question a job's tool asked, waiting for an answer. */
export interface InputRequest {
  key: string;
  message: string;
  requested_schema: RequestedSchema;
}

/** Why a job ended other than completed: `{reason, message}`. */
export interface JobError {
  reason: string;
  message: string;
}

/** The job snapshot: `GET /jobs/{id}`, and the data of `status`, `reset` and `job_started`. */
export interface JobSnapshot {
  job_id: string;
  tool: string;
  upstream?: string;
  upstream_tool?: string;
  status: JobStatus;
  progress: number | null;
  total: number | null;
  message: string | null;
  seq: number;
  created_at: number;
  updated_at?: number;
  finished_at: number | null;
  last_progress_at: number | null;
  eta_ms: number | null;
  correlation_id?: string | null;
  result?: CallToolResult | null;
  error?: JobError | null;
  rpc_error?: unknown;
  owner?: string;
  input_requests?: InputRequest[];
}

/** Fields every stored event's data carries. */
export interface EventBase {
  job_id: string;
  seq: number;
  /** Unix epoch milliseconds, the bridge's clock. */
  ts: number;
}

/** `progress`: the tool reported progress. */
export interface ProgressData extends EventBase {
  progress: number;
  total: number | null;
  message: string | null;
}

/** `log`: an upstream `notifications/message` attributed to this job. */
export interface LogData extends EventBase {
  level: string;
  logger: string | null;
  data: unknown;
}

/** `heartbeat`: the job runs and reported nothing for a while (live only, never stored). */
export interface HeartbeatData extends EventBase {
  elapsed_ms: number;
  since_progress_ms: number;
}

/** `input_required`: the tool asked a question; answer it with `watch.answer()`. */
export interface InputRequiredData extends EventBase, InputRequest {}

/** `input_answered`: question `key` was answered (by anyone) or declined by the timeout. */
export interface InputAnsweredData extends EventBase {
  key: string;
  action: "accept" | "decline" | "cancel";
  by: string;
}

/** `completed`: the terminal event of a job that succeeded. */
export interface CompletedData extends EventBase {
  status: "completed";
  result: CallToolResult | null;
}

/** `failed`: the terminal event of a job that failed. */
export interface FailedData extends EventBase {
  status: "failed";
  reason: FailureReason;
  message: string;
  result?: CallToolResult | null;
  rpc_error?: unknown;
}

/** `cancelled`: the terminal event of a cancelled job. */
export interface CancelledData extends EventBase {
  status: "cancelled";
  reason: string;
  message?: string;
}

/**
 * One event of a job's stream, as a discriminated union on `type`: `switch (event.type)`
 * narrows `event.data`. `id` is the event's position (its SSE `id:`), null when it had none.
 */
export type JobEvent =
  | { type: "status"; id: number | null; data: JobSnapshot }
  | { type: "reset"; id: number | null; data: JobSnapshot }
  | { type: "progress"; id: number | null; data: ProgressData }
  | { type: "log"; id: number | null; data: LogData }
  | { type: "heartbeat"; id: number | null; data: HeartbeatData }
  | { type: "input_required"; id: number | null; data: InputRequiredData }
  | { type: "input_answered"; id: number | null; data: InputAnsweredData }
  | { type: "completed"; id: number | null; data: CompletedData }
  | { type: "failed"; id: number | null; data: FailedData }
  | { type: "cancelled"; id: number | null; data: CancelledData };

/** The name of a job event. */
export type JobEventType = JobEvent["type"];
/** The terminal events: exactly one ends every job. */
export type TerminalEvent = Extract<JobEvent, { type: "completed" | "failed" | "cancelled" }>;
/** The data of a terminal event. */
export type TerminalData = TerminalEvent["data"];

/** The events that end a job's stream. */
export const TERMINAL_EVENTS: readonly ["completed", "failed", "cancelled"] = Object.freeze([
  "completed",
  "failed",
  "cancelled",
] as const);

/** The `_meta` key under which a bridge result names its job (`{job_id, events_url}`). */
export const JOB_META_KEY = "mcp-progress-bridge/job";

/** The request `_meta` key that picks the call mode of one tools/call: async, sync or auto. */
export const MODE_META_KEY = "mcp-progress-bridge/mode";

/** The events about a tool's question: asked, and answered (by anyone, or the timeout). */
export const INPUT_EVENTS: readonly ["input_required", "input_answered"] = Object.freeze([
  "input_required",
  "input_answered",
] as const);

const JOB_EVENTS: readonly JobEventType[] = [
  "status",
  "progress",
  "log",
  "heartbeat",
  "reset",
  ...INPUT_EVENTS,
  ...TERMINAL_EVENTS,
];

const isTerminal = (type: string): type is TerminalEvent["type"] =>
  (TERMINAL_EVENTS as readonly string[]).includes(type);

/** The job handle a bridge tool call returns (the URLs carry capability tokens). */
export interface JobHandle {
  job_id: string;
  events_url: string;
  status?: JobStatus;
  tool?: string;
  status_url?: string;
  cancel_url?: string;
  input_url?: string;
  instructions?: string;
  [key: string]: unknown;
}

// ---------------------------------------------------------------------------------------------
// Job state: a pure reducer over the event stream, so a page and a test agree on what an event
// means.

/** What a watch knows about its job: the snapshot's fields, kept up to date by every event. */
export interface JobState {
  job_id: string | null;
  tool: string | null;
  status: JobStatus | "unknown";
  progress: number | null;
  total: number | null;
  message: string | null;
  created_at: number | null;
  finished_at: number | null;
  last_progress_at: number | null;
  /** Estimated milliseconds left, from the job's own timestamps; null when unknown. */
  eta_ms: number | null;
  result: CallToolResult | null;
  error: JobError | null;
  /** Sequence number of the last stored event applied (the resume position). */
  seq: number | null;
  /** The latest heartbeat while running: `{elapsed_ms, since_progress_ms, at}` (`at`: client clock). */
  heartbeat: { elapsed_ms: number | null; since_progress_ms: number | null; at: number } | null;
  /** The last log events (at most 50). */
  logs: LogData[];
  /** The tool's questions waiting for an answer. */
  input_requests: InputRequest[];
}

/** A fresh job state, before any event. */
export function emptyJob(jobId: string | null = null): JobState {
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
    seq: null,
    heartbeat: null,
    logs: [],
    input_requests: [],
  };
}

/** Keep at most this many log lines per job in the state. */
const MAX_LOGS = 50;

/**
 * Apply one event (`type` is the SSE event name, `data` its parsed JSON, `seq` its numeric id)
 * to a job state; returns a new state. Unknown event types leave the state as it was.
 */
export function reduceJob(state: JobState, type: JobEventType | (string & {}), data: any, seq: number | null = null): JobState {
  const next: JobState = { ...state };
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

function fromSnapshot(s: Partial<JobSnapshot>): JobState {
  const job = emptyJob(s.job_id ?? null) as unknown as Record<string, unknown>;
  for (const key of Object.keys(job)) {
    if (key in s && key !== "logs") job[key] = (s as Record<string, unknown>)[key];
  }
  const state = job as unknown as JobState;
  state.error = s.error ?? null;
  state.input_requests = Array.isArray(s.input_requests) ? s.input_requests : [];
  return state;
}

/** Estimated milliseconds left, from the job's own timestamps (no client clock involved). */
export function estimateEta(job: Pick<JobState, "progress" | "total" | "created_at" | "last_progress_at">): number | null {
  const { progress, total, created_at: start, last_progress_at: now } = job;
  if (total == null || progress == null || start == null || now == null) return null;
  if (!(progress > 0) || progress >= total || now <= start) return null;
  return Math.round(((now - start) * (total - progress)) / progress);
}

/** `total` known: the fraction done (0 to 1); otherwise null (show an activity indicator). */
export function fractionDone(job: Pick<JobState, "progress" | "total">): number | null {
  if (job.total == null || job.progress == null || !(job.total > 0)) return null;
  return Math.min(1, Math.max(0, job.progress / job.total));
}

/** "1 h 2 min", "3 min 4 s", "5.2 s" */
export function formatDuration(ms: number | null | undefined): string {
  if (ms == null || !Number.isFinite(ms)) return "";
  if (ms < 10_000) return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// ---------------------------------------------------------------------------------------------
// Reading an event stream, with reconnection

/** The state of a watch's connection. `waiting`: a correlation stream the bridge does not know
 * yet, asked again. */
export type ConnectionState = "connecting" | "open" | "reconnecting" | "waiting" | "closed";

/** Why a watch reconnects, as `onRetry` reports it. */
export interface RetryInfo {
  /** 1 for the first retry after a working connection, counting up while attempts fail. */
  attempt: number;
  /** How long the watch waits before the next attempt. */
  delayMs: number;
  /** `network`: no answer (unreachable, or an origin the bridge's CORS does not allow);
   * `status`: an HTTP answer that says to come back (5xx, 429, 408); `closed`: the stream ended
   * before the job's terminal event. */
  reason: "network" | "status" | "closed";
  /** The HTTP status, for `status`. */
  status?: number;
  /** What the answer asked for (`Retry-After`, or the body's `retry_after_secs`), in ms. */
  retryAfterMs?: number;
}

/** How a watch waits between attempts: equal-jitter exponential backoff from the stream's
 * `retry:` (or `initialDelayMs`), at most `maxDelayMs`; a `Retry-After` is waited in full. */
export interface RetryOptions {
  /** The first wait before the stream says `retry:` (default 1000 ms). */
  initialDelayMs?: number;
  /** The longest wait between attempts that the bridge did not ask for (default 30000 ms). */
  maxDelayMs?: number;
  /** Random in [0, 1) for the jitter (tests pass their own). */
  random?: () => number;
}

/** A stream the bridge refused for good (401, 403, 404 or another 4xx), or a refusal an
 * `EventSource` reported (its status unknown: `status` 0). The watch is closed. */
export class StreamError extends Error {
  /** The HTTP status; 0 when unknown (an `EventSource` hides it). */
  readonly status: number;
  /** `gone`: refused after the stream had been open (the job expired, or a bridge without a
   * shared store restarted and lost it); `refused`: refused from the first attempt (unknown or
   * expired job, wrong or expired token). */
  readonly kind: "gone" | "refused";
  constructor(status: number, kind: "gone" | "refused", message: string) {
    super(message);
    this.name = "StreamError";
    this.status = status;
    this.kind = kind;
  }
}

/** The minimal `EventSource` a watch accepts in `options.EventSource` (the browser's, or a
 * polyfill). With one, reconnection is the EventSource's own and any refusal ends the watch. */
export interface EventSourceLike {
  readonly readyState: number;
  onopen: ((event: any) => void) | null;
  onerror: ((event: any) => void) | null;
  addEventListener(type: string, listener: (event: { data: string; lastEventId: string }) => void): void;
  close(): void;
}
/** A constructor of {@link EventSourceLike}. */
export type EventSourceClass = new (url: string) => EventSourceLike;

/** A `fetch` the client can use (the global one by default). */
export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

interface Frame {
  event: string;
  data: string;
  id: string | null;
}

/**
 * Read an SSE body incrementally. `onFrame` gets every event with data (`event` defaults to
 * `message`; `id` is the last `id:` seen so far, as an EventSource's lastEventId); return false
 * to stop reading. `onRetry` gets each `retry:` value. Resolves when the body ends.
 */
export async function readSseFrames(
  body: ReadableStream<Uint8Array>,
  onFrame: (frame: Frame) => boolean | void,
  onRetry?: (ms: number) => void,
): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "";
  let data: string[] = [];
  let lastId: string | null = null;
  const line = (text: string): boolean => {
    if (text === "") {
      const had = data.length > 0;
      const frame = { event: event || "message", data: data.join("\n"), id: lastId };
      event = "";
      data = [];
      return had ? onFrame(frame) !== false : true;
    }
    if (text.startsWith(":")) return true;
    const colon = text.indexOf(":");
    const field = colon === -1 ? text : text.slice(0, colon);
    let value = colon === -1 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "event") event = value;
    else if (field === "id" && !value.includes("\0")) lastId = value;
    else if (field === "retry" && /^\d+$/.test(value)) onRetry?.(Number(value));
    return true;
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let index;
      while ((index = buffer.search(/\r\n|\r|\n/)) !== -1) {
        // A lone \r at the end of the buffer may be the first half of \r\n: wait for more.
        if (buffer[index] === "\r" && index === buffer.length - 1) break;
        const text = buffer.slice(0, index);
        const eol = buffer[index] === "\r" && buffer[index + 1] === "\n" ? 2 : 1;
        buffer = buffer.slice(index + eol);
        if (!line(text)) return;
      }
    }
    buffer += decoder.decode();
    for (const text of buffer.split(/\r\n|\r|\n/)) if (!line(text)) return;
    line("");
  } finally {
    reader.cancel().catch(() => {});
  }
}

/**
 * Read an SSE body incrementally; calls onMessage(dataText) for every event's data, until it
 * returns false or the body ends. (What the MCP client uses; {@link readSseFrames} has the rest.)
 */
export async function readSseBody(body: ReadableStream<Uint8Array>, onMessage: (data: string) => boolean | void): Promise<void> {
  await readSseFrames(body, (frame) => onMessage(frame.data));
}

/** Milliseconds a `Retry-After` value asks for (delta-seconds or an HTTP date), or null. */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | null {
  if (value == null || value.trim() === "") return null;
  if (/^\s*\d+\s*$/.test(value)) return Number(value) * 1000;
  const date = Date.parse(value);
  return Number.isFinite(date) ? Math.max(0, date - now) : null;
}

/**
 * The wait before retry `attempt` (1, 2, …): with `retryAfterMs` (the bridge asked), that plus up
 * to 20 % (at most 1 s) of jitter; otherwise equal-jitter exponential backoff, `baseMs * 2^(n-1)`
 * capped at `maxMs`, of which a random half is waited.
 */
export function retryDelay(attempt: number, baseMs: number, maxMs: number, retryAfterMs: number | null = null, random: () => number = Math.random): number {
  if (retryAfterMs != null) return Math.round(retryAfterMs + random() * Math.min(1000, retryAfterMs * 0.2));
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/** What a stream follower tells its owner. */
interface FollowerHooks {
  onOpen(): void;
  onFrame(type: string, data: string, lastEventId: string): void;
  onRetry(info: RetryInfo): void;
  /** A 4xx: true to retry anyway (a correlation stream of an older bridge), false to stop. */
  retryRefusal?(status: number, everOpened: boolean): boolean;
  onRefused(error: StreamError): void;
}

/** One reader of one event stream over fetch: opens it, reconnects after the last event seen,
 * and stops when closed or refused. */
class StreamFollower {
  private readonly abort = new AbortController();
  private closed = false;
  private lastEventId: string | null = null;
  private baseMs: number;
  private everOpened = false;

  constructor(
    private readonly url: string,
    private readonly hooks: FollowerHooks,
    private readonly fetchImpl: FetchLike,
    private readonly headers: Record<string, string>,
    private readonly retry: RetryOptions,
  ) {
    this.baseMs = retry.initialDelayMs ?? 1000;
    void this.run();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.abort.abort();
  }

  /** The URL of the next attempt: resuming after the last event seen. The query parameter,
   * not the Last-Event-ID header, so a reconnect on another origin needs no CORS preflight. */
  private nextUrl(): string {
    if (this.lastEventId === null) return this.url;
    const url = new URL(this.url, globalThis.location?.href);
    url.searchParams.set("last_event_id", this.lastEventId);
    return url.toString();
  }

  // Long because: one attempt's outcomes (stream, refusal, retryable answer, no answer) and
  // the wait after them read best as one loop.
  private async run(): Promise<void> {
    let attempt = 0;
    while (!this.closed) {
      let info: Omit<RetryInfo, "attempt" | "delayMs">;
      try {
        const response = await this.fetchImpl(this.nextUrl(), {
          headers: { Accept: "text/event-stream", ...this.headers },
          signal: this.abort.signal,
          cache: "no-store",
        });
        const type = response.headers.get("content-type") ?? "";
        if (response.status === 200 && type.includes("text/event-stream") && response.body) {
          this.everOpened = true;
          this.hooks.onOpen();
          let delivered = false;
          await readSseFrames(
            response.body,
            (frame) => {
              if (this.closed) return false;
              if (frame.id !== null) this.lastEventId = frame.id;
              delivered = true;
              this.hooks.onFrame(frame.event, frame.data, frame.id ?? "");
              return !this.closed;
            },
            (ms) => {
              this.baseMs = ms;
            },
          );
          if (delivered) attempt = 0;
          info = { reason: "closed" };
        } else if (retryable(response.status)) {
          info = { reason: "status", status: response.status, retryAfterMs: (await askedWait(response)) ?? undefined };
        } else if (response.status >= 400 && response.status < 500 && !this.hooks.retryRefusal?.(response.status, this.everOpened)) {
          const detail = await bodyMessage(response);
          if (this.closed) return;
          this.closed = true;
          this.hooks.onRefused(refusal(response.status, this.everOpened, detail));
          return;
        } else {
          // A 200 that is no event stream (a proxy's page), or a refusal retried on request.
          await response.body?.cancel().catch(() => {});
          info = { reason: response.status === 200 ? "closed" : "status", status: response.status };
        }
      } catch {
        if (this.closed) return;
        info = { reason: "network" };
      }
      if (this.closed) return;
      attempt += 1;
      const delayMs = retryDelay(attempt, this.baseMs, this.retry.maxDelayMs ?? 30_000, info.retryAfterMs ?? null, this.retry.random);
      this.hooks.onRetry({ attempt, delayMs, ...info });
      await sleep(delayMs, this.abort.signal);
    }
  }
}

function retryable(status: number): boolean {
  return status >= 500 || status === 429 || status === 408;
}

/** The wait a refusal asks for: `Retry-After`, else the bridge's body `error.retry_after_secs`
 * (readable on another origin, where the header is not exposed). */
async function askedWait(response: Response): Promise<number | null> {
  const header = parseRetryAfter(response.headers.get("retry-after"));
  const body = await response.json().catch(() => null);
  const secs = body?.error?.retry_after_secs;
  return header ?? (typeof secs === "number" ? secs * 1000 : null);
}

async function bodyMessage(response: Response): Promise<string | null> {
  const text = await response.text().catch(() => "");
  try {
    return JSON.parse(text)?.error?.message ?? null;
  } catch {
    return null;
  }
}

function refusal(status: number, everOpened: boolean, detail: string | null): StreamError {
  const why =
    status === 404
      ? everOpened
        ? "the bridge no longer knows this job: it expired, or the bridge restarted and lost it (a bridge without a shared store keeps jobs in memory only)"
        : "the job is unknown or expired, or its token is wrong or expired"
      : status === 401 || status === 403
        ? "the bridge refused this reader's credential: the token is wrong or expired, or this caller may not read the job"
        : `the bridge refused the stream (HTTP ${status})`;
  return new StreamError(status, everOpened ? "gone" : "refused", detail ? `${why} (${detail})` : why);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done);
  });
}

/** A source of frames: the fetch follower, or an EventSource adapted. */
interface Source {
  close(): void;
}

interface OpenOptions {
  EventSource?: EventSourceClass;
  fetch?: FetchLike;
  streamHeaders?: Record<string, string>;
  retry?: RetryOptions;
}

/** The EventSource to read with: the one given, or the global one where there is no fetch. */
function legacyEventSource(options: OpenOptions): EventSourceClass | undefined {
  if (options.EventSource) return options.EventSource;
  if (options.fetch || typeof globalThis.fetch === "function") return undefined;
  return (globalThis as { EventSource?: EventSourceClass }).EventSource;
}

function openSource(url: string, types: readonly string[], hooks: FollowerHooks & { onLegacyError(closed: boolean): void }, options: OpenOptions): Source {
  const ES = options.EventSource;
  if (ES) {
    const source = new ES(url);
    source.onopen = () => hooks.onOpen();
    source.onerror = () => hooks.onLegacyError(source.readyState === 2);
    for (const type of types) {
      source.addEventListener(type, (event) => hooks.onFrame(type, event.data, event.lastEventId));
    }
    return source;
  }
  const f = options.fetch ?? globalThis.fetch?.bind(globalThis);
  if (!f) throw new Error("no fetch here: pass options.fetch (or options.EventSource)");
  return new StreamFollower(url, hooks, f, options.streamHeaders ?? {}, options.retry ?? {});
}

// ---------------------------------------------------------------------------------------------
// Following a job

function parseData(text: string): any {
  try {
    return JSON.parse(text);
  } catch {
    return { raw: text };
  }
}

function parseSeq(lastEventId: string): number | null {
  const n = Number.parseInt(lastEventId, 10);
  return Number.isFinite(n) ? n : null;
}

/** What `watchJob` calls; every handler is optional. `job` is the state after the event. */
export interface WatchHandlers {
  /** The first event of a fresh stream: the job as it is. */
  onStatus?(snapshot: JobSnapshot, job: JobState): void;
  onProgress?(data: ProgressData, job: JobState): void;
  onLog?(data: LogData, job: JobState): void;
  /** Running, no news: `{elapsed_ms, since_progress_ms}`. */
  onHeartbeat?(data: HeartbeatData, job: JobState): void;
  /** History no longer covered the gap: the state starts over from this snapshot. */
  onReset?(snapshot: JobSnapshot, job: JobState): void;
  /** The tool asks a question (also one already waiting when the stream opens): answer with
   * `watch.answer()`. */
  onInputRequired?(question: InputRequest, job: JobState): void;
  /** A question was answered (by anyone, or declined by the timeout). */
  onInputAnswered?(data: InputAnsweredData, job: JobState): void;
  /** The terminal event: `data.status` is completed, failed or cancelled. The watch is closed. */
  onDone?(data: TerminalData, job: JobState): void;
  /** The stream was refused for good (a {@link StreamError}: unknown or expired job, wrong
   * token, a job lost by a restart); the watch is closed. */
  onError?(error: Error, job: JobState): void;
  /** The connection's state changed. */
  onConnection?(state: ConnectionState): void;
  /** The watch waits `info.delayMs` before reconnecting, and why. */
  onRetry?(info: RetryInfo, job: JobState): void;
  /** Every event, after the specific handler: its name, data and the job state. */
  onEvent?(type: JobEventType, data: JobEvent["data"], job: JobState): void;
  /** Every event as a typed {@link JobEvent} (`switch (event.type)` narrows `event.data`). */
  onUpdate?(event: JobEvent, job: JobState): void;
}

/** Options of `watchJob`. */
export interface WatchOptions {
  /** The `EventSource` implementation to read with instead of fetch (the browser's own
   * reconnection then applies, and any refusal ends the watch: its status cannot be seen). */
  EventSource?: EventSourceClass;
  /** The fetch implementation: for the stream, cancel() and answer() (default: global fetch). */
  fetch?: FetchLike;
  /** Where cancel() POSTs (default: the events URL with `events` replaced by `cancel`, query
   * kept). Pass the handle's `cancel_url`. */
  cancelUrl?: string;
  /** Where answer() POSTs: the handle's `input_url` (it carries a token of its own; without it,
   * the events URL's `…/input` with `headers`, for a bearer-authenticated page). */
  inputUrl?: string;
  /** Headers for cancel() and answer() (e.g. `{Authorization: "Bearer …"}`). */
  headers?: Record<string, string>;
  /** Headers for the stream itself (a bearer credential instead of a `?token=` URL; on another
   * origin this costs a CORS preflight per connection). */
  streamHeaders?: Record<string, string>;
  /** Backoff between reconnection attempts. */
  retry?: RetryOptions;
  /** Aborting it closes the watch, as close() does. */
  signal?: AbortSignal;
}

/** A job being followed: its state, and what can be done to it. */
export interface JobWatch {
  /** The job as of the last event. */
  readonly job: JobState;
  /** The position of the last stored event applied (what a reconnect resumes after). */
  readonly lastEventId: number | null;
  readonly connection: ConnectionState;
  /** Why the watch stopped without a terminal event (a {@link StreamError}), else null. */
  readonly error: Error | null;
  /** Stop following (idempotent). */
  close(): void;
  /** Ask the bridge to cancel the job: resolves to `{status, snapshot}`, 202 requested, 409
   * already ended. The stream then delivers `cancelled`. */
  cancel(): Promise<CancelAnswer>;
  /** Answer the tool's question (`key` defaults to the oldest waiting). Resolves when the tool
   * has it; rejects with an {@link InputRefusedError}. */
  answer(answer: Answer): Promise<unknown>;
}

/**
 * Follow a job's event stream (`events_url`).
 *
 * The stream is read with fetch: a break (network error, 5xx, 429, a stream closed before the
 * job's terminal event) is retried after a jittered backoff (`retry:`, `Retry-After`), resuming
 * after the last event seen; the bridge replays exactly what was missed (or sends `reset`).
 * Events at or before the resume position are skipped, so a duplicate never moves a progress
 * bar back; a terminal event never is, and it closes the watch. A 401, 403 or 404 closes it with
 * `onError` (a {@link StreamError}); so do close() and `options.signal`.
 */
export function watchJob(eventsUrl: string, handlers: WatchHandlers = {}, options: WatchOptions = {}): JobWatch {
  if (!eventsUrl) throw new Error("watchJob needs the job's events_url");
  const legacy = legacyEventSource(options);
  let job = emptyJob();
  let connection: ConnectionState = "connecting";
  let closed = false;
  let error: Error | null = null;
  let source: Source | null = null;
  const setConnection = (state: ConnectionState) => {
    if (state === connection) return;
    connection = state;
    handlers.onConnection?.(state);
  };
  const close = () => {
    if (closed) return;
    closed = true;
    source?.close();
    options.signal?.removeEventListener("abort", close);
    setConnection("closed");
  };
  const fail = (e: Error) => {
    if (closed) return;
    error = e;
    close();
    handlers.onError?.(e, job);
  };

  const onFrame = (type: string, text: string, lastEventId: string) => {
    if (closed || !(JOB_EVENTS as readonly string[]).includes(type)) return;
    const seq = parseSeq(lastEventId);
    const terminal = isTerminal(type);
    // A heartbeat repeats the id of the last stored event; anything else at or before the
    // position is a duplicate. Except the terminal event: whatever its id, the job is over
    // (the bridge re-sends it to a reader that reconnects after the end, and older bridges
    // gave it the id of the `reset` before it); skipping it would reconnect for ever.
    if (!terminal && type !== "heartbeat" && type !== "reset" && type !== "status") {
      if (seq !== null && job.seq !== null && seq <= job.seq) return;
    }
    setConnection("open");
    const data = parseData(text);
    const asked = new Set(job.input_requests.map((q) => q.key));
    job = reduceJob(job, type, data, seq);
    const event = { type, id: seq, data } as JobEvent;
    if (terminal) {
      close();
      handlers.onDone?.(data, job);
    } else {
      const handler = {
        status: handlers.onStatus,
        progress: handlers.onProgress,
        log: handlers.onLog,
        heartbeat: handlers.onHeartbeat,
        reset: handlers.onReset,
        input_answered: handlers.onInputAnswered,
      }[type as string] as ((d: unknown, j: JobState) => void) | undefined;
      handler?.(data, job);
      // A new question, from its event or from a snapshot that already lists it.
      for (const question of job.input_requests) {
        if (!asked.has(question.key)) handlers.onInputRequired?.(question, job);
      }
    }
    handlers.onEvent?.(event.type, event.data, job);
    handlers.onUpdate?.(event, job);
  };

  handlers.onConnection?.(connection);
  if (options.signal?.aborted) {
    close();
  } else {
    options.signal?.addEventListener("abort", close);
    source = openSource(
      eventsUrl,
      JOB_EVENTS,
      {
        onOpen: () => setConnection("open"),
        onFrame,
        onRetry: (info) => {
          setConnection("reconnecting");
          handlers.onRetry?.(info, job);
        },
        onRefused: fail,
        // EventSource: CLOSED is the browser giving up (an HTTP error status or a non-SSE
        // answer), CONNECTING a dropped connection it is bringing back.
        onLegacyError: (gaveUp) => {
          if (closed) return;
          if (gaveUp) {
            fail(
              new StreamError(
                0,
                "refused",
                "the job's event stream was refused: the job is unknown or expired, its token is wrong, " +
                  "or the bridge is unreachable from this page (a different origin without CORS)",
              ),
            );
          } else setConnection("reconnecting");
        },
      },
      { ...options, EventSource: legacy },
    );
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
    get error() {
      return error;
    },
    close,
    cancel: () =>
      cancelJob(options.cancelUrl ?? cancelUrlFor(eventsUrl), {
        headers: options.headers,
        fetch: options.fetch,
      }),
    answer: (answer: Answer) => {
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
export function inputUrlFor(eventsUrl: string): string {
  const url = new URL(eventsUrl, globalThis.location?.href);
  if (!url.pathname.endsWith("/events")) {
    throw new Error(`cannot tell the input URL from ${eventsUrl}: pass options.inputUrl`);
  }
  url.pathname = url.pathname.replace(/\/events$/, "/input");
  return url.toString();
}

/** An answer to a tool's question. */
export interface Answer {
  action: "accept" | "decline" | "cancel";
  /** The answer, fitting the question's `requested_schema` (for `accept`). */
  content?: Record<string, unknown>;
  /** Which question (default: the oldest waiting). */
  key?: string;
}

/** An answer the bridge did not take. `status` 400: it does not fit the question (`field`
 * names which part, like "content.answer"); 409: no question waits (answered already, timed
 * out); 413: too large; 404: unknown job or wrong token. */
export class InputRefusedError extends Error {
  readonly status: number;
  readonly field: string | null;
  constructor(status: number, message: string, field: string | null = null) {
    super(message);
    this.name = "InputRefusedError";
    this.status = status;
    // The bridge's 400 names it in `error.field`; older bridges (and the job tool's text) only
    // in the message: "…: content.answer: must be a string".
    this.field = field ?? /\b(content(?:\.[^:\s]+)?):/.exec(message)?.[1] ?? null;
  }
}

/** Headers and fetch for the POSTs (cancel, answer). */
export interface RequestOptions {
  headers?: Record<string, string>;
  fetch?: FetchLike;
}

/** POST an answer to a job's input URL. Resolves to the bridge's body (`{job_id, answered}`). */
export async function answerJob(inputUrl: string, answer: Answer, { headers = {}, fetch: fetchImpl }: RequestOptions = {}): Promise<unknown> {
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
export function contentFromForm(schema: RequestedSchema | null | undefined, values: Record<string, unknown>): Record<string, unknown> {
  const content: Record<string, unknown> = {};
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
export function cancelUrlFor(eventsUrl: string): string {
  const url = new URL(eventsUrl, globalThis.location?.href);
  if (!url.pathname.endsWith("/events")) {
    throw new Error(`cannot tell the cancel URL from ${eventsUrl}: pass options.cancelUrl`);
  }
  url.pathname = url.pathname.replace(/\/events$/, "/cancel");
  return url.toString();
}

/** What the bridge answered a cancel: 202 (requested) or 409 (already ended), with the
 * snapshot. */
export interface CancelAnswer {
  status: 202 | 409;
  snapshot: JobSnapshot | null;
}

/** POST a job's cancel URL. Resolves to `{status, snapshot}` for 202 and 409. */
export async function cancelJob(cancelUrl: string, { headers = {}, fetch: fetchImpl }: RequestOptions = {}): Promise<CancelAnswer> {
  const f = fetchImpl ?? globalThis.fetch;
  const response = await f(cancelUrl, { method: "POST", headers });
  const body = await response.json().catch(() => null);
  if (response.status === 202 || response.status === 409) {
    return { status: response.status, snapshot: body };
  }
  const why = body?.error?.message ?? `HTTP ${response.status}`;
  throw new Error(`cancel refused (${response.status}): ${why}`);
}

// ---------------------------------------------------------------------------------------------
// Following a correlation

/** What `watchCorrelation` calls; every handler is optional. */
export interface CorrelationHandlers {
  /** A job of the correlation started (its snapshot). */
  onJobStarted?(snapshot: JobSnapshot, job: JobState): void;
  /** An event of one of the jobs (`data.job_id` says which); `job` is that job's state. */
  onJobEvent?(type: JobEventType, data: any, job: JobState): void;
  /** History no longer covered the gap: the snapshots of the correlation's jobs. */
  onReset?(data: { jobs?: JobSnapshot[] }): void;
  /** The bridge has no job with this correlation ID yet (an older bridge's 404); asked again. */
  onWaiting?(): void;
  onError?(error: Error): void;
  onConnection?(state: ConnectionState): void;
  onRetry?(info: RetryInfo): void;
}

/** Options of `watchCorrelation`. */
export interface CorrelationOptions {
  EventSource?: EventSourceClass;
  fetch?: FetchLike;
  streamHeaders?: Record<string, string>;
  retry?: RetryOptions;
  signal?: AbortSignal;
  /** A refused stream that never opened is asked again every `retryMs` (2000) … */
  retryMs?: number;
  /** … until `waitMs` (600000) have passed (older bridges answered 404 before the first job). */
  waitMs?: number;
}

/** A correlation being followed. */
export interface CorrelationWatch {
  /** Every job of the correlation seen so far, by job ID. */
  readonly jobs: Map<string, JobState>;
  readonly connection: ConnectionState;
  readonly error: Error | null;
  close(): void;
}

/**
 * Follow a correlation stream (`/correlations/{cid}/events`): every job started by MCP requests
 * that carried that correlation ID. The stream does not end by itself (more jobs may join): call
 * close(). Reconnection as for {@link watchJob}. The stream opens empty before the correlation's
 * first job starts (an application usually subscribes before it calls the agent); older bridges
 * answered 404 until then, so a stream refused before it ever opened is asked again every
 * `retryMs` until `waitMs` have passed, then onError.
 */
export function watchCorrelation(url: string, handlers: CorrelationHandlers = {}, options: CorrelationOptions = {}): CorrelationWatch {
  const legacy = legacyEventSource(options);
  const retryMs = options.retryMs ?? 2000;
  const waitUntil = Date.now() + (options.waitMs ?? 600_000);
  const jobs = new Map<string, JobState>();
  let closed = false;
  let connection: ConnectionState = "connecting";
  let error: Error | null = null;
  let source: Source | null = null;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let everOpened = false;
  const setConnection = (state: ConnectionState) => {
    if (state === connection) return;
    connection = state;
    handlers.onConnection?.(state);
  };
  const close = () => {
    if (closed) return;
    closed = true;
    clearTimeout(timer);
    source?.close();
    options.signal?.removeEventListener("abort", close);
    setConnection("closed");
  };
  const fail = (e: Error) => {
    if (closed) return;
    error = e;
    close();
    handlers.onError?.(e);
  };
  const waiting = () => {
    setConnection("waiting");
    handlers.onWaiting?.();
  };
  const onFrame = (type: string, text: string) => {
    if (closed) return;
    const data = parseData(text);
    everOpened = true;
    setConnection("open");
    if (type === "job_started") {
      jobs.set(data.job_id, reduceJob(emptyJob(data.job_id), "status", data));
      handlers.onJobStarted?.(data, jobs.get(data.job_id)!);
    } else if (type === "reset") {
      for (const snapshot of data.jobs ?? []) {
        jobs.set(snapshot.job_id, reduceJob(emptyJob(snapshot.job_id), "reset", snapshot));
      }
      handlers.onReset?.(data);
    } else {
      const job = reduceJob(jobs.get(data.job_id) ?? emptyJob(data.job_id), type, data);
      jobs.set(data.job_id, job);
      handlers.onJobEvent?.(type as JobEventType, data, job);
    }
  };
  const types = ["job_started", "reset", "progress", "log", "heartbeat", ...INPUT_EVENTS, ...TERMINAL_EVENTS];
  const open = () => {
    source = openSource(
      url,
      types,
      {
        onOpen: () => {
          everOpened = true;
          setConnection("open");
        },
        onFrame,
        onRetry: (info) => {
          setConnection(everOpened ? "reconnecting" : "waiting");
          handlers.onRetry?.(info);
        },
        retryRefusal: (_status, opened) => {
          if (opened || Date.now() + retryMs >= waitUntil) return false;
          waiting();
          return true;
        },
        onRefused: fail,
        onLegacyError: (gaveUp) => {
          if (closed) return;
          if (!gaveUp) return setConnection("reconnecting");
          source?.close();
          if (!everOpened && Date.now() + retryMs < waitUntil) {
            waiting();
            timer = setTimeout(open, retryMs);
            return;
          }
          fail(new StreamError(0, "refused", "the correlation stream was refused: malformed or unknown ID, wrong token, or unreachable"));
        },
      },
      { ...options, EventSource: legacy, retry: { initialDelayMs: retryMs, ...options.retry } },
    );
  };
  handlers.onConnection?.(connection);
  if (options.signal?.aborted) close();
  else {
    options.signal?.addEventListener("abort", close);
    open();
  }
  return {
    jobs,
    close,
    get connection() {
      return connection;
    },
    get error() {
      return error;
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
export function parseJobHandle(value: unknown): JobHandle | null {
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
  const v = value as Record<string, any>;
  if (v.type === "mcp_call") {
    if (v.error) return null;
    return parseJobHandle(v.output);
  }
  if (typeof v.job_id === "string" && typeof v.events_url === "string") return v as JobHandle;
  const fromStructured = parseJobHandle(v.structuredContent);
  if (fromStructured) return fromStructured;
  if (Array.isArray(v.content)) {
    for (const block of v.content) {
      if (block?.type === "text") {
        const handle = parseJobHandle(block.text);
        if (handle) return handle;
      }
    }
  }
  const meta = v._meta?.[JOB_META_KEY];
  if (meta && typeof meta.job_id === "string") return meta;
  return null;
}

// ---------------------------------------------------------------------------------------------
// A small MCP Streamable HTTP client, enough to list and call tools through the bridge.

/** An HTTP answer from the MCP endpoint that is not a success. `status` 401: a bearer token
 * is needed (or the one given is wrong); 0: the bridge could not be reached. */
export class McpHttpError extends Error {
  readonly status: number;
  readonly wwwAuthenticate: string | null;
  constructor(status: number, message: string, wwwAuthenticate: string | null = null) {
    super(message);
    this.name = "McpHttpError";
    this.status = status;
    this.wwwAuthenticate = wwwAuthenticate;
  }
}

/** A JSON-RPC error answer to a request. */
export class McpRpcError extends Error {
  readonly code: number | undefined;
  readonly data: unknown;
  constructor(error: { code?: number; message?: string; data?: unknown } | null | undefined) {
    super(error?.message ?? "JSON-RPC error");
    this.name = "McpRpcError";
    this.code = error?.code;
    this.data = error?.data;
  }
}

const PROTOCOL_VERSION = "2025-06-18";

/** Options of `new McpClient(url, options)`. */
export interface McpClientOptions {
  /** A bearer token for /mcp. */
  token?: string | null;
  /** Headers for every request. */
  headers?: Record<string, string>;
  fetch?: FetchLike;
  clientInfo?: { name: string; version: string };
}

/** Options of one `callTool`. */
export interface CallToolOptions {
  /** Merged into `params._meta` (e.g. `{[MODE_META_KEY]: "async"}`). */
  meta?: Record<string, unknown>;
  /** Headers of this request only (e.g. `{"X-Correlation-Id": "turn-1"}`). */
  headers?: Record<string, string>;
  /** Sends a progressToken and reports the `notifications/progress` for it. */
  onProgress?(params: { progressToken: string; progress: number; total?: number; message?: string }): void;
  /** The JSON-RPC id of the request (to cancel it with cancelRequest). */
  onRequestId?(id: number): void;
}

interface RpcMessage {
  jsonrpc: "2.0";
  id?: number;
  method?: string;
  params?: any;
  result?: any;
  error?: any;
}

/**
 * A small MCP Streamable HTTP client, enough to list and call tools through the bridge (in a
 * backend-for-frontend, which holds the bridge's MCP token; a page never should).
 *
 *     const mcp = new McpClient("http://bridge:8080/mcp", {token});
 *     const result = await mcp.callTool("demo__slow_count", {to: 5}, {meta: {[MODE_META_KEY]: "async"}});
 *     const handle = parseJobHandle(result);
 */
export class McpClient {
  url: string;
  token: string | null;
  headers: Record<string, string>;
  fetch: FetchLike;
  clientInfo: { name: string; version: string };
  sessionId: string | null = null;
  protocolVersion = PROTOCOL_VERSION;
  nextId = 1;
  serverInfo: { name?: string; version?: string } | null = null;

  constructor(url: string, { token = null, headers = {}, fetch: fetchImpl, clientInfo }: McpClientOptions = {}) {
    this.url = url;
    this.token = token;
    this.headers = headers;
    this.fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
    this.clientInfo = clientInfo ?? { name: "@mcp-progress-bridge/client", version: VERSION };
  }

  /** Use another bearer token (the session starts over). */
  setToken(token: string | null): void {
    this.token = token || null;
    this.sessionId = null;
  }

  /** Initialize a session; resolves to the server's `initialize` result. */
  async connect(): Promise<any> {
    this.sessionId = null;
    const { result } = await this.post(
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
    await this.post({ jsonrpc: "2.0", method: "notifications/initialized" });
    return result;
  }

  /** Every tool, all pages. */
  async listTools(): Promise<Array<{ name: string; description?: string; inputSchema?: any; [key: string]: unknown }>> {
    const tools = [];
    let cursor: string | undefined;
    do {
      const params = cursor ? { cursor } : {};
      const { result } = await this.request("tools/list", params);
      tools.push(...(result.tools ?? []));
      cursor = result.nextCursor;
    } while (cursor);
    return tools;
  }

  /** Call a tool; resolves to its `CallToolResult` (a job handle for an async call: read it
   * with {@link parseJobHandle}). */
  async callTool(name: string, args: Record<string, unknown> = {}, { meta, headers, onProgress, onRequestId }: CallToolOptions = {}): Promise<CallToolResult> {
    const params: Record<string, unknown> = { name, arguments: args };
    const _meta: Record<string, unknown> = { ...(meta ?? {}) };
    if (onProgress) _meta.progressToken = `page-${Date.now()}-${this.nextId}`;
    if (Object.keys(_meta).length) params._meta = _meta;
    const { result } = await this.request("tools/call", params, { headers, onProgress, onRequestId });
    return result;
  }

  /** Tell the server to stop a request of ours (notifications/cancelled). */
  async cancelRequest(requestId: number, reason = "cancelled by the user"): Promise<void> {
    await this.post({
      jsonrpc: "2.0",
      method: "notifications/cancelled",
      params: { requestId, reason },
    });
  }

  /** Send a request; re-initializes once when the session has expired (404). */
  async request(method: string, params: unknown, options: CallToolOptions = {}): Promise<RpcMessage> {
    if (!this.sessionId) await this.connect();
    const send = () => {
      const id = this.nextId++;
      options.onRequestId?.(id);
      return this.post({ jsonrpc: "2.0", id, method, params }, options);
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

  // Long because: one POST's answer comes as JSON or as an SSE stream with progress before it.
  private async post(message: RpcMessage, { headers = {}, onProgress }: CallToolOptions = {}, initializing = false): Promise<RpcMessage> {
    const h: Record<string, string> = {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      ...this.headers,
      ...headers,
    };
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    if (this.sessionId) h["Mcp-Session-Id"] = this.sessionId;
    if (!initializing) h["MCP-Protocol-Version"] = this.protocolVersion;
    let response: Response;
    try {
      response = await this.fetch(this.url, { method: "POST", headers: h, body: JSON.stringify(message) });
    } catch (error) {
      throw new McpHttpError(0, `cannot reach the bridge at ${this.url}: ${(error as Error).message}`);
    }
    if (initializing) this.sessionId = response.headers.get("mcp-session-id");
    if (!response.ok) {
      const text = await response.text().catch(() => "");
      throw httpError(response, text);
    }
    if (message.id === undefined) {
      await response.body?.cancel().catch(() => {});
      return { jsonrpc: "2.0" };
    }
    const type = response.headers.get("content-type") ?? "";
    let answer: RpcMessage | null = null;
    const consider = (msg: RpcMessage) => {
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
    if (type.includes("text/event-stream") && response.body) {
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
    const got = answer as RpcMessage | null;
    if (!got) throw new McpHttpError(response.status, `no answer to ${message.method} from the bridge`);
    if (got.error) throw new McpRpcError(got.error);
    return got;
  }
}

function httpError(response: Response, text: string): McpHttpError {
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
