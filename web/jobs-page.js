// The jobs page (served at /): calls tools through the bridge's own /mcp endpoint and follows
// each job's event stream. Everything it does with the bridge goes through /client.js, the same
// module an application frontend would use.

import {
  InputRefusedError,
  McpClient,
  McpHttpError,
  MODE_META_KEY,
  TERMINAL_EVENTS,
  answerJob,
  cancelJob,
  cancelUrlFor,
  contentFromForm,
  emptyJob,
  formatDuration,
  fractionDone,
  parseJobHandle,
  reduceJob,
  watchCorrelation,
  watchJob,
} from "/client.js";

const $ = (selector, root = document) => root.querySelector(selector);
const TOKEN_KEY = "mcp-progress-bridge/token";
const JOBS_KEY = "mcp-progress-bridge/jobs";
/** Without progress for this long (heartbeat's since_progress_ms), a running job looks stalled. */
const STALLED_MS = 30_000;

const mcp = new McpClient(new URL("/mcp", location.href).toString(), {
  token: sessionStorage.getItem(TOKEN_KEY),
  clientInfo: { name: "mcp-progress-bridge jobs page", version: "1" },
});
let tools = [];
/** Every card on the page, by a local key. */
const cards = new Map();
let nextCardKey = 1;

// --- bearer token -----------------------------------------------------------------------------

function authHeaders() {
  return mcp.token ? { Authorization: `Bearer ${mcp.token}` } : {};
}

let resumeAfterAuth = null;
function askForToken(error) {
  const form = $("#auth-form");
  $("#auth-why").textContent = mcp.token
    ? `The bridge refused the token: ${error.message}`
    : `This bridge needs a token: ${error.message}`;
  form.hidden = false;
  $("#token").focus();
  return new Promise((resolve) => {
    resumeAfterAuth = resolve;
  });
}

$("#auth-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("#token").value.trim();
  if (!token) return;
  mcp.setToken(token);
  sessionStorage.setItem(TOKEN_KEY, token);
  $("#auth-form").hidden = true;
  $("#token").value = "";
  resumeAfterAuth?.();
  resumeAfterAuth = null;
});

/** Run an MCP operation; on 401 ask for the token and try again. */
async function withAuth(operation) {
  for (;;) {
    try {
      return await operation();
    } catch (error) {
      if (error instanceof McpHttpError && error.status === 401) {
        await askForToken(error);
        continue;
      }
      throw error;
    }
  }
}

// --- tools --------------------------------------------------------------------------------------

function exampleArguments(tool) {
  const args = {};
  for (const [name, schema] of Object.entries(tool.inputSchema?.properties ?? {})) {
    if (schema && "default" in schema) args[name] = schema.default;
  }
  return args;
}

function showToolDescription() {
  const tool = tools.find((t) => t.name === $("#tool").value);
  $("#tool-description").textContent = tool?.description ?? "";
}

async function loadTools() {
  const select = $("#tool");
  try {
    await withAuth(() => mcp.connect());
    tools = await withAuth(() => mcp.listTools());
  } catch (error) {
    $("#server").textContent = `Cannot talk to the bridge: ${error.message}`;
    select.innerHTML = "<option value=''>no tools</option>";
    return;
  }
  const info = mcp.serverInfo;
  $("#server").textContent = `Connected to ${info?.name ?? "the bridge"} ${info?.version ?? ""} — ${tools.length} tools`;
  select.innerHTML = "";
  for (const tool of tools) {
    const option = document.createElement("option");
    option.value = tool.name;
    option.textContent = tool.name;
    select.append(option);
  }
  const preferred = tools.find((t) => t.name === "demo__slow_count") ?? tools[0];
  if (preferred) {
    select.value = preferred.name;
    $("#args").value = JSON.stringify(exampleArguments(preferred));
  }
  select.disabled = false;
  $("#call-button").disabled = false;
  showToolDescription();
}

$("#tool").addEventListener("change", () => {
  const tool = tools.find((t) => t.name === $("#tool").value);
  if (tool) $("#args").value = JSON.stringify(exampleArguments(tool));
  showToolDescription();
});

