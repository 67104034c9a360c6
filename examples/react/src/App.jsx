// The browser side: it asks its own backend (server.mjs) to start jobs and gets only capability
// URLs back (events_url, cancel_url, input_url, each with a token scoped to one job); it never
// sees the bridge's MCP token. Progress comes straight from the bridge, on another origin
// (allowed by the bridge's server.cors_origins).

import { useCallback, useEffect, useState } from "react";

import { JobProgress, useCorrelation } from "@mcp-progress-bridge/client/react";

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(answer.error ?? `HTTP ${response.status}`);
  return answer;
}

export function App() {
  const [jobs, setJobs] = useState([]);
  const [steps, setSteps] = useState(10);
  const [error, setError] = useState(null);
  const [mine, setMine] = useState(null);

  // The correlation URL of this browser session's jobs ("my jobs"), minted by the backend.
  useEffect(() => {
    fetch("/api/my-jobs")
      .then((r) => (r.ok ? r.json() : null))
      .then((answer) => setMine(answer?.events_url ?? null))
      .catch(() => setMine(null));
  }, []);

  const start = useCallback(async (kind) => {
    setError(null);
    try {
      const handle = await post("/api/jobs", kind === "ask" ? { kind } : { kind, steps });
      setJobs((list) => [handle, ...list]);
    } catch (e) {
      setError(e.message);
    }
  }, [steps]);

  return (
    <>
      <header>
        <h1>Jobs, live</h1>
        <p>A React app on its own origin; its backend starts jobs on the bridge.</p>
      </header>
      <main>
        <section aria-labelledby="start-heading">
          <h2 id="start-heading">Start a job</h2>
          <div className="start">
            <label>
              Steps
              <input type="number" min="1" max="100" value={steps} onChange={(e) => setSteps(Number(e.target.value))} />
            </label>
            <button type="button" onClick={() => start("count")}>
              Start counting
            </button>
            <button type="button" onClick={() => start("ask")}>
              Start a job that asks a question
            </button>
          </div>
          {error ? (
            <p className="error" role="alert">
              {error}
            </p>
          ) : null}
        </section>
        <section aria-labelledby="jobs-heading">
          <h2 id="jobs-heading">Jobs started here</h2>
          {jobs.length === 0 ? <p>None yet.</p> : null}
          <ul className="jobs">
            {jobs.map((handle) => (
              <li key={handle.job_id} data-job-id={handle.job_id}>
                <JobProgress handle={handle} headingLevel={3} />
              </li>
            ))}
          </ul>
        </section>
        {mine ? <MyJobs url={mine} /> : null}
      </main>
    </>
  );
}

/** Every job of this browser session, from one correlation stream. */
function MyJobs({ url }) {
  const { jobs, connection } = useCorrelation(url);
  return (
    <section aria-labelledby="mine-heading">
      <h2 id="mine-heading">My jobs ({connection})</h2>
      <ul className="mine">
        {jobs.map((job) => (
          <li key={job.job_id} data-job-id={job.job_id} data-status={job.status}>
            {job.tool}: {job.status}
            {job.progress != null ? `, ${job.progress}${job.total != null ? ` of ${job.total}` : ""}` : ""}
          </li>
        ))}
      </ul>
    </section>
  );
}
