// @mcp-progress-bridge/client/react — React hooks and a progress component on top of the client.
//
// One stream per URL, shared: every component that calls useJob(url) (or useCorrelation(url))
// with the same URL reads the same watch, opened by the first subscriber and closed a moment
// after the last one leaves. "A moment": StrictMode mounts, unmounts and mounts again in one go,
// and a page that moves a job's card from one list to another does the same; neither reopens the
// stream. React is a peer dependency; nothing here runs without it.

import { useCallback, useEffect, useId, useRef, useState, useSyncExternalStore } from "react";
import type { FormEvent, ReactNode } from "react";

import {
  InputRefusedError,
  TERMINAL_EVENTS,
  contentFromForm,
  emptyJob,
  formatDuration,
  fractionDone,
  watchCorrelation,
  watchJob,
} from "./index.js";
import type {
  Answer,
  CallToolResult,
  CancelAnswer,
  ConnectionState,
  CorrelationOptions,
  CorrelationWatch,
  InputRequest,
  JobHandle,
  JobState,
  JobWatch,
  RetryInfo,
  SchemaProperty,
  WatchOptions,
} from "./index.js";

/** How long a stream stays open after its last subscriber left (StrictMode's remount, a card
 * moved between lists). */
const RELEASE_AFTER_MS = 1000;

/** One shared stream: its subscribers, its latest state, and the watch behind it. */
class SharedStream<S, W extends { close(): void }> {
  readonly listeners = new Set<() => void>();
  state: S;
  watch: W | null = null;
  private releaseTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly registry: Map<string, SharedStream<S, W>>,
    private readonly key: string,
    initial: S,
    private readonly open: (stream: SharedStream<S, W>) => W,
  ) {
    this.state = initial;
  }

  subscribe(listener: () => void): () => void {
    clearTimeout(this.releaseTimer);
    this.listeners.add(listener);
    if (!this.watch) this.watch = this.open(this);
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) {
        clearTimeout(this.releaseTimer);
        this.releaseTimer = setTimeout(() => this.release(), RELEASE_AFTER_MS);
      }
    };
  }

  update(change: Partial<S>): void {
    this.state = { ...this.state, ...change };
    for (const listener of [...this.listeners]) listener();
  }

  private release(): void {
    if (this.listeners.size > 0) return;
    this.watch?.close();
    this.watch = null;
    if (this.registry.get(this.key) === this) this.registry.delete(this.key);
  }
}

function shared<S, W extends { close(): void }>(
  registry: Map<string, SharedStream<S, W>>,
  key: string,
  initial: () => S,
  open: (stream: SharedStream<S, W>) => W,
): SharedStream<S, W> {
  let stream = registry.get(key);
  if (!stream) {
    stream = new SharedStream(registry, key, initial(), open);
    registry.set(key, stream);
  }
  return stream;
}

// ---------------------------------------------------------------------------------------------
// useJob

/** What `useJob` returns: the job's state and what can be done to it. */
export interface UseJob {
  /** The job as of the last event (`emptyJob()` before the first). */
  job: JobState;
  connection: ConnectionState;
  /** Why the stream stopped without a terminal event (a StreamError), else null. */
  error: Error | null;
  /** The last reconnection wait, while reconnecting; null once events flow. */
  retry: RetryInfo | null;
  /** Ask the bridge to cancel the job. */
  cancel(): Promise<CancelAnswer>;
  /** Answer the tool's question. */
  answer(answer: Answer): Promise<unknown>;
}

type JobView = Pick<UseJob, "job" | "connection" | "error" | "retry">;

const IDLE: JobView = Object.freeze({ job: emptyJob(), connection: "closed", error: null, retry: null });
const CONNECTING: JobView = Object.freeze({ job: emptyJob(), connection: "connecting", error: null, retry: null });
const jobStreams = new Map<string, SharedStream<JobView, JobWatch>>();

/** Options of `useJob`: the handle's other URLs and the watch's options; the first component
 * to open a URL's stream sets them. */
export type UseJobOptions = Omit<WatchOptions, "signal" | "EventSource">;

/**
 * Follow a job: `const { job, connection, cancel, answer } = useJob(handle.events_url)`. Every
 * component that passes the same URL shares one stream; it opens with the first and closes
 * after the last unmounts. `null` follows nothing (connection `closed`).
 */