// --- cards ------------------------------------------------------------------------------------

function newCard(list, { tool, jobId = null }) {
  const node = $("#job-template").content.firstElementChild.cloneNode(true);
  const card = {
    key: nextCardKey++,
    node,
    tool,
    job: emptyJob(jobId),
    connection: "idle",
    phase: "calling",
    handle: null,
    watch: null,
    requestId: null,
    /** Progress values in the order they were shown: lets a test check nothing was lost. */
    seen: [],
    skew: 0,
    note: null,
  };
  node.dataset.card = String(card.key);
  $(".job-cancel", node).addEventListener("click", () => cancelCard(card));
  list.prepend(node);
  cards.set(card.key, card);
  render(card);
  return card;
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function render(card) {
  const { node, job } = card;
  const running = job.status === "running" || job.status === "unknown" || job.status === "input_required";
  node.dataset.status = card.phase === "calling" && job.status === "unknown" ? "calling" : job.status;
  node.dataset.jobId = job.job_id ?? "";
  node.dataset.connection = card.connection;
  setText($(".job-tool", node), card.tool ?? job.tool ?? "job");
  setText($(".job-id", node), job.job_id ?? "");
  const status = $(".job-status", node);
  status.dataset.status = node.dataset.status;
  setText(
    status,
    { unknown: "starting", input_required: "waiting for your answer" }[node.dataset.status] ?? node.dataset.status,
  );

  const connection = $(".job-connection", node);
  connection.dataset.connection = card.connection;
  const connectionText = {
    idle: card.phase === "calling" ? "calling the tool" : "",
    connecting: "connecting",
    open: "live",
    reconnecting: "reconnecting…",
    closed: running ? "not connected" : "done",
  }[card.connection];
  setText(connection, connectionText ?? card.connection);
  connection.hidden = !connectionText;

  const bar = $(".job-bar", node);
  const fraction = fractionDone(job);
  const done = job.status === "completed";
  if (fraction !== null || done) {
    bar.value = done ? 1 : fraction;
  } else if (running) {
    bar.removeAttribute("value"); // indeterminate: an activity indicator
  } else {
    bar.value = 0;
  }
  const count =
    job.progress == null
      ? running
        ? "waiting for progress"
        : ""
      : job.total != null
        ? `${Math.round((fraction ?? (done ? 1 : 0)) * 100)} % (${fmt(job.progress)} of ${fmt(job.total)})`
        : `${fmt(job.progress)} so far (no total)`;
  setText($(".job-count", node), count);
  bar.setAttribute("aria-label", `progress of ${card.tool ?? "the job"}: ${count || job.status}`);
  setText($(".job-message", node), card.note ?? job.message ?? "");
  renderQuestion(card);

  const now = Date.now() + card.skew;
  const end = job.finished_at ?? (running ? now : null);
  setText($(".job-elapsed", node), job.created_at && end ? formatDuration(end - job.created_at) : "—");
  setText($(".job-eta", node), running && job.eta_ms != null ? formatDuration(job.eta_ms) : running ? "unknown" : "—");

  const stall = $(".job-stall", node);
  let liveness = "—";
  node.classList.remove("stalled");
  if (running && job.heartbeat) {
    const quiet = job.heartbeat.since_progress_ms + (Date.now() - job.heartbeat.at);
    if (quiet >= STALLED_MS) {
      liveness = `stalled? no progress for ${formatDuration(quiet)}`;
      node.classList.add("stalled");
    } else {
      liveness = `working, no news for ${formatDuration(quiet)}`;
    }
  } else if (running && job.status === "running") {
    liveness = "progressing";
  }
  setText(stall, liveness);

  const logs = $(".job-logs", node);
  if (job.logs.length) {
    logs.hidden = false;
    const list = $("ol", logs);
    while (list.children.length < job.logs.length) {
      const entry = job.logs[list.children.length];
      const li = document.createElement("li");
      li.textContent = `[${entry.level}] ${typeof entry.data === "string" ? entry.data : JSON.stringify(entry.data)}`;
      list.append(li);
    }
  }

  const outcome = $(".job-outcome", node);
  if (!running) {
    outcome.hidden = false;
    const title = { completed: "Result", failed: "Failed", cancelled: "Cancelled" }[job.status] ?? job.status;
    setText($(".job-outcome-title", node), title);
    setText($(".job-result", node), outcomeText(job));
  }
  const cancel = $(".job-cancel", node);
  cancel.disabled = !running || (!card.watch && card.requestId === null && !job.job_id);
  const events = $(".job-events", node);
  if (card.handle?.events_url) {
    events.href = card.handle.events_url;
    events.hidden = false;
  } else {
    events.hidden = true;
  }
}

// --- a tool's question ------------------------------------------------------------------------

/** Show the job's oldest waiting question as a form built from its requested schema; hide it
 * once answered. A form already shown for the same question is left alone (what the person
 * typed stays). */
function renderQuestion(card) {
  const box = $(".job-input", card.node);
  const question = card.job.input_requests?.[0];
  if (!question || TERMINAL_EVENTS.includes(card.job.status)) {
    box.hidden = true;
    box.dataset.key = "";
    box.replaceChildren();
    return;
  }
  box.hidden = false;
  if (box.dataset.key === question.key) return;
  box.dataset.key = question.key;
  box.replaceChildren(questionForm(card, question));
}

function questionForm(card, question) {
  const schema = question.requested_schema ?? {};
  const required = new Set(schema.required ?? []);
  const prefix = `q${card.key}-${question.key}`;
  const form = document.createElement("form");
  form.className = "question";
  form.noValidate = true;
  form.setAttribute("aria-labelledby", `${prefix}-message`);
  const message = document.createElement("p");
  message.className = "question-message";
  message.id = `${prefix}-message`;
  message.textContent = question.message;
  form.append(message);
  const inputs = new Map();
  for (const [name, property] of Object.entries(schema.properties ?? {})) {
    const field = document.createElement("div");
    field.className = "field";
    const id = `${prefix}-${name}`;
    const label = document.createElement("label");
    label.htmlFor = id;
    label.textContent = `${property.title ?? name}${required.has(name) ? "" : " (optional)"}`;
    let input;
    if (Array.isArray(property.enum)) {
      input = document.createElement("select");
      if (!required.has(name)) input.append(new Option("", ""));
      property.enum.forEach((value, i) => input.append(new Option(property.enumNames?.[i] ?? String(value), String(value))));
    } else {
      input = document.createElement("input");
      if (property.type === "boolean") {
        input.type = "checkbox";
        field.classList.add("check");
      } else if (property.type === "number" || property.type === "integer") {
        input.type = "number";
        input.step = property.type === "integer" ? "1" : "any";
        if (property.minimum != null) input.min = String(property.minimum);
        if (property.maximum != null) input.max = String(property.maximum);
      } else {
        input.type = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" }[property.format] ?? "text";
        if (property.minLength != null) input.minLength = property.minLength;
        if (property.maxLength != null) input.maxLength = property.maxLength;
      }
    }
    input.id = id;
    input.name = name;
    input.required = required.has(name);
    if (property.default !== undefined) {
      if (input.type === "checkbox") input.checked = property.default === true;
      else input.value = String(property.default);
    }
    field.append(label, input);
    if (property.description) {
      const hint = document.createElement("p");
      hint.className = "hint";
      hint.id = `${id}-hint`;
      hint.textContent = property.description;
      input.setAttribute("aria-describedby", hint.id);
      field.append(hint);
    }
    inputs.set(name, input);
    form.append(field);
  }
  const error = document.createElement("p");
  error.className = "error";
  error.setAttribute("role", "alert");
  const buttons = document.createElement("div");
  buttons.className = "answer-buttons";
  const button = (text, className, type = "button") => {
    const b = document.createElement("button");
    b.type = type;
    b.className = className;
    b.textContent = text;
    buttons.append(b);
    return b;
  };
  button("Send answer", "answer-accept", "submit");
  const decline = button("Decline", "answer-decline");
  const cancel = button("Cancel", "answer-cancel");
  form.append(error, buttons);

  const showError = (e) => {
    error.textContent = e.message;
    for (const input of inputs.values()) input.removeAttribute("aria-invalid");
    const name = e.field?.startsWith("content.") ? e.field.slice("content.".length) : null;
    const bad = name ? inputs.get(name) : null;
    if (bad) {
      bad.setAttribute("aria-invalid", "true");
      bad.setAttribute("aria-errormessage", error.id || (error.id = `${prefix}-error`));
      bad.focus();
    }
  };
  const send = async (answer) => {
    for (const b of buttons.children) b.disabled = true;
    error.textContent = "";
    try {
      await answerCard(card, { ...answer, key: question.key });
      card.note = `answer sent (${answer.action})`;
      render(card);
    } catch (e) {
      showError(e);
      for (const b of buttons.children) b.disabled = false;
    }
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = {};
    for (const [name, input] of inputs) values[name] = input.type === "checkbox" ? input.checked : input.value.trim();
    let content;
    try {
      content = contentFromForm(schema, values);
    } catch (e) {
      showError(e);
      return;
    }
    send({ action: "accept", content });
  });
  decline.addEventListener("click", () => send({ action: "decline" }));
  cancel.addEventListener("click", () => send({ action: "cancel" }));
  return form;
}

