"""The OpenAI Agents SDK (PyPI `openai-agents`) runs an agent against the bridge with its
`MCPServerStreamableHttp` left at its defaults (a 5 s read timeout per MCP answer), the scripted
model of script.py in place of an LLM.

Checks: the turn ends with the slow tool's real result (the bridge learns the client's 5 s bound
from the one wait that timed out, and later waits answer before it); progress reaches the
application (the SDK shows none for a job, so through the correlation channel); what cancelling
the agent's run during the tool call does to the job (it is cancelled).

    python openai_agents.py --mcp URL --result-cid C --result-events URL --cancel-cid C --cancel-events URL
"""

from __future__ import annotations

import asyncio
import json

from agents import Agent, ModelSettings, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from script import (PROMPT, RESULT, TERMINAL, Channel, ScriptedModel, cancel_at_first_progress,
                    check,
                    report_cancel, run_turns)


def last_tool_output(items) -> str | None:
    if isinstance(items, str):
        return None
    for item in reversed(items):
        kind = item.get("type") if isinstance(item, dict) else getattr(item, "type", None)
        if kind == "function_call_output":
            output = item["output"] if isinstance(item, dict) else item.output
            return output if isinstance(output, str) else str(output)
    return None


class ScriptedOpenAIModel(Model):
    """The Agents SDK's model interface, answered by the script."""

    def __init__(self, script: ScriptedModel) -> None:
        self.script = script
        self.calls = 0

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema,
                           handoffs, tracing, *, previous_response_id=None, conversation_id=None,
                           prompt=None) -> ModelResponse:
        step = self.script.next(last_tool_output(input))
        self.calls += 1
        if step[0] == "final":
            output = [ResponseOutputMessage(
                id=f"msg_{self.calls}", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=step[1], annotations=[])])]
        else:
            _, name, args = step
            output = [ResponseFunctionToolCall(
                id=f"fc_{self.calls}", call_id=f"call_{self.calls}", type="function_call",
                name=name, arguments=json.dumps(args))]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scripted model is not streamed")


def server(mcp_url: str, cid: str) -> MCPServerStreamableHttp:
    # Defaults on purpose: client_session_timeout_seconds stays 5.
    return MCPServerStreamableHttp(
        params={"url": mcp_url, "headers": {"X-Correlation-Id": cid}}, name="bridge")


async def result_turn(mcp_url: str, cid: str, events_url: str) -> None:
    channel = Channel(events_url)
    script = ScriptedModel()
    async with server(mcp_url, cid) as bridge:
        agent = Agent(name="counter", instructions="Use the tools.", mcp_servers=[bridge],
                      model=ScriptedOpenAIModel(script), model_settings=ModelSettings())
        run = await Runner.run(agent, PROMPT, max_turns=80)
    print(f"final output: {run.final_output}", flush=True)
    print(f"script: {script.summary()}", flush=True)
    check(RESULT in str(run.final_output), "result reached: the turn ends with the tool's result")
    seen = channel.until(lambda e, d: e in TERMINAL, limit=60)
    progress = [d for e, d in seen if e == "progress"]
    print(f"progress events on the correlation channel: {len(progress)}", flush=True)
    check(len(progress) >= 2, "progress seen by the application (correlation channel)")
    check(seen[-1][0] == "completed", "the job completed")
    print(f"TIMEOUTS {script.timeouts}", flush=True)


async def cancel_turn(mcp_url: str, cid: str, events_url: str) -> None:
    channel = Channel(events_url)
    script = ScriptedModel()
    async with server(mcp_url, cid) as bridge:
        agent = Agent(name="counter", instructions="Use the tools.", mcp_servers=[bridge],
                      model=ScriptedOpenAIModel(script))
        run = asyncio.create_task(Runner.run(agent, PROMPT, max_turns=80))
        await cancel_at_first_progress(channel, run)
    await report_cancel(channel)


async def main() -> None:
    set_tracing_disabled(True)
    await run_turns(result_turn, cancel_turn)


if __name__ == "__main__":
    asyncio.run(main())
