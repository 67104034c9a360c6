// The Vercel AI SDK (npm `ai`, `@ai-sdk/mcp`) runs its agent loop (`generateText` with tools and
// several steps) against the bridge through its MCP client over Streamable HTTP at its defaults,
// with `MockLanguageModelV3` (from `ai/test`) answering as the scripted model of script.py does.
//
// Checks: the turn ends with the slow tool's real result; progress reaches the application (the
// correlation channel); what aborting the run during the tool call does to the job.
//
//   node vercel_ai.mjs --mcp URL --result-cid C --result-events URL --cancel-cid C --cancel-events URL

import { createMCPClient } from '@ai-sdk/mcp';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';

const SLOW_TOOL = 'demo__slow_count';
const SLOW_ARGS = { to: 40, delay_ms: 500 };
const RESULT = 'counted to 40';
const RESULT_STRUCTURED = '"counted":40';
const PROMPT = 'Count to 40 slowly with the demo tool, then tell me the result.';
const MAX_STEPS = 60;
const TERMINAL = ['completed', 'failed', 'cancelled'];

function args() {
  const out = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, '')] = argv[i + 1];
  return out;
}

function check(condition, what) {
  if (!condition) {
    console.log(`CHECK FAILED: ${what}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

/** The text of the last tool result in a model prompt, as the SDK hands it to the model. */
function lastToolOutput(prompt) {
  const last = prompt[prompt.length - 1];
  if (!last || last.role !== 'tool') return null;
  const part = last.content.filter((p) => p.type === 'tool-result').pop();
  if (!part) return null;
  const { output } = part;
  if (output.type === 'text' || output.type === 'error-text') return String(output.value);
  if (output.type === 'content') return output.value.map((c) => c.text ?? JSON.stringify(c)).join('\n');
  const value = output.value;
  const texts = (value?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text);
  return [...texts, JSON.stringify(value?.structuredContent ?? '')].join('\n');
}

/** The scripted model: the steps of script.py, in JavaScript. */
function scripted() {
  const state = { jobId: null, steps: 0, waits: 0, timeouts: 0, instructions: new Set() };
  const next = (output) => {
    state.steps += 1;
    if (state.steps > MAX_STEPS) throw new Error(`no result after ${MAX_STEPS} steps`);
    if (output === null) return { call: SLOW_TOOL, args: SLOW_ARGS };
    if (output.includes(RESULT) || output.replace(/\s/g, '').includes(RESULT_STRUCTURED)) {
      return { final: `The tool says: ${RESULT}.` };
    }
    const found = output.match(/"?job_id"?\s*[:=]\s*\\?"([0-9a-f]{32})/);
    if (found) state.jobId = found[1];
    const lowered = output.toLowerCase();
    if (lowered.includes('timed out') || lowered.includes('timeout') || lowered.includes('try again')) {
      state.timeouts += 1;
    } else if (!output.includes('wait_for_job')) {
      throw new Error(`the model does not know what to do with: ${output.slice(0, 500)}`);
    }
    const said = output.match(/each call waits up to [0-9.]+ s/);
    if (said) state.instructions.add(said[0]);
    state.waits += 1;
    return { call: 'wait_for_job', args: { job_id: state.jobId } };
  };
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  };
  const model = new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      const step = next(lastToolOutput(prompt));
      if (step.final) {
        return { content: [{ type: 'text', text: step.final }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] };
      }
      return {
        content: [{ type: 'tool-call', toolCallId: `call_${state.steps}`, toolName: step.call, input: JSON.stringify(step.args) }],
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
        usage,
        warnings: [],
      };
    },
  });
  return { model, state };
}

/** A correlation channel read with fetch: its events, parsed, in order. */
function channel(url) {
  const events = [];
  const waiters = [];
  const push = (event) => {
    events.push(event);
    for (const w of waiters.splice(0)) w();
  };
  (async () => {
    const response = await fetch(url, { headers: { Accept: 'text/event-stream' } });
    const decoder = new TextDecoder();
    let buffer = '';
    for await (const chunk of response.body) {
      buffer += decoder.decode(chunk, { stream: true });
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let event = 'message';
        const data = [];
        for (const line of block.split('\n')) {
          if (line.startsWith('event:')) event = line.slice(6).trim();
          else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
        }
        if (data.length) push({ event, data: JSON.parse(data.join('\n')) });
      }
    }
  })().catch(() => {});
  let read = 0;
  const until = async (wanted, limitMs = 90_000) => {
    const seen = [];
    const deadline = Date.now() + limitMs;
    for (;;) {
      while (read < events.length) {
        const e = events[read++];
        seen.push(e);
        if (wanted(e)) return seen;
      }
      if (Date.now() > deadline) throw new Error(`no such event within ${limitMs} ms: ${JSON.stringify(seen)}`);
      await new Promise((resolve) => { waiters.push(resolve); setTimeout(resolve, 1000); });
    }
  };
  return { until };
}

async function client(mcp, cid) {
  return createMCPClient({ transport: { type: 'http', url: mcp, headers: { 'X-Correlation-Id': cid } } });
}

async function resultTurn(a) {
  const events = channel(a['result-events']);
  const { model, state } = scripted();
  const mcp = await client(a.mcp, a['result-cid']);
  const result = await generateText({ model, tools: await mcp.tools(), prompt: PROMPT, stopWhen: stepCountIs(80) });
  await mcp.close();
  console.log(`final output: ${result.text}`);
  console.log(`script: steps=${state.steps} waits=${state.waits} timeouts=${state.timeouts} instructions=${[...state.instructions]}`);
  check(result.text.includes(RESULT), "result reached: the turn ends with the tool's result");
  const seen = await events.until((e) => TERMINAL.includes(e.event), 60_000);
  const progress = seen.filter((e) => e.event === 'progress').length;
  console.log(`progress events on the correlation channel: ${progress}`);
  check(progress >= 2, 'progress seen by the application (correlation channel)');
  check(seen[seen.length - 1].event === 'completed', 'the job completed');
  console.log(`TIMEOUTS ${state.timeouts}`);
}

async function cancelTurn(a) {
  const events = channel(a['cancel-events']);
  const { model } = scripted();
  const mcp = await client(a.mcp, a['cancel-cid']);
  const abort = new AbortController();
  const run = generateText({ model, tools: await mcp.tools(), prompt: PROMPT, stopWhen: stepCountIs(80), abortSignal: abort.signal })
    .catch((e) => console.log(`the run ended: ${e.name}`));
  await events.until((e) => e.event === 'progress');
  abort.abort();
  await run;
  const seen = await events.until((e) => TERMINAL.includes(e.event), 60_000);
  await mcp.close();
  // What aborting the run did to the job, for the test to compare with docs/agents.md.
  console.log(`CANCEL ${seen[seen.length - 1].event}`);
}

const a = args();
await resultTurn(a);
await cancelTurn(a);
console.log('all checks passed');
process.exit(0);