/** Send an answer: to the handle's input_url (its own token), else through the job tool
 * answer_job_input with this page's MCP credential. */
async function answerCard(card, answer) {
  if (card.handle?.input_url) {
    return answerJob(card.handle.input_url, answer, { headers: authHeaders() });
  }
  if (!card.job.job_id) throw new Error("this job has no input URL and no job ID to answer with");
  const result = await withAuth(() => mcp.callTool("answer_job_input", { job_id: card.job.job_id, ...answer }));
  if (result.isError) throw new InputRefusedError(400, resultText(result));
  return result.structuredContent;
}

function fmt(n) {
  return Number.isInteger(n) ? String(n) : n.toFixed(2);
}

function outcomeText(job) {
  if (job.status === "completed") return resultText(job.result);
  const parts = [];
  if (job.error?.message) parts.push(job.error.message);
  if (job.error?.reason && job.error.reason !== job.error.message) parts.push(`(reason: ${job.error.reason})`);
  if (job.result) parts.push(resultText(job.result));
  return parts.join("\n");
}

function resultText(result) {
  if (result == null) return "";
  const texts = (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text);
  if (texts.length) return texts.join("\n");
  return JSON.stringify(result.structuredContent ?? result, null, 2);
}

// Elapsed times and liveness move even without events.
setInterval(() => {
  for (const card of cards.values()) if (["running", "input_required"].includes(card.job.status)) render(card);
}, 500);

