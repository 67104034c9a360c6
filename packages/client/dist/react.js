import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
// @mcp-progress-bridge/client/react — React hooks and a progress component on top of the client.
//
// One stream per URL, shared: every component that calls useJob(url) (or useCorrelation(url))
// with the same URL reads the same watch, opened by the first subscriber and closed a moment
// after the last one leaves. "A moment": StrictMode mounts, unmounts and mounts again in one go,
// and a page that moves a job's card from one list to another does the same; neither reopens the
// stream. React is a peer dependency; nothing here runs without it.
import { useCallback, useEffect, useId, useRef, useState, useSyncExternalStore } from "react";
import { TERMINAL_EVENTS, contentFromForm, emptyJob, formatDuration, fractionDone, watchCorrelation, watchJob, } from "./index.js";
/** How long a stream stays open after its last subscriber left (StrictMode's remount, a card
 * moved between lists). */
const RELEASE_AFTER_MS = 1000;
/** One shared stream: its subscribers, its latest state, and the watch behind it. */
class SharedStream {
    registry;
    key;
    open;
    listeners = new Set();
    state;
    watch = null;
    releaseTimer;
    constructor(registry, key, initial, open) {
        this.registry = registry;
        this.key = key;
        this.open = open;
        this.state = initial;
    }
    subscribe(listener) {
        clearTimeout(this.releaseTimer);
        this.listeners.add(listener);
        if (!this.watch)
            this.watch = this.open(this);
        return () => {
            this.listeners.delete(listener);
            if (this.listeners.size === 0) {
                clearTimeout(this.releaseTimer);
                this.releaseTimer = setTimeout(() => this.release(), RELEASE_AFTER_MS);
            }
        };
    }
    update(change) {
        this.state = { ...this.state, ...change };
        for (const listener of [...this.listeners])
            listener();
    }
    release() {
        if (this.listeners.size > 0)
            return;
        this.watch?.close();
        this.watch = null;
        if (this.registry.get(this.key) === this)
            this.registry.delete(this.key);
    }
}
function shared(registry, key, initial, open) {
    let stream = registry.get(key);
    if (!stream) {
        stream = new SharedStream(registry, key, initial(), open);
        registry.set(key, stream);
    }
    return stream;
}
const IDLE = Object.freeze({ job: emptyJob(), connection: "closed", error: null, retry: null });
const CONNECTING = Object.freeze({ job: emptyJob(), connection: "connecting", error: null, retry: null });
const jobStreams = new Map();
/**
 * Follow a job: `const { job, connection, cancel, answer } = useJob(handle.events_url)`. Every
 * component that passes the same URL shares one stream; it opens with the first and closes
 * after the last unmounts. `null` follows nothing (connection `closed`).
 */
export function useJob(eventsUrl, options = {}) {
    const optionsRef = useRef(options);
    optionsRef.current = options;
    const subscribe = useCallback((listener) => {
        if (!eventsUrl)
            return () => { };
        const stream = shared(jobStreams, eventsUrl, () => CONNECTING, (s) => watchJob(eventsUrl, {
            onUpdate: (_event, job) => s.update({ job, retry: null }),
            onConnection: (connection) => s.update({ connection }),
            onRetry: (retry) => s.update({ retry }),
            onError: (error) => s.update({ error }),
        }, optionsRef.current));
        return stream.subscribe(listener);
    }, [eventsUrl]);
    const view = useSyncExternalStore(subscribe, () => (eventsUrl ? (jobStreams.get(eventsUrl)?.state ?? CONNECTING) : IDLE), () => (eventsUrl ? CONNECTING : IDLE));
    const cancel = useCallback(() => {
        const watch = eventsUrl ? jobStreams.get(eventsUrl)?.watch : null;
        if (!watch)
            return Promise.reject(new Error("this job is not being followed"));
        return watch.cancel();
    }, [eventsUrl]);
    const answer = useCallback((a) => {
        const watch = eventsUrl ? jobStreams.get(eventsUrl)?.watch : null;
        if (!watch)
            return Promise.reject(new Error("this job is not being followed"));
        return watch.answer(a);
    }, [eventsUrl]);
    return { ...view, cancel, answer };
}
const NO_JOBS = Object.freeze({ jobs: [], connection: "closed", error: null });
const WAITING = Object.freeze({ jobs: [], connection: "connecting", error: null });
const correlationStreams = new Map();
/**
 * Follow every job of a correlation (`/correlations/{cid}/events` with its token, minted by
 * the application's backend): "my running jobs". One shared stream per URL, as for useJob.
 */
