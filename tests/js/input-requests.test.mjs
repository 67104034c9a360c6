// Unit tests of the input-request part of the client package (packages/client, built to dist/index.js) (`node --test tests/js/`): a
// tool's question reaches onInputRequired (from its event, or from the snapshot of a stream
// opened later), answer() POSTs to the handle's input_url, refusals carry the status and the
// field, and form values are typed by the requested schema.

import assert from "node:assert/strict";
import { beforeEach, describe, it } from "node:test";

import {
  InputRefusedError,
  answerJob,
  contentFromForm,
  emptyJob,
  inputUrlFor,
  reduceJob,
  watchJob,
} from "../../packages/client/dist/index.js";
import { FakeEventSource } from "./fake-event-source.mjs";

const ID = "0123456789abcdef0123456789abcdef";
const EVENTS = `http://bridge.test/jobs/${ID}/events?token=read`;
const INPUT = `http://bridge.test/jobs/${ID}/input?token=inp`;
const SCHEMA = {
  type: "object",
  properties: { answer: { type: "string" }, n: { type: "integer" }, ok: { type: "boolean" } },
  required: ["answer"],
};
const QUESTION = { job_id: ID, key: "q1", message: "Your name?", requested_schema: SCHEMA };

function snapshot(extra = {}) {
  return { job_id: ID, tool: "demo__ask", status: "running", seq: 0, created_at: 1000, ...extra };
}

/** A fetch that records its calls and answers `status` with `body`. */
function fakeFetch(status, body) {
  const calls = [];
  const f = async (url, init) => {
    calls.push({ url, init, body: JSON.parse(init.body) });
    return { ok: status >= 200 && status < 300, status, json: async () => body };
  };
  f.calls = calls;
  return f;
}

beforeEach(() => {
  FakeEventSource.instances.length = 0;
});

describe("reduceJob with questions", () => {
  it("input_required lists the question and sets the status; input_answered takes it away", () => {
    let job = reduceJob(emptyJob(ID), "status", snapshot());
    job = reduceJob(job, "input_required", QUESTION, 1);
    assert.equal(job.status, "input_required");
    assert.deepEqual(job.input_requests, [{ key: "q1", message: "Your name?", requested_schema: SCHEMA }]);
    job = reduceJob(job, "input_answered", { job_id: ID, key: "q1", action: "accept", by: "timeout" }, 2);
    assert.equal(job.status, "running");
    assert.deepEqual(job.input_requests, []);
  });

  it("a snapshot's input_requests are kept; a terminal event clears them", () => {
    let job = reduceJob(emptyJob(ID), "status", snapshot({ status: "input_required", input_requests: [QUESTION] }));
    assert.equal(job.input_requests.length, 1);
    job = reduceJob(job, "completed", { status: "completed", result: {} }, 3);
    assert.deepEqual(job.input_requests, []);
  });
});

describe("watchJob with questions", () => {
  it("calls onInputRequired once per question, and answer() POSTs it with its key to inputUrl", async () => {
    const asked = [];
    const answered = [];
    const fetch = fakeFetch(200, { job_id: ID, answered: true });
    const watch = watchJob(
      EVENTS,
      { onInputRequired: (q) => asked.push(q), onInputAnswered: (d) => answered.push(d) },
      { EventSource: FakeEventSource, inputUrl: INPUT, fetch },
    );
    const es = FakeEventSource.last();
    es.open();
    es.emit("status", snapshot(), 0);
    es.emit("progress", { job_id: ID, progress: 1, total: 2, message: "asking" }, 1);
    es.emit("input_required", QUESTION, 2);
    assert.equal(asked.length, 1);
    assert.equal(asked[0].message, "Your name?");
    assert.equal(watch.job.status, "input_required");
    const body = await watch.answer({ action: "accept", content: { answer: "Ada" } });
    assert.deepEqual(body, { job_id: ID, answered: true });
    assert.equal(fetch.calls[0].url, INPUT, "the handle's input_url, with its own token");
    assert.equal(fetch.calls[0].init.method, "POST");
    assert.deepEqual(fetch.calls[0].body, { action: "accept", content: { answer: "Ada" }, key: "q1" });
    es.emit("input_answered", { job_id: ID, key: "q1", action: "accept", by: "POST /jobs/{id}/input" }, 3);
    assert.equal(answered.length, 1);
    assert.equal(watch.job.status, "running");
    assert.equal(asked.length, 1, "no second call for the same question");
  });

  it("a stream opened after the question was asked reports it from the snapshot", () => {
    const asked = [];
    watchJob(EVENTS, { onInputRequired: (q) => asked.push(q.key) }, { EventSource: FakeEventSource });
    const es = FakeEventSource.last();
    es.open();
    es.emit("status", snapshot({ status: "input_required", input_requests: [QUESTION] }), 2);
    assert.deepEqual(asked, ["q1"]);
  });
});

describe("answerJob", () => {
  it("a 400 names the field; a 409 says nothing waits", async () => {
    const bad = fakeFetch(400, { error: { code: "bad_request", message: "the answer does not fit the question's schema: content.answer: must be a string", field: "content.answer" } });
    await assert.rejects(
      answerJob(INPUT, { action: "accept" }, { fetch: fakeFetch(400, { error: { message: "x", field: "content" } }) }),
      (e) => e.field === "content",
      "the body's field wins",
    );
    await assert.rejects(answerJob(INPUT, { action: "accept", content: { answer: 5 } }, { fetch: bad }), (e) => {
      assert.ok(e instanceof InputRefusedError);
      assert.equal(e.status, 400);
      assert.equal(e.field, "content.answer");
      return true;
    });
    const late = fakeFetch(409, { error: { code: "conflict", message: "the job has no question waiting for an answer" } });
    await assert.rejects(answerJob(INPUT, { action: "decline" }, { fetch: late }), (e) => e.status === 409 && e.field === null);
  });

  it("the input URL next to an events URL keeps the query", () => {
    assert.equal(inputUrlFor(EVENTS), `http://bridge.test/jobs/${ID}/input?token=read`);
  });
});

describe("contentFromForm", () => {
  it("types values by the schema and refuses what does not parse, naming the field", () => {
    assert.deepEqual(contentFromForm(SCHEMA, { answer: "Ada", n: "3", ok: true }), { answer: "Ada", n: 3, ok: true });
    assert.deepEqual(contentFromForm(SCHEMA, { answer: "Ada", n: "" }), { answer: "Ada", ok: false });
    assert.throws(() => contentFromForm(SCHEMA, { answer: "" }), (e) => e.field === "content.answer");
    assert.throws(() => contentFromForm(SCHEMA, { answer: "a", n: "1.5" }), (e) => e.field === "content.n");
  });
});
