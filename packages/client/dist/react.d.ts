import type { ReactNode } from "react";
import type { Answer, CancelAnswer, ConnectionState, CorrelationOptions, JobHandle, JobState, RetryInfo, WatchOptions } from "./index.js";
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
/** Options of `useJob`: the handle's other URLs and the watch's options; the first component
 * to open a URL's stream sets them. */
export type UseJobOptions = Omit<WatchOptions, "signal" | "EventSource">;
/**
 * Follow a job: `const { job, connection, cancel, answer } = useJob(handle.events_url)`. Every
 * component that passes the same URL shares one stream; it opens with the first and closes
 * after the last unmounts. `null` follows nothing (connection `closed`).
 */
export declare function useJob(eventsUrl: string | null | undefined, options?: UseJobOptions): UseJob;
/** What `useCorrelation` returns. */
export interface UseCorrelation {
    /** Every job of the correlation, in the order they started. */
    jobs: JobState[];
    connection: ConnectionState;
    error: Error | null;
}
/**
 * Follow every job of a correlation (`/correlations/{cid}/events` with its token, minted by
 * the application's backend): "my running jobs". One shared stream per URL, as for useJob.
 */
export declare function useCorrelation(url: string | null | undefined, options?: Omit<CorrelationOptions, "signal" | "EventSource">): UseCorrelation;
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
/**
 * A job's progress: heading and status, a bar (determinate when `total` is known), the count
 * and the latest message, elapsed time and ETA, the tool's question as a form, the outcome, and
 * a Cancel button. Semantic markup with `mpb-` classes and `data-status` / `data-connection`,
 * no styles of its own: import `@mcp-progress-bridge/client/job-progress.css` for a default
 * look, tuned with CSS variables (`--mpb-accent`, …); the root sets `--mpb-fraction` (0 to 1).
 */
export declare function JobProgress(props: JobProgressProps): ReactNode;