export function useCorrelation(url, options = {}) {
    const optionsRef = useRef(options);
    optionsRef.current = options;
    const subscribe = useCallback((listener) => {
        if (!url)
            return () => { };
        const stream = shared(correlationStreams, url, () => WAITING, (s) => {
            const publish = () => s.update({ jobs: [...watch.jobs.values()] });
            const watch = watchCorrelation(url, {
                onJobStarted: publish,
                onJobEvent: publish,
                onReset: publish,
                onConnection: (connection) => s.update({ connection }),
                onError: (error) => s.update({ error }),
            }, optionsRef.current);
            return watch;
        });
        return stream.subscribe(listener);
    }, [url]);
    return useSyncExternalStore(subscribe, () => (url ? (correlationStreams.get(url)?.state ?? WAITING) : NO_JOBS), () => (url ? WAITING : NO_JOBS));
}
const STATUS_TEXT = {
    unknown: "starting",
    running: "running",
    input_required: "waiting for your answer",
    completed: "completed",
    failed: "failed",
    cancelled: "cancelled",
};
const CONNECTION_TEXT = {
    connecting: "connecting…",
    reconnecting: "reconnecting…",
    waiting: "waiting…",
};
function resultText(result) {
    if (result == null)
        return "";
    const texts = (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text ?? "");
    if (texts.length)
        return texts.join("\n");
    return JSON.stringify(result.structuredContent ?? result, null, 2);
}
function countText(job) {
    const fraction = fractionDone(job);
    if (fraction != null)
        return `${Math.round(fraction * 100)} % (${job.progress} of ${job.total})`;
    if (job.progress != null)
        return `${job.progress} done`;
    return "";
}
/** Re-render every second while `on`, for elapsed times. */
function useTicking(on) {
    const [now, setNow] = useState(() => Date.now());
    useEffect(() => {
        if (!on)
            return;
        const timer = setInterval(() => setNow(Date.now()), 1000);
        return () => clearInterval(timer);
    }, [on]);
    return now;
}
/**
 * A job's progress: heading and status, a bar (determinate when `total` is known), the count
 * and the latest message, elapsed time and ETA, the tool's question as a form, the outcome, and
 * a Cancel button. Semantic markup with `mpb-` classes and `data-status` / `data-connection`,
 * no styles of its own: import `@mcp-progress-bridge/client/job-progress.css` for a default
 * look, tuned with CSS variables (`--mpb-accent`, …); the root sets `--mpb-fraction` (0 to 1).
 */