// --- following a job --------------------------------------------------------------------------

function follow(card, handle) {
  card.handle = handle;
  card.phase = "watching";
  card.job = { ...card.job, job_id: handle.job_id ?? card.job.job_id };
  const origin = new URL(handle.events_url, location.href).origin;
  card.watch = watchJob(
    handle.events_url,
    {
      onConnection: (state) => {
        card.connection = state;
        render(card);
      },
      onEvent: (type, data, job) => {
        if (data.ts) card.skew = data.ts - Date.now();
        if (type === "progress") card.seen.push(data.progress);
        if (type === "reset") card.note = "history was trimmed: resumed from the current state";
        else if (type === "progress" || TERMINAL_EVENTS.includes(type)) card.note = null;
        card.job = job;
        render(card);
        saveJobs();
      },
      onError: (error) => {
        const crossOrigin = origin !== location.origin;
        card.note = crossOrigin
          ? `${error.message}. The events URL is on ${origin} but this page is on ${location.origin}: open the page there, or allow this origin (CORS).`
          : error.message;
        render(card);
      },
    },
    {
      cancelUrl: handle.cancel_url,
      inputUrl: handle.input_url,
      headers: authHeaders(),
    },
  );
}

async function cancelCard(card) {
  const button = $(".job-cancel", card.node);
  button.disabled = true;
  try {
    if (!card.watch && card.requestId !== null) {
      // A sync call still in flight: cancel the MCP request itself.
      await mcp.cancelRequest(card.requestId, "cancelled on the jobs page");
      card.note = "cancel sent to the bridge";
    } else if (card.handle) {
      try {
        const url = card.handle.cancel_url ?? cancelUrlFor(card.handle.events_url);
        await cancelJob(url, { headers: authHeaders() });
      } catch {
        await cancelThroughMcp(card.job.job_id);
      }
      if (card.job.status === "running") card.note = "cancel requested";
    } else if (card.job.job_id) {
      await cancelThroughMcp(card.job.job_id);
      if (card.job.status === "running") card.note = "cancel requested";
    }
  } catch (error) {
    card.note = `Cancel failed: ${error.message}`;
  }
  render(card);
}