export function useJob(eventsUrl: string | null | undefined, options: UseJobOptions = {}): UseJob {
  const optionsRef = useRef(options);
  optionsRef.current = options;
  const subscribe = useCallback(
    (listener: () => void) => {
      if (!eventsUrl) return () => {};
      const stream = shared(jobStreams, eventsUrl, () => CONNECTING, (s) =>
        watchJob(
          eventsUrl,
          {
            onUpdate: (_event, job) => s.update({ job, retry: null }),
            onConnection: (connection) => s.update({ connection }),
            onRetry: (retry) => s.update({ retry }),
            onError: (error) => s.update({ error }),
          },
          optionsRef.current,
        ),
      );
      return stream.subscribe(listener);
    },
    [eventsUrl],
  );
  const view = useSyncExternalStore(
    subscribe,
    () => (eventsUrl ? (jobStreams.get(eventsUrl)?.state ?? CONNECTING) : IDLE),
    () => (eventsUrl ? CONNECTING : IDLE),
  );
  const cancel = useCallback(() => {
    const watch = eventsUrl ? jobStreams.get(eventsUrl)?.watch : null;
    if (!watch) return Promise.reject(new Error("this job is not being followed"));
    return watch.cancel();
  }, [eventsUrl]);
  const answer = useCallback(
    (a: Answer) => {
      const watch = eventsUrl ? jobStreams.get(eventsUrl)?.watch : null;
      if (!watch) return Promise.reject(new Error("this job is not being followed"));
      return watch.answer(a);
    },
    [eventsUrl],
  );
  return { ...view, cancel, answer };
}

// ---------------------------------------------------------------------------------------------
// useCorrelation

/** What `useCorrelation` returns. */
export interface UseCorrelation {
  /** Every job of the correlation, in the order they started. */
  jobs: JobState[];
  connection: ConnectionState;
  error: Error | null;
}

const NO_JOBS: UseCorrelation = Object.freeze({ jobs: [], connection: "closed", error: null });
const WAITING: UseCorrelation = Object.freeze({ jobs: [], connection: "connecting", error: null });
const correlationStreams = new Map<string, SharedStream<UseCorrelation, CorrelationWatch>>();

/**
 * Follow every job of a correlation (`/correlations/{cid}/events` with its token, minted by
 * the application's backend): "my running jobs". One shared stream per URL, as for useJob.
 */
export function useCorrelation(url: string | null | undefined, options: Omit<CorrelationOptions, "signal" | "EventSource"> = {}): UseCorrelation {
  const optionsRef = useRef(options);
  optionsRef.current = options;
  const subscribe = useCallback(
    (listener: () => void) => {
      if (!url) return () => {};
      const stream = shared(correlationStreams, url, () => WAITING, (s) => {
        const publish = () => s.update({ jobs: [...watch.jobs.values()] });
        const watch: CorrelationWatch = watchCorrelation(
          url,
          {
            onJobStarted: publish,
            onJobEvent: publish,
            onReset: publish,
            onConnection: (connection) => s.update({ connection }),
            onError: (error) => s.update({ error }),
          },
          optionsRef.current,
        );
        return watch;
      });
      return stream.subscribe(listener);
    },
    [url],
  );
  return useSyncExternalStore(
    subscribe,
    () => (url ? (correlationStreams.get(url)?.state ?? WAITING) : NO_JOBS),
    () => (url ? WAITING : NO_JOBS),
  );
}

// ---------------------------------------------------------------------------------------------
// <JobProgress>

/** Props of `<JobProgress>`. */
export interface JobProgressProps {
  /** The job handle a bridge tool call returned (its events, cancel and input URLs) … */
  handle?: Pick<JobHandle, "events_url"> & Partial<Pick<JobHandle, "cancel_url" | "input_url" | "tool">>;
  /** … or the events URL alone (cancel and input URLs are then derived from it). */
  eventsUrl?: string;
  /** The heading (default: the job's tool name). */
  title?: ReactNode;
  /** The heading's level (default 3), to fit the page's outline. */
  headingLevel?: 2 | 3 | 4 | 5 | 6;
  /** Headers for cancel and answer (a bearer credential, for URLs without a token). */
  headers?: Record<string, string>;
  /** Added to the root element's class (`mpb-job`). */
  className?: string;
  /** Called once when the job ends. */
  onDone?(job: JobState): void;
}

const STATUS_TEXT: Record<JobState["status"], string> = {
  unknown: "starting",
  running: "running",
  input_required: "waiting for your answer",
  completed: "completed",
  failed: "failed",
  cancelled: "cancelled",
};

const CONNECTION_TEXT: Partial<Record<ConnectionState, string>> = {
  connecting: "connecting…",
  reconnecting: "reconnecting…",
  waiting: "waiting…",
};

