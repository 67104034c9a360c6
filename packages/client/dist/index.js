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
/** The events that end a job's stream. */
export const TERMINAL_EVENTS = Object.freeze([
    "completed",
    "failed",
    "cancelled",
]);
/** The `_meta` key under which a bridge result names its job (`{job_id, events_url}`). */
export const JOB_META_KEY = "mcp-progress-bridge/job";
/** The request `_meta` key that picks the call mode of one tools/call: async, sync or auto. */
export const MODE_META_KEY = "mcp-progress-bridge/mode";
/** The events about a tool's question: asked, and answered (by anyone, or the timeout). */
export const INPUT_EVENTS = Object.freeze([
    "input_required",
    "input_answered",
]);
const JOB_EVENTS = [
    "status",
    "progress",
    "log",
    "heartbeat",
    "reset",
    ...INPUT_EVENTS,
    ...TERMINAL_EVENTS,
];
const isTerminal = (type) => TERMINAL_EVENTS.includes(type);
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
export function reduceJob(state, type, data, seq = null) {
    const next = { ...state };
    if (seq !== null && type !== "heartbeat")
        next.seq = seq;
    switch (type) {
        case "status":
        case "reset":
            return { ...fromSnapshot(data), logs: state.logs, seq: next.seq };
        case "progress":
            next.status = next.status === "unknown" ? "running" : next.status;
            next.progress = data.progress;
            next.total = data.total ?? null;
            if (data.message != null)
                next.message = data.message;
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
            if (next.status === "input_required" && next.input_requests.length === 0)
                next.status = "running";
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
        if (key in s && key !== "logs")
            job[key] = s[key];
    }
    const state = job;
    state.error = s.error ?? null;
    state.input_requests = Array.isArray(s.input_requests) ? s.input_requests : [];
    return state;
}
/** Estimated milliseconds left, from the job's own timestamps (no client clock involved). */
export function estimateEta(job) {
    const { progress, total, created_at: start, last_progress_at: now } = job;
    if (total == null || progress == null || start == null || now == null)
        return null;
    if (!(progress > 0) || progress >= total || now <= start)
        return null;
    return Math.round(((now - start) * (total - progress)) / progress);
}
/** `total` known: the fraction done (0 to 1); otherwise null (show an activity indicator). */
export function fractionDone(job) {
    if (job.total == null || job.progress == null || !(job.total > 0))
        return null;
    return Math.min(1, Math.max(0, job.progress / job.total));
}
/** "1 h 2 min", "3 min 4 s", "5.2 s" */
export function formatDuration(ms) {
    if (ms == null || !Number.isFinite(ms))
        return "";
    if (ms < 10_000)
        return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
    const s = Math.round(ms / 1000);
    if (s < 3600)
        return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}
/** A stream the bridge refused for good (401, 403, 404 or another 4xx), or a refusal an
 * `EventSource` reported (its status unknown: `status` 0). The watch is closed. */
export class StreamError extends Error {
    /** The HTTP status; 0 when unknown (an `EventSource` hides it). */
    status;
    /** `gone`: refused after the stream had been open (the job expired, or a bridge without a
     * shared store restarted and lost it); `refused`: refused from the first attempt (unknown or
     * expired job, wrong or expired token). */
    kind;
    constructor(status, kind, message) {
        super(message);
        this.name = "StreamError";
        this.status = status;
        this.kind = kind;
    }
}
/**
 * Read an SSE body incrementally. `onFrame` gets every event with data (`event` defaults to
 * `message`; `id` is the last `id:` seen so far, as an EventSource's lastEventId); return false
 * to stop reading. `onRetry` gets each `retry:` value. Resolves when the body ends.
 */