export function JobProgress(props) {
    const eventsUrl = props.handle?.events_url ?? props.eventsUrl ?? null;
    const { job, connection, error, cancel, answer } = useJob(eventsUrl, {
        cancelUrl: props.handle?.cancel_url,
        inputUrl: props.handle?.input_url,
        headers: props.headers,
    });
    const id = useId();
    const titleId = `${id}-title`;
    const [note, setNote] = useState(null);
    const ended = TERMINAL_EVENTS.includes(job.status);
    const now = useTicking(!ended && job.created_at != null);
    const onDone = useRef(props.onDone);
    onDone.current = props.onDone;
    useEffect(() => {
        if (ended)
            onDone.current?.(job);
        // Once per end: `job` changes identity on every event, `ended` only once.
    }, [ended]);
    const fraction = fractionDone(job);
    const Heading = `h${props.headingLevel ?? 3}`;
    const elapsed = job.created_at != null ? (job.finished_at ?? now) - job.created_at : null;
    const question = job.input_requests[0] ?? null;
    const onCancel = async () => {
        setNote("cancel requested…");
        try {
            const { status } = await cancel();
            setNote(status === 409 ? "the job had already ended" : "cancel requested");
        }
        catch (e) {
            setNote(`cancel failed: ${e.message}`);
        }
    };
    return (_jsxs("article", { className: `mpb-job${props.className ? ` ${props.className}` : ""}`, "aria-labelledby": titleId, "data-status": job.status, "data-connection": connection, style: { "--mpb-fraction": fraction ?? 0 }, children: [_jsxs("div", { className: "mpb-head", children: [_jsx(Heading, { id: titleId, className: "mpb-title", children: props.title ?? job.tool ?? props.handle?.tool ?? "Job" }), _jsx("span", { className: "mpb-status", "data-status": job.status, children: STATUS_TEXT[job.status] }), CONNECTION_TEXT[connection] && !ended ? (_jsx("span", { className: "mpb-connection", "data-connection": connection, children: CONNECTION_TEXT[connection] })) : null] }), _jsxs("div", { className: "mpb-bar-row", children: [_jsx("progress", { className: "mpb-bar", max: 1, value: fraction ?? undefined, "aria-labelledby": titleId }), _jsx("span", { className: "mpb-count", role: "status", "aria-live": "polite", children: countText(job) })] }), job.message ? _jsx("p", { className: "mpb-message", children: job.message }) : null, _jsxs("dl", { className: "mpb-times", children: [_jsxs("div", { children: [_jsx("dt", { children: "Elapsed" }), _jsx("dd", { children: elapsed != null ? formatDuration(elapsed) : "—" })] }), _jsxs("div", { children: [_jsx("dt", { children: "ETA" }), _jsx("dd", { children: job.eta_ms != null && !ended ? formatDuration(job.eta_ms) : "—" })] })] }), question && !ended ? _jsx(QuestionForm, { question: question, answer: answer }, question.key) : null, ended ? (_jsxs("div", { className: "mpb-outcome", children: [_jsx("p", { className: "mpb-outcome-title", children: job.status === "completed" ? "Result" : job.status === "cancelled" ? "Cancelled" : "Failed" }), _jsx("pre", { className: "mpb-result", tabIndex: 0, children: job.status === "completed" ? resultText(job.result) : [job.error?.message, resultText(job.result)].filter(Boolean).join("\n") })] })) : null, error ? (_jsxs("p", { className: "mpb-error", role: "alert", children: ["This job can no longer be followed: ", error.message] })) : null, note && !ended ? _jsx("p", { className: "mpb-note", children: note }) : null, _jsx("div", { className: "mpb-actions", children: _jsx("button", { type: "button", className: "mpb-cancel", onClick: onCancel, disabled: ended || !!error || !eventsUrl, children: "Cancel" }) })] }));
}
/** The tool's question as a form built from its requested_schema (as the jobs page does). */
function QuestionForm({ question, answer }) {
    const id = useId();
    const schema = question.requested_schema ?? {};
    const required = new Set(schema.required ?? []);
    const properties = Object.entries(schema.properties ?? {});
    const [values, setValues] = useState(() => Object.fromEntries(properties.map(([name, p]) => [name, p.type === "boolean" ? p.default === true : p.default != null ? String(p.default) : ""])));
    const [error, setError] = useState(null);
    const [sending, setSending] = useState(false);
    const errorId = `${id}-error`;
    const send = async (a) => {
        setSending(true);
        setError(null);
        try {
            await answer({ ...a, key: question.key });
        }
        catch (e) {
            const refused = e;
            setError({ message: refused.message, field: refused.field ?? null });
            setSending(false);
        }
    };
    const submit = (event) => {
        event.preventDefault();
        let content;
        try {
            const trimmed = Object.fromEntries(Object.entries(values).map(([k, v]) => [k, typeof v === "string" ? v.trim() : v]));
            content = contentFromForm(schema, trimmed);
        }
        catch (e) {
            const refused = e;
            setError({ message: refused.message, field: refused.field ?? null });
            return;
        }
        void send({ action: "accept", content });
    };
    const badField = error?.field?.startsWith("content.") ? error.field.slice("content.".length) : null;
    return (_jsxs("form", { className: "mpb-question", "aria-labelledby": `${id}-message`, onSubmit: submit, noValidate: true, children: [_jsx("p", { id: `${id}-message`, className: "mpb-question-message", children: question.message }), properties.map(([name, property]) => (_jsx(Field, { id: `${id}-${name}`, name: name, property: property, required: required.has(name), value: values[name], invalid: badField === name, errorId: errorId, onChange: (v) => setValues((old) => ({ ...old, [name]: v })) }, name))), _jsx("p", { id: errorId, className: "mpb-question-error", role: "alert", children: error?.message ?? "" }), _jsxs("div", { className: "mpb-answer-buttons", children: [_jsx("button", { type: "submit", disabled: sending, children: "Send answer" }), _jsx("button", { type: "button", disabled: sending, onClick: () => void send({ action: "decline" }), children: "Decline" }), _jsx("button", { type: "button", disabled: sending, onClick: () => void send({ action: "cancel" }), children: "Cancel question" })] })] }));
}
const INPUT_TYPES = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };
/** One labelled input of the question form, typed by its schema property. */
function Field({ id, name, property, required, value, invalid, errorId, onChange }) {
    const label = `${property.title ?? name}${required ? "" : " (optional)"}`;
    const hintId = property.description ? `${id}-hint` : undefined;
    const describedBy = [hintId, invalid ? errorId : undefined].filter(Boolean).join(" ") || undefined;
    const common = {
        id,
        name,
        required,
        "aria-invalid": invalid || undefined,
        "aria-describedby": describedBy,
    };
    let input;
    if (Array.isArray(property.enum)) {
        input = (_jsxs("select", { ...common, value: String(value ?? ""), onChange: (e) => onChange(e.target.value), children: [required ? null : _jsx("option", { value: "", children: "\u2014" }), property.enum.map((option, i) => (_jsx("option", { value: String(option), children: property.enumNames?.[i] ?? String(option) }, String(option))))] }));
    }
    else if (property.type === "boolean") {
        input = _jsx("input", { ...common, type: "checkbox", checked: value === true, onChange: (e) => onChange(e.target.checked) });
    }
    else if (property.type === "number" || property.type === "integer") {
        input = (_jsx("input", { ...common, type: "number", step: property.type === "integer" ? 1 : "any", min: property.minimum, max: property.maximum, value: String(value ?? ""), onChange: (e) => onChange(e.target.value) }));
    }
    else {
        input = (_jsx("input", { ...common, type: INPUT_TYPES[property.format ?? ""] ?? "text", minLength: property.minLength, maxLength: property.maxLength, value: String(value ?? ""), onChange: (e) => onChange(e.target.value) }));
    }
    return (_jsxs("div", { className: `mpb-field${property.type === "boolean" ? " mpb-check" : ""}`, children: [_jsx("label", { htmlFor: id, children: label }), input, property.description ? (_jsx("p", { id: hintId, className: "mpb-hint", children: property.description })) : null] }));
}