function cancelThroughMcp(jobId) {
  return withAuth(() => mcp.callTool("cancel_job", { job_id: jobId }));
}

// --- calling a tool ---------------------------------------------------------------------------

function saveJobs() {
  const saved = [...cards.values()]
    .filter((c) => c.handle && c.node.closest("#jobs"))
    .map((c) => ({ tool: c.tool, handle: c.handle }));
  sessionStorage.setItem(JOBS_KEY, JSON.stringify(saved.reverse()));
}

function restoreJobs() {
  let saved = [];
  try {
    saved = JSON.parse(sessionStorage.getItem(JOBS_KEY) ?? "[]");
  } catch {
    saved = [];
  }
  for (const { tool, handle } of saved) {
    if (!handle?.events_url) continue;
    const card = newCard($("#jobs"), { tool, jobId: handle.job_id });
    follow(card, handle);
  }
  $("#no-jobs").hidden = cards.size > 0;
}

$("#call-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = $("#tool").value;
  let args;
  try {
    args = JSON.parse($("#args").value.trim() || "{}");
    if (args === null || typeof args !== "object" || Array.isArray(args)) {
      throw new Error("the arguments must be a JSON object, like {\"to\": 10}");
    }
    $("#args-error").textContent = "";
    $("#args").removeAttribute("aria-invalid");
  } catch (error) {
    $("#args-error").textContent = `Invalid arguments: ${error.message}`;
    $("#args").setAttribute("aria-invalid", "true");
    $("#args").focus();
    return;
  }
  const correlation = $("#correlation").value.trim();
  if (correlation && !$("#correlation").checkValidity()) {
    $("#call-status").textContent = "The correlation ID may hold 1 to 128 letters, digits and . _ : -";
    return;
  }
  const mode = $("#mode").value;
  $("#no-jobs").hidden = true;
  const card = newCard($("#jobs"), { tool: name });
  $("#call-status").textContent = `Calling ${name}…`;
  try {
    const result = await withAuth(() =>
      mcp.callTool(name, args, {
        meta: mode ? { [MODE_META_KEY]: mode } : undefined,
        headers: correlation ? { "X-Correlation-Id": correlation } : undefined,
        onRequestId: (id) => {
          card.requestId = id;
          render(card);
        },
        // A sync (or auto) call reports progress on the request itself until it answers.
        onProgress: (p) => {
          card.seen.push(p.progress);
          card.job = reduceJob({ ...card.job, status: "running" }, "progress", p);
          render(card);
        },
      }),
    );
    card.requestId = null;
    const handle = parseJobHandle(result);
    if (handle?.events_url) {
      $("#call-status").textContent = `${name} is running as job ${handle.job_id}.`;
      card.seen = [];
      follow(card, handle);
      saveJobs();
    } else {
      // No job behind it (a job tool, or an error before the job started).
      card.phase = "done";
      const status = result.isError ? "failed" : "completed";
      card.job = reduceJob(card.job, status, { status, result, message: resultText(result) });
      $("#call-status").textContent = `${name} answered.`;
    }
  } catch (error) {
    card.requestId = null;
    card.phase = "done";
    card.job = reduceJob(card.job, "failed", { status: "failed", reason: "call_failed", message: error.message });
    $("#call-status").textContent = `${name} failed: ${error.message}`;
  }
  render(card);
});