function resultText(result: CallToolResult | null): string {
  if (result == null) return "";
  const texts = (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text ?? "");
  if (texts.length) return texts.join("\n");
  return JSON.stringify(result.structuredContent ?? result, null, 2);
}

function countText(job: JobState): string {
  const fraction = fractionDone(job);
  if (fraction != null) return `${Math.round(fraction * 100)} % (${job.progress} of ${job.total})`;
  if (job.progress != null) return `${job.progress} done`;
  return "";
}

/** Re-render every second while `on`, for elapsed times. */
function useTicking(on: boolean): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    if (!on) return;
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
export function JobProgress(props: JobProgressProps): ReactNode {
  const eventsUrl = props.handle?.events_url ?? props.eventsUrl ?? null;
  const { job, connection, error, cancel, answer } = useJob(eventsUrl, {
    cancelUrl: props.handle?.cancel_url,
    inputUrl: props.handle?.input_url,
    headers: props.headers,
  });
  const id = useId();
  const titleId = `${id}-title`;
  const [note, setNote] = useState<string | null>(null);
  const ended = (TERMINAL_EVENTS as readonly string[]).includes(job.status);
  const now = useTicking(!ended && job.created_at != null);
  const onDone = useRef(props.onDone);
  onDone.current = props.onDone;
  useEffect(() => {
    if (ended) onDone.current?.(job);
    // Once per end: `job` changes identity on every event, `ended` only once.
  }, [ended]);
  const fraction = fractionDone(job);
  const Heading = `h${props.headingLevel ?? 3}` as "h3";
  const elapsed = job.created_at != null ? (job.finished_at ?? now) - job.created_at : null;
  const question = job.input_requests[0] ?? null;
  const onCancel = async () => {
    setNote("cancel requested…");
    try {
      const { status } = await cancel();
      setNote(status === 409 ? "the job had already ended" : "cancel requested");
    } catch (e) {
      setNote(`cancel failed: ${(e as Error).message}`);
    }
  };
  return (
    <article
      className={`mpb-job${props.className ? ` ${props.className}` : ""}`}
      aria-labelledby={titleId}
      data-status={job.status}
      data-connection={connection}
      style={{ "--mpb-fraction": fraction ?? 0 } as Record<string, number>}
    >
      <div className="mpb-head">
        <Heading id={titleId} className="mpb-title">
          {props.title ?? job.tool ?? props.handle?.tool ?? "Job"}
        </Heading>
        <span className="mpb-status" data-status={job.status}>
          {STATUS_TEXT[job.status]}
        </span>
        {CONNECTION_TEXT[connection] && !ended ? (
          <span className="mpb-connection" data-connection={connection}>
            {CONNECTION_TEXT[connection]}
          </span>
        ) : null}
      </div>
      <div className="mpb-bar-row">
        <progress className="mpb-bar" max={1} value={fraction ?? undefined} aria-labelledby={titleId} />
        <span className="mpb-count" role="status" aria-live="polite">
          {countText(job)}
        </span>
      </div>
      {job.message ? <p className="mpb-message">{job.message}</p> : null}
      <dl className="mpb-times">
        <div>
          <dt>Elapsed</dt>
          <dd>{elapsed != null ? formatDuration(elapsed) : "—"}</dd>
        </div>
        <div>
          <dt>ETA</dt>
          <dd>{job.eta_ms != null && !ended ? formatDuration(job.eta_ms) : "—"}</dd>
        </div>
      </dl>
      {question && !ended ? <QuestionForm key={question.key} question={question} answer={answer} /> : null}
      {ended ? (
        <div className="mpb-outcome">
          <p className="mpb-outcome-title">
            {job.status === "completed" ? "Result" : job.status === "cancelled" ? "Cancelled" : "Failed"}
          </p>
          <pre className="mpb-result" tabIndex={0}>
            {job.status === "completed" ? resultText(job.result) : [job.error?.message, resultText(job.result)].filter(Boolean).join("\n")}
          </pre>
        </div>
      ) : null}
      {error ? (
        <p className="mpb-error" role="alert">
          This job can no longer be followed: {error.message}
        </p>
      ) : null}
      {note && !ended ? <p className="mpb-note">{note}</p> : null}
      <div className="mpb-actions">
        <button type="button" className="mpb-cancel" onClick={onCancel} disabled={ended || !!error || !eventsUrl}>
          Cancel
        </button>
      </div>
    </article>
  );
}

