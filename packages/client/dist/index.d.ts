/** This client's version: the bridge's version it was released with. */
export declare const VERSION = "0.1.0";
/** A job's status as the bridge reports it. */
export type JobStatus = "running" | "input_required" | "completed" | "failed" | "cancelled";
/** Why a job failed (`failed` event `reason`); see docs/events.md. */
export type FailureReason = "tool_error" | "upstream_error" | "upstream_lost" | "upstream_unavailable" | "timeout" | "unsupported" | "result_too_large" | "owner_lost" | "store_unavailable" | (string & {});
/** An MCP `CallToolResult`, as the upstream answered it. */
export interface CallToolResult {
    content?: Array<{
        type: string;
        text?: string;
        [key: string]: unknown;
    }>;
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
export interface InputRequiredData extends EventBase, InputRequest {
}
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
export type JobEvent = {
    type: "status";
    id: number | null;
    data: JobSnapshot;
} | {
    type: "reset";
    id: number | null;
    data: JobSnapshot;
} | {
    type: "progress";
    id: number | null;
    data: ProgressData;
} | {
    type: "log";
    id: number | null;
    data: LogData;
} | {
    type: "heartbeat";
    id: number | null;
    data: HeartbeatData;
} | {
    type: "input_required";
    id: number | null;
    data: InputRequiredData;
} | {
    type: "input_answered";
    id: number | null;
    data: InputAnsweredData;
} | {
    type: "completed";
    id: number | null;
    data: CompletedData;
} | {
    type: "failed";
    id: number | null;
    data: FailedData;
} | {
    type: "cancelled";
    id: number | null;
    data: CancelledData;
};
/** The name of a job event. */
export type JobEventType = JobEvent["type"];
/** The terminal events: exactly one ends every job. */
export type TerminalEvent = Extract<JobEvent, {
    type: "completed" | "failed" | "cancelled";
}>;
/** The data of a terminal event. */
export type TerminalData = TerminalEvent["data"];
/** The events that end a job's stream. */
export declare const TERMINAL_EVENTS: readonly ["completed", "failed", "cancelled"];
/** The `_meta` key under which a bridge result names its job (`{job_id, events_url}`). */
export declare const JOB_META_KEY = "mcp-progress-bridge/job";
/** The request `_meta` key that picks the call mode of one tools/call: async, sync or auto. */
export declare const MODE_META_KEY = "mcp-progress-bridge/mode";
/** The events about a tool's question: asked, and answered (by anyone, or the timeout). */
export declare const INPUT_EVENTS: readonly ["input_required", "input_answered"];
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
    heartbeat: {
        elapsed_ms: number | null;
        since_progress_ms: number | null;
        at: number;
    } | null;
    /** The last log events (at most 50). */
    logs: LogData[];
    /** The tool's questions waiting for an answer. */
    input_requests: InputRequest[];
}
/** A fresh job state, before any event. */
export declare function emptyJob(jobId?: string | null): JobState;
/**
 * Apply one event (`type` is the SSE event name, `data` its parsed JSON, `seq` its numeric id)
 * to a job state; returns a new state. Unknown event types leave the state as it was.
 */
export declare function reduceJob(state: JobState, type: JobEventType | (string & {}), data: any, seq?: number | null): JobState;
/** Estimated milliseconds left, from the job's own timestamps (no client clock involved). */
export declare function estimateEta(job: Pick<JobState, "progress" | "total" | "created_at" | "last_progress_at">): number | null;
/** `total` known: the fraction done (0 to 1); otherwise null (show an activity indicator). */
export declare function fractionDone(job: Pick<JobState, "progress" | "total">): number | null;
/** "1 h 2 min", "3 min 4 s", "5.2 s" */
export declare function formatDuration(ms: number | null | undefined): string;
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
export declare class StreamError extends Error {
    /** The HTTP status; 0 when unknown (an `EventSource` hides it). */
    readonly status: number;
    /** `gone`: refused after the stream had been open (the job expired, or a bridge without a
     * shared store restarted and lost it); `refused`: refused from the first attempt (unknown or
     * expired job, wrong or expired token). */
    readonly kind: "gone" | "refused";
    constructor(status: number, kind: "gone" | "refused", message: string);
}
/** The minimal `EventSource` a watch accepts in `options.EventSource` (the browser's, or a
 * polyfill). With one, reconnection is the EventSource's own and any refusal ends the watch. */