export async function readSseFrames(body, onFrame, onRetry) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let event = "";
    let data = [];
    let lastId = null;
    const line = (text) => {
        if (text === "") {
            const had = data.length > 0;
            const frame = { event: event || "message", data: data.join("\n"), id: lastId };
            event = "";
            data = [];
            return had ? onFrame(frame) !== false : true;
        }
        if (text.startsWith(":"))
            return true;
        const colon = text.indexOf(":");
        const field = colon === -1 ? text : text.slice(0, colon);
        let value = colon === -1 ? "" : text.slice(colon + 1);
        if (value.startsWith(" "))
            value = value.slice(1);
        if (field === "data")
            data.push(value);
        else if (field === "event")
            event = value;
        else if (field === "id" && !value.includes("\0"))
            lastId = value;
        else if (field === "retry" && /^\d+$/.test(value))
            onRetry?.(Number(value));
        return true;
    };
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done)
                break;
            buffer += decoder.decode(value, { stream: true });
            let index;
            while ((index = buffer.search(/\r\n|\r|\n/)) !== -1) {
                // A lone \r at the end of the buffer may be the first half of \r\n: wait for more.
                if (buffer[index] === "\r" && index === buffer.length - 1)
                    break;
                const text = buffer.slice(0, index);
                const eol = buffer[index] === "\r" && buffer[index + 1] === "\n" ? 2 : 1;
                buffer = buffer.slice(index + eol);
                if (!line(text))
                    return;
            }
        }
        buffer += decoder.decode();
        for (const text of buffer.split(/\r\n|\r|\n/))
            if (!line(text))
                return;
        line("");
    }
    finally {
        reader.cancel().catch(() => { });
    }
}
/**
 * Read an SSE body incrementally; calls onMessage(dataText) for every event's data, until it
 * returns false or the body ends. (What the MCP client uses; {@link readSseFrames} has the rest.)
 */
export async function readSseBody(body, onMessage) {
    await readSseFrames(body, (frame) => onMessage(frame.data));
}
/** Milliseconds a `Retry-After` value asks for (delta-seconds or an HTTP date), or null. */
export function parseRetryAfter(value, now = Date.now()) {
    if (value == null || value.trim() === "")
        return null;
    if (/^\s*\d+\s*$/.test(value))
        return Number(value) * 1000;
    const date = Date.parse(value);
    return Number.isFinite(date) ? Math.max(0, date - now) : null;
}
/**
 * The wait before retry `attempt` (1, 2, …): with `retryAfterMs` (the bridge asked), that plus up
 * to 20 % (at most 1 s) of jitter; otherwise equal-jitter exponential backoff, `baseMs * 2^(n-1)`
 * capped at `maxMs`, of which a random half is waited.
 */
export function retryDelay(attempt, baseMs, maxMs, retryAfterMs = null, random = Math.random) {
    if (retryAfterMs != null)
        return Math.round(retryAfterMs + random() * Math.min(1000, retryAfterMs * 0.2));
    const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
    return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}
/** One reader of one event stream over fetch: opens it, reconnects after the last event seen,
 * and stops when closed or refused. */
class StreamFollower {
    url;
    hooks;
    fetchImpl;
    headers;
    retry;
    abort = new AbortController();
    closed = false;
    lastEventId = null;
    baseMs;
    everOpened = false;
    constructor(url, hooks, fetchImpl, headers, retry) {
        this.url = url;
        this.hooks = hooks;
        this.fetchImpl = fetchImpl;
        this.headers = headers;
        this.retry = retry;
        this.baseMs = retry.initialDelayMs ?? 1000;
        void this.run();
    }
    close() {
        if (this.closed)
            return;
        this.closed = true;
        this.abort.abort();
    }
    /** The URL of the next attempt: resuming after the last event seen. The query parameter,
     * not the Last-Event-ID header, so a reconnect on another origin needs no CORS preflight. */
    nextUrl() {
        if (this.lastEventId === null)
            return this.url;
        const url = new URL(this.url, globalThis.location?.href);
        url.searchParams.set("last_event_id", this.lastEventId);
        return url.toString();
    }
    // Long because: one attempt's outcomes (stream, refusal, retryable answer, no answer) and
    // the wait after them read best as one loop.
    async run() {
        let attempt = 0;
        while (!this.closed) {
            let info;
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
                    await readSseFrames(response.body, (frame) => {
                        if (this.closed)
                            return false;
                        if (frame.id !== null)
                            this.lastEventId = frame.id;
                        delivered = true;
                        this.hooks.onFrame(frame.event, frame.data, frame.id ?? "");
                        return !this.closed;
                    }, (ms) => {
                        this.baseMs = ms;
                    });
                    if (delivered)
                        attempt = 0;
                    info = { reason: "closed" };
                }
                else if (retryable(response.status)) {
                    info = { reason: "status", status: response.status, retryAfterMs: (await askedWait(response)) ?? undefined };
                }
                else if (response.status >= 400 && response.status < 500 && !this.hooks.retryRefusal?.(response.status, this.everOpened)) {
                    const detail = await bodyMessage(response);
                    if (this.closed)
                        return;
                    this.closed = true;
                    this.hooks.onRefused(refusal(response.status, this.everOpened, detail));
                    return;
                }
                else {
                    // A 200 that is no event stream (a proxy's page), or a refusal retried on request.
                    await response.body?.cancel().catch(() => { });
                    info = { reason: response.status === 200 ? "closed" : "status", status: response.status };
                }
            }
            catch {
                if (this.closed)
                    return;
                info = { reason: "network" };
            }
            if (this.closed)
                return;
            attempt += 1;
            const delayMs = retryDelay(attempt, this.baseMs, this.retry.maxDelayMs ?? 30_000, info.retryAfterMs ?? null, this.retry.random);
            this.hooks.onRetry({ attempt, delayMs, ...info });
            await sleep(delayMs, this.abort.signal);
        }
    }
}
function retryable(status) {
    return status >= 500 || status === 429 || status === 408;
}
/** The wait a refusal asks for: `Retry-After`, else the bridge's body `error.retry_after_secs`
 * (readable on another origin, where the header is not exposed). */