// --- following what was pasted ----------------------------------------------------------------

const correlations = [];

$("#follow-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const what = $("#follow-what").value.trim();
  const token = $("#follow-token").value.trim();
  const withToken = (path) => {
    const url = new URL(path, location.href);
    if (token) url.searchParams.set("token", token);
    return url.toString();
  };
  let url;
  if (/^(https?:)?\/\//.test(what) || what.startsWith("/")) {
    url = new URL(what, location.href).toString();
  } else if (/^[0-9a-f]{32}$/.test(what)) {
    url = withToken(`/jobs/${what}/events`);
  } else if (/^[A-Za-z0-9._:-]{1,128}$/.test(what)) {
    url = withToken(`/correlations/${encodeURIComponent(what)}/events`);
  } else {
    $("#follow-status").textContent =
      "That is neither a job ID (32 hex digits), a correlation ID (letters, digits, . _ : -) nor a URL.";
    return;
  }
  if (new URL(url).pathname.includes("/correlations/")) {
    followCorrelation(url, what);
  } else {
    const card = newCard($("#followed"), { tool: null });
    follow(card, { events_url: url, job_id: /^[0-9a-f]{32}$/.test(what) ? what : null });
    $("#follow-status").textContent = `Following ${url}`;
  }
});

function followCorrelation(url, label) {
  const list = $("#followed");
  const group = document.createElement("li");
  group.className = "correlation";
  const heading = document.createElement("h3");
  heading.textContent = `Correlation ${label}`;
  const state = document.createElement("p");
  state.className = "status-line";
  state.setAttribute("role", "status");
  const inner = document.createElement("ol");
  inner.className = "jobs";
  group.append(heading, state, inner);
  list.prepend(group);
  const byJob = new Map();
  const cardFor = (snapshot) => {
    let card = byJob.get(snapshot.job_id);
    if (!card) {
      card = newCard(inner, { tool: snapshot.tool, jobId: snapshot.job_id });
      card.phase = "watching";
      byJob.set(snapshot.job_id, card);
    }
    return card;
  };
  const watch = watchCorrelation(url, {
    onConnection: (c) => {
      state.textContent = {
        open: "live",
        reconnecting: "reconnecting…",
        connecting: "connecting",
        waiting: "no job with this correlation ID yet: waiting for the first one…",
        closed: "closed",
      }[c];
      for (const card of byJob.values()) {
        card.connection = TERMINAL_EVENTS.includes(card.job.status) ? "closed" : c;
        render(card);
      }
    },
    onJobStarted: (snapshot, job) => {
      const card = cardFor(snapshot);
      card.job = job;
      card.connection = watch?.connection ?? "open";
      render(card);
    },
    onReset: ({ jobs }) => {
      for (const snapshot of jobs ?? []) {
        const card = cardFor(snapshot);
        card.job = reduceJob(card.job, "reset", snapshot);
        render(card);
      }
    },
    onJobEvent: (type, data, job) => {
      const card = cardFor({ job_id: data.job_id, tool: job.tool });
      if (type === "progress") card.seen.push(data.progress);
      card.job = { ...job, logs: job.logs };
      if (TERMINAL_EVENTS.includes(type)) card.connection = "closed";
      render(card);
    },
    onError: (error) => {
      state.textContent = error.message;
    },
  });
  correlations.push(watch);
  $("#follow-status").textContent = `Following correlation ${label}: jobs appear as they start.`;
}

// --- test hooks (read-only) -------------------------------------------------------------------

window.bridgePage = {
  /** Progress values each job's card showed, in order, by job ID. */
  seen: () =>
    Object.fromEntries([...cards.values()].filter((c) => c.job.job_id).map((c) => [c.job.job_id, [...c.seen]])),
  jobs: () => [...cards.values()].map((c) => ({ ...c.job, connection: c.connection, logs: undefined })),
};

restoreJobs();
loadTools();