export interface EventSourceLike {
    readonly readyState: number;
    onopen: ((event: any) => void) | null;
    onerror: ((event: any) => void) | null;
    addEventListener(type: string, listener: (event: {
        data: string;
        lastEventId: string;
    }) => void): void;
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
export declare function readSseFrames(body: ReadableStream<Uint8Array>, onFrame: (frame: Frame) => boolean | void, onRetry?: (ms: number) => void): Promise<void>;
/**
 * Read an SSE body incrementally; calls onMessage(dataText) for every event's data, until it
 * returns false or the body ends. (What the MCP client uses; {@link readSseFrames} has the rest.)
 */
export declare function readSseBody(body: ReadableStream<Uint8Array>, onMessage: (data: string) => boolean | void): Promise<void>;
/** Milliseconds a `Retry-After` value asks for (delta-seconds or an HTTP date), or null. */
export declare function parseRetryAfter(value: string | null | undefined, now?: number): number | null;
/**
 * The wait before retry `attempt` (1, 2, …): with `retryAfterMs` (the bridge asked), that plus up
 * to 20 % (at most 1 s) of jitter; otherwise equal-jitter exponential backoff, `baseMs * 2^(n-1)`
 * capped at `maxMs`, of which a random half is waited.
 */
export declare function retryDelay(attempt: number, baseMs: number, maxMs: number, retryAfterMs?: number | null, random?: () => number): number;
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
export declare function watchJob(eventsUrl: string, handlers?: WatchHandlers, options?: WatchOptions): JobWatch;
/** The input URL next to an events URL, query kept. The handle's own `input_url` carries the
 * input token; this one only works with a bearer credential in headers. */
export declare function inputUrlFor(eventsUrl: string): string;
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
export declare class InputRefusedError extends Error {
    readonly status: number;
    readonly field: string | null;
    constructor(status: number, message: string, field?: string | null);
}
/** Headers and fetch for the POSTs (cancel, answer). */
export interface RequestOptions {
    headers?: Record<string, string>;
    fetch?: FetchLike;
}
/** POST an answer to a job's input URL. Resolves to the bridge's body (`{job_id, answered}`). */
export declare function answerJob(inputUrl: string, answer: Answer, { headers, fetch: fetchImpl }?: RequestOptions): Promise<unknown>;
/**
 * The content of an answer from form values (strings, as inputs give them), typed as the
 * question's requested_schema says: numbers and integers parsed, booleans from true/false or
 * checkbox state, empty optional fields left out. Throws an InputRefusedError (status 400,
 * `field` set) for a value that cannot be read as its type, before anything is sent.
 */
export declare function contentFromForm(schema: RequestedSchema | null | undefined, values: Record<string, unknown>): Record<string, unknown>;
/** The cancel URL next to an events URL: `…/jobs/ID/events?q` → `…/jobs/ID/cancel?q`. Used
 * only when the job handle carries no `cancel_url` of its own. */
export declare function cancelUrlFor(eventsUrl: string): string;
/** What the bridge answered a cancel: 202 (requested) or 409 (already ended), with the
 * snapshot. */
export interface CancelAnswer {
    status: 202 | 409;
    snapshot: JobSnapshot | null;
}
/** POST a job's cancel URL. Resolves to `{status, snapshot}` for 202 and 409. */
export declare function cancelJob(cancelUrl: string, { headers, fetch: fetchImpl }?: RequestOptions): Promise<CancelAnswer>;
/** What `watchCorrelation` calls; every handler is optional. */
export interface CorrelationHandlers {
    /** A job of the correlation started (its snapshot). */
    onJobStarted?(snapshot: JobSnapshot, job: JobState): void;
    /** An event of one of the jobs (`data.job_id` says which); `job` is that job's state. */
    onJobEvent?(type: JobEventType, data: any, job: JobState): void;
    /** History no longer covered the gap: the snapshots of the correlation's jobs. */
    onReset?(data: {
        jobs?: JobSnapshot[];
    }): void;
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
export declare function watchCorrelation(url: string, handlers?: CorrelationHandlers, options?: CorrelationOptions): CorrelationWatch;
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
export declare function parseJobHandle(value: unknown): JobHandle | null;
/** An HTTP answer from the MCP endpoint that is not a success. `status` 401: a bearer token
 * is needed (or the one given is wrong); 0: the bridge could not be reached. */
export declare class McpHttpError extends Error {
    readonly status: number;
    readonly wwwAuthenticate: string | null;
    constructor(status: number, message: string, wwwAuthenticate?: string | null);
}
/** A JSON-RPC error answer to a request. */
export declare class McpRpcError extends Error {
    readonly code: number | undefined;
    readonly data: unknown;
    constructor(error: {
        code?: number;
        message?: string;
        data?: unknown;
    } | null | undefined);
}
/** Options of `new McpClient(url, options)`. */
export interface McpClientOptions {
    /** A bearer token for /mcp. */
    token?: string | null;
    /** Headers for every request. */
    headers?: Record<string, string>;
    fetch?: FetchLike;
    clientInfo?: {
        name: string;
        version: string;
    };
}
/** Options of one `callTool`. */
export interface CallToolOptions {
    /** Merged into `params._meta` (e.g. `{[MODE_META_KEY]: "async"}`). */
    meta?: Record<string, unknown>;
    /** Headers of this request only (e.g. `{"X-Correlation-Id": "turn-1"}`). */
    headers?: Record<string, string>;
    /** Sends a progressToken and reports the `notifications/progress` for it. */
    onProgress?(params: {
        progressToken: string;
        progress: number;
        total?: number;
        message?: string;
    }): void;
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
export declare class McpClient {
    url: string;
    token: string | null;
    headers: Record<string, string>;
    fetch: FetchLike;
    clientInfo: {
        name: string;
        version: string;
    };
    sessionId: string | null;
    protocolVersion: string;
    nextId: number;
    serverInfo: {
        name?: string;
        version?: string;
    } | null;
    constructor(url: string, { token, headers, fetch: fetchImpl, clientInfo }?: McpClientOptions);
    /** Use another bearer token (the session starts over). */
    setToken(token: string | null): void;
    /** Initialize a session; resolves to the server's `initialize` result. */
    connect(): Promise<any>;
    /** Every tool, all pages. */
    listTools(): Promise<Array<{
        name: string;
        description?: string;
        inputSchema?: any;
        [key: string]: unknown;
    }>>;
    /** Call a tool; resolves to its `CallToolResult` (a job handle for an async call: read it
     * with {@link parseJobHandle}). */
    callTool(name: string, args?: Record<string, unknown>, { meta, headers, onProgress, onRequestId }?: CallToolOptions): Promise<CallToolResult>;
    /** Tell the server to stop a request of ours (notifications/cancelled). */
    cancelRequest(requestId: number, reason?: string): Promise<void>;
    /** Send a request; re-initializes once when the session has expired (404). */
    request(method: string, params: unknown, options?: CallToolOptions): Promise<RpcMessage>;
    private post;
}
export {};