async function askedWait(response) {
    const header = parseRetryAfter(response.headers.get("retry-after"));
    const body = await response.json().catch(() => null);
    const secs = body?.error?.retry_after_secs;
    return header ?? (typeof secs === "number" ? secs * 1000 : null);
}
async function bodyMessage(response) {
    const text = await response.text().catch(() => "");
    try {
        return JSON.parse(text)?.error?.message ?? null;
    }
    catch {
        return null;
    }
}
function refusal(status, everOpened, detail) {
    const why = status === 404
        ? everOpened
            ? "the bridge no longer knows this job: it expired, or the bridge restarted and lost it (a bridge without a shared store keeps jobs in memory only)"
            : "the job is unknown or expired, or its token is wrong or expired"
        : status === 401 || status === 403
            ? "the bridge refused this reader's credential: the token is wrong or expired, or this caller may not read the job"
            : `the bridge refused the stream (HTTP ${status})`;
    return new StreamError(status, everOpened ? "gone" : "refused", detail ? `${why} (${detail})` : why);
}
function sleep(ms, signal) {
    return new Promise((resolve) => {
        if (signal.aborted)
            return resolve();
        const timer = setTimeout(done, ms);
        function done() {
            clearTimeout(timer);
            signal.removeEventListener("abort", done);
            resolve();
        }
        signal.addEventListener("abort", done);
    });
}
/** The EventSource to read with: the one given, or the global one where there is no fetch. */
function legacyEventSource(options) {
    if (options.EventSource)
        return options.EventSource;
    if (options.fetch || typeof globalThis.fetch === "function")
        return undefined;
    return globalThis.EventSource;
}
function openSource(url, types, hooks, options) {
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
    if (!f)
        throw new Error("no fetch here: pass options.fetch (or options.EventSource)");
    return new StreamFollower(url, hooks, f, options.streamHeaders ?? {}, options.retry ?? {});
}
// ---------------------------------------------------------------------------------------------
// Following a job
function parseData(text) {
    try {
        return JSON.parse(text);
    }
    catch {
        return { raw: text };
    }
}
function parseSeq(lastEventId) {
    const n = Number.parseInt(lastEventId, 10);
    return Number.isFinite(n) ? n : null;
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
export function watchJob(eventsUrl, handlers = {}, options = {}) {
    if (!eventsUrl)
        throw new Error("watchJob needs the job's events_url");
    const legacy = legacyEventSource(options);
    let job = emptyJob();
    let connection = "connecting";
    let closed = false;
    let error = null;
    let source = null;
    const setConnection = (state) => {
        if (state === connection)
            return;
        connection = state;
        handlers.onConnection?.(state);
    };
    const close = () => {
        if (closed)
            return;
        closed = true;
        source?.close();
        options.signal?.removeEventListener("abort", close);
        setConnection("closed");
    };
    const fail = (e) => {
        if (closed)
            return;
        error = e;
        close();
        handlers.onError?.(e, job);
    };
    const onFrame = (type, text, lastEventId) => {
        if (closed || !JOB_EVENTS.includes(type))
            return;
        const seq = parseSeq(lastEventId);
        const terminal = isTerminal(type);
        // A heartbeat repeats the id of the last stored event; anything else at or before the
        // position is a duplicate. Except the terminal event: whatever its id, the job is over
        // (the bridge re-sends it to a reader that reconnects after the end, and older bridges
        // gave it the id of the `reset` before it); skipping it would reconnect for ever.
        if (!terminal && type !== "heartbeat" && type !== "reset" && type !== "status") {
            if (seq !== null && job.seq !== null && seq <= job.seq)
                return;
        }
        setConnection("open");
        const data = parseData(text);
        const asked = new Set(job.input_requests.map((q) => q.key));
        job = reduceJob(job, type, data, seq);
        const event = { type, id: seq, data };
        if (terminal) {
            close();
            handlers.onDone?.(data, job);
        }
        else {
            const handler = {
                status: handlers.onStatus,
                progress: handlers.onProgress,
                log: handlers.onLog,
                heartbeat: handlers.onHeartbeat,
                reset: handlers.onReset,
                input_answered: handlers.onInputAnswered,
            }[type];
            handler?.(data, job);
            // A new question, from its event or from a snapshot that already lists it.
            for (const question of job.input_requests) {
                if (!asked.has(question.key))
                    handlers.onInputRequired?.(question, job);
            }
        }
        handlers.onEvent?.(event.type, event.data, job);
        handlers.onUpdate?.(event, job);
    };
    handlers.onConnection?.(connection);
    if (options.signal?.aborted) {
        close();
    }
    else {
        options.signal?.addEventListener("abort", close);
        source = openSource(eventsUrl, JOB_EVENTS, {
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
                if (closed)
                    return;
                if (gaveUp) {
                    fail(new StreamError(0, "refused", "the job's event stream was refused: the job is unknown or expired, its token is wrong, " +
                        "or the bridge is unreachable from this page (a different origin without CORS)"));
                }
                else
                    setConnection("reconnecting");
            },
        }, { ...options, EventSource: legacy });
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
        cancel: () => cancelJob(options.cancelUrl ?? cancelUrlFor(eventsUrl), {
            headers: options.headers,
            fetch: options.fetch,
        }),
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
    status;
    field;
    constructor(status, message, field = null) {
        super(message);
        this.name = "InputRefusedError";
        this.status = status;
        // The bridge's 400 names it in `error.field`; older bridges (and the job tool's text) only
        // in the message: "…: content.answer: must be a string".
        this.field = field ?? /\b(content(?:\.[^:\s]+)?):/.exec(message)?.[1] ?? null;
    }
}
/** POST an answer to a job's input URL. Resolves to the bridge's body (`{job_id, answered}`). */
export async function answerJob(inputUrl, answer, { headers = {}, fetch: fetchImpl } = {}) {
    const f = fetchImpl ?? globalThis.fetch;
    const response = await f(inputUrl, {
        method: "POST",
        headers: { "Content-Type": "application/json", ...headers },
        body: JSON.stringify(answer),
    });
    const body = await response.json().catch(() => null);
    if (response.ok)
        return body;
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
            if (property?.type !== "boolean")
                continue;
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
/** POST a job's cancel URL. Resolves to `{status, snapshot}` for 202 and 409. */
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
 * that carried that correlation ID. The stream does not end by itself (more jobs may join): call
 * close(). Reconnection as for {@link watchJob}. The stream opens empty before the correlation's
 * first job starts (an application usually subscribes before it calls the agent); older bridges
 * answered 404 until then, so a stream refused before it ever opened is asked again every
 * `retryMs` until `waitMs` have passed, then onError.
 */
export function watchCorrelation(url, handlers = {}, options = {}) {
    const legacy = legacyEventSource(options);
    const retryMs = options.retryMs ?? 2000;
    const waitUntil = Date.now() + (options.waitMs ?? 600_000);
    const jobs = new Map();
    let closed = false;
    let connection = "connecting";
    let error = null;
    let source = null;
    let timer;
    let everOpened = false;
    const setConnection = (state) => {
        if (state === connection)
            return;
        connection = state;
        handlers.onConnection?.(state);
    };
    const close = () => {
        if (closed)
            return;
        closed = true;
        clearTimeout(timer);
        source?.close();
        options.signal?.removeEventListener("abort", close);
        setConnection("closed");
    };
    const fail = (e) => {
        if (closed)
            return;
        error = e;
        close();
        handlers.onError?.(e);
    };
    const waiting = () => {
        setConnection("waiting");
        handlers.onWaiting?.();
    };
    const onFrame = (type, text) => {
        if (closed)
            return;
        const data = parseData(text);
        everOpened = true;
        setConnection("open");
        if (type === "job_started") {
            jobs.set(data.job_id, reduceJob(emptyJob(data.job_id), "status", data));
            handlers.onJobStarted?.(data, jobs.get(data.job_id));
        }
        else if (type === "reset") {
            for (const snapshot of data.jobs ?? []) {
                jobs.set(snapshot.job_id, reduceJob(emptyJob(snapshot.job_id), "reset", snapshot));
            }
            handlers.onReset?.(data);
        }
        else {
            const job = reduceJob(jobs.get(data.job_id) ?? emptyJob(data.job_id), type, data);
            jobs.set(data.job_id, job);
            handlers.onJobEvent?.(type, data, job);
        }
    };
    const types = ["job_started", "reset", "progress", "log", "heartbeat", ...INPUT_EVENTS, ...TERMINAL_EVENTS];
    const open = () => {
        source = openSource(url, types, {
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
                if (opened || Date.now() + retryMs >= waitUntil)
                    return false;
                waiting();
                return true;
            },
            onRefused: fail,
            onLegacyError: (gaveUp) => {
                if (closed)
                    return;
                if (!gaveUp)
                    return setConnection("reconnecting");
                source?.close();
                if (!everOpened && Date.now() + retryMs < waitUntil) {
                    waiting();
                    timer = setTimeout(open, retryMs);
                    return;
                }
                fail(new StreamError(0, "refused", "the correlation stream was refused: malformed or unknown ID, wrong token, or unreachable"));
            },
        }, { ...options, EventSource: legacy, retry: { initialDelayMs: retryMs, ...options.retry } });
    };
    handlers.onConnection?.(connection);
    if (options.signal?.aborted)
        close();
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
export function parseJobHandle(value) {
    if (value == null)
        return null;
    if (typeof value === "string") {
        const text = value.trim();
        if (!text.startsWith("{"))
            return null;
        try {
            return parseJobHandle(JSON.parse(text));
        }
        catch {
            return null;
        }
    }
    if (typeof value !== "object")
        return null;
    const v = value;
    if (v.type === "mcp_call") {
        if (v.error)
            return null;
        return parseJobHandle(v.output);
    }
    if (typeof v.job_id === "string" && typeof v.events_url === "string")
        return v;
    const fromStructured = parseJobHandle(v.structuredContent);
    if (fromStructured)
        return fromStructured;
    if (Array.isArray(v.content)) {
        for (const block of v.content) {
            if (block?.type === "text") {
                const handle = parseJobHandle(block.text);
                if (handle)
                    return handle;
            }
        }
    }
    const meta = v._meta?.[JOB_META_KEY];
    if (meta && typeof meta.job_id === "string")
        return meta;
    return null;
}
// ---------------------------------------------------------------------------------------------
// A small MCP Streamable HTTP client, enough to list and call tools through the bridge.
/** An HTTP answer from the MCP endpoint that is not a success. `status` 401: a bearer token
 * is needed (or the one given is wrong); 0: the bridge could not be reached. */
export class McpHttpError extends Error {
    status;
    wwwAuthenticate;
    constructor(status, message, wwwAuthenticate = null) {
        super(message);
        this.name = "McpHttpError";
        this.status = status;
        this.wwwAuthenticate = wwwAuthenticate;
    }
}
/** A JSON-RPC error answer to a request. */
export class McpRpcError extends Error {
    code;
    data;
    constructor(error) {
        super(error?.message ?? "JSON-RPC error");
        this.name = "McpRpcError";
        this.code = error?.code;
        this.data = error?.data;
    }
}
const PROTOCOL_VERSION = "2025-06-18";
/**
 * A small MCP Streamable HTTP client, enough to list and call tools through the bridge (in a
 * backend-for-frontend, which holds the bridge's MCP token; a page never should).
 *
 *     const mcp = new McpClient("http://bridge:8080/mcp", {token});
 *     const result = await mcp.callTool("demo__slow_count", {to: 5}, {meta: {[MODE_META_KEY]: "async"}});
 *     const handle = parseJobHandle(result);
 */
export class McpClient {
    url;
    token;
    headers;
    fetch;
    clientInfo;
    sessionId = null;
    protocolVersion = PROTOCOL_VERSION;
    nextId = 1;
    serverInfo = null;
    constructor(url, { token = null, headers = {}, fetch: fetchImpl, clientInfo } = {}) {
        this.url = url;
        this.token = token;
        this.headers = headers;
        this.fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
        this.clientInfo = clientInfo ?? { name: "@mcp-progress-bridge/client", version: VERSION };
    }
    /** Use another bearer token (the session starts over). */
    setToken(token) {
        this.token = token || null;
        this.sessionId = null;
    }
    /** Initialize a session; resolves to the server's `initialize` result. */
    async connect() {
        this.sessionId = null;
        const { result } = await this.post({
            jsonrpc: "2.0",
            id: this.nextId++,
            method: "initialize",
            params: {
                protocolVersion: PROTOCOL_VERSION,
                capabilities: {},
                clientInfo: this.clientInfo,
            },
        }, {}, true);
        this.protocolVersion = result.protocolVersion ?? PROTOCOL_VERSION;
        this.serverInfo = result.serverInfo ?? null;
        await this.post({ jsonrpc: "2.0", method: "notifications/initialized" });
        return result;
    }
    /** Every tool, all pages. */
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
    /** Call a tool; resolves to its `CallToolResult` (a job handle for an async call: read it
     * with {@link parseJobHandle}). */
    async callTool(name, args = {}, { meta, headers, onProgress, onRequestId } = {}) {
        const params = { name, arguments: args };
        const _meta = { ...(meta ?? {}) };
        if (onProgress)
            _meta.progressToken = `page-${Date.now()}-${this.nextId}`;
        if (Object.keys(_meta).length)
            params._meta = _meta;
        const { result } = await this.request("tools/call", params, { headers, onProgress, onRequestId });
        return result;
    }
    /** Tell the server to stop a request of ours (notifications/cancelled). */
    async cancelRequest(requestId, reason = "cancelled by the user") {
        await this.post({
            jsonrpc: "2.0",
            method: "notifications/cancelled",
            params: { requestId, reason },
        });
    }
    /** Send a request; re-initializes once when the session has expired (404). */
    async request(method, params, options = {}) {
        if (!this.sessionId)
            await this.connect();
        const send = () => {
            const id = this.nextId++;
            options.onRequestId?.(id);
            return this.post({ jsonrpc: "2.0", id, method, params }, options);
        };
        try {
            return await send();
        }
        catch (error) {
            if (error instanceof McpHttpError && error.status === 404 && this.sessionId) {
                await this.connect();
                return send();
            }
            throw error;
        }
    }
    // Long because: one POST's answer comes as JSON or as an SSE stream with progress before it.
    async post(message, { headers = {}, onProgress } = {}, initializing = false) {
        const h = {
            "Content-Type": "application/json",
            Accept: "application/json, text/event-stream",
            ...this.headers,
            ...headers,
        };
        if (this.token)
            h.Authorization = `Bearer ${this.token}`;
        if (this.sessionId)
            h["Mcp-Session-Id"] = this.sessionId;
        if (!initializing)
            h["MCP-Protocol-Version"] = this.protocolVersion;
        let response;
        try {
            response = await this.fetch(this.url, { method: "POST", headers: h, body: JSON.stringify(message) });
        }
        catch (error) {
            throw new McpHttpError(0, `cannot reach the bridge at ${this.url}: ${error.message}`);
        }
        if (initializing)
            this.sessionId = response.headers.get("mcp-session-id");
        if (!response.ok) {
            const text = await response.text().catch(() => "");
            throw httpError(response, text);
        }
        if (message.id === undefined) {
            await response.body?.cancel().catch(() => { });
            return { jsonrpc: "2.0" };
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
        if (type.includes("text/event-stream") && response.body) {
            await readSseBody(response.body, (text) => {
                let msg;
                try {
                    msg = JSON.parse(text);
                }
                catch {
                    return true;
                }
                return consider(msg);
            });
        }
        else {
            const body = await response.json();
            for (const msg of Array.isArray(body) ? body : [body])
                if (consider(msg) === false)
                    break;
        }
        const got = answer;
        if (!got)
            throw new McpHttpError(response.status, `no answer to ${message.method} from the bridge`);
        if (got.error)
            throw new McpRpcError(got.error);
        return got;
    }
}
function httpError(response, text) {
    let detail = text.trim().slice(0, 300);
    try {
        const body = JSON.parse(text);
        detail = body?.error?.message ?? body?.message ?? detail;
    }
    catch {
        // plain text
    }
    const status = response.status;
    const auth = response.headers.get("www-authenticate");
    const hint = status === 401
        ? "the bridge wants a bearer token for /mcp: enter the token it was configured with"
        : status === 403
            ? "the bridge refused this page's Origin or Host: add it to server.allowed_hosts / allowed_origins"
            : status === 404
                ? "the MCP session expired or the endpoint is wrong"
                : `HTTP ${status}`;
    return new McpHttpError(status, detail ? `${hint} (${detail})` : hint, auth);
}