/** The tool's question as a form built from its requested_schema (as the jobs page does). */
function QuestionForm({ question, answer }: { question: InputRequest; answer: (a: Answer) => Promise<unknown> }): ReactNode {
  const id = useId();
  const schema = question.requested_schema ?? {};
  const required = new Set(schema.required ?? []);
  const properties = Object.entries(schema.properties ?? {});
  const [values, setValues] = useState<Record<string, string | boolean>>(() =>
    Object.fromEntries(
      properties.map(([name, p]) => [name, p.type === "boolean" ? p.default === true : p.default != null ? String(p.default) : ""]),
    ),
  );
  const [error, setError] = useState<{ message: string; field: string | null } | null>(null);
  const [sending, setSending] = useState(false);
  const errorId = `${id}-error`;
  const send = async (a: Answer) => {
    setSending(true);
    setError(null);
    try {
      await answer({ ...a, key: question.key });
    } catch (e) {
      const refused = e as InputRefusedError;
      setError({ message: refused.message, field: refused.field ?? null });
      setSending(false);
    }
  };
  const submit = (event: FormEvent) => {
    event.preventDefault();
    let content;
    try {
      const trimmed = Object.fromEntries(Object.entries(values).map(([k, v]) => [k, typeof v === "string" ? v.trim() : v]));
      content = contentFromForm(schema, trimmed);
    } catch (e) {
      const refused = e as InputRefusedError;
      setError({ message: refused.message, field: refused.field ?? null });
      return;
    }
    void send({ action: "accept", content });
  };
  const badField = error?.field?.startsWith("content.") ? error.field.slice("content.".length) : null;
  return (
    <form className="mpb-question" aria-labelledby={`${id}-message`} onSubmit={submit} noValidate>
      <p id={`${id}-message`} className="mpb-question-message">
        {question.message}
      </p>
      {properties.map(([name, property]) => (
        <Field
          key={name}
          id={`${id}-${name}`}
          name={name}
          property={property}
          required={required.has(name)}
          value={values[name]}
          invalid={badField === name}
          errorId={errorId}
          onChange={(v) => setValues((old) => ({ ...old, [name]: v }))}
        />
      ))}
      <p id={errorId} className="mpb-question-error" role="alert">
        {error?.message ?? ""}
      </p>
      <div className="mpb-answer-buttons">
        <button type="submit" disabled={sending}>
          Send answer
        </button>
        <button type="button" disabled={sending} onClick={() => void send({ action: "decline" })}>
          Decline
        </button>
        <button type="button" disabled={sending} onClick={() => void send({ action: "cancel" })}>
          Cancel question
        </button>
      </div>
    </form>
  );
}

interface FieldProps {
  id: string;
  name: string;
  property: SchemaProperty;
  required: boolean;
  value: string | boolean | undefined;
  invalid: boolean;
  errorId: string;
  onChange(value: string | boolean): void;
}

const INPUT_TYPES: Record<string, string> = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };

/** One labelled input of the question form, typed by its schema property. */
function Field({ id, name, property, required, value, invalid, errorId, onChange }: FieldProps): ReactNode {
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
  let input: ReactNode;
  if (Array.isArray(property.enum)) {
    input = (
      <select {...common} value={String(value ?? "")} onChange={(e) => onChange(e.target.value)}>
        {required ? null : <option value="">—</option>}
        {property.enum.map((option, i) => (
          <option key={String(option)} value={String(option)}>
            {property.enumNames?.[i] ?? String(option)}
          </option>
        ))}
      </select>
    );
  } else if (property.type === "boolean") {
    input = <input {...common} type="checkbox" checked={value === true} onChange={(e) => onChange(e.target.checked)} />;
  } else if (property.type === "number" || property.type === "integer") {
    input = (
      <input
        {...common}
        type="number"
        step={property.type === "integer" ? 1 : "any"}
        min={property.minimum}
        max={property.maximum}
        value={String(value ?? "")}
        onChange={(e) => onChange(e.target.value)}
      />
    );
  } else {
    input = (
      <input
        {...common}
        type={INPUT_TYPES[property.format ?? ""] ?? "text"}
        minLength={property.minLength}
        maxLength={property.maxLength}
        value={String(value ?? "")}
        onChange={(e) => onChange(e.target.value)}
      />
    );
  }
  return (
    <div className={`mpb-field${property.type === "boolean" ? " mpb-check" : ""}`}>
      <label htmlFor={id}>{label}</label>
      {input}
      {property.description ? (
        <p id={hintId} className="mpb-hint">
          {property.description}
        </p>
      ) : null}
    </div>
  );
}
