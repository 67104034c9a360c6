"""The Microsoft Agent Framework (PyPI `agent-framework-core`) runs an agent against the bridge
through its `MCPStreamableHTTPTool` at its defaults (no request timeout), with a stub chat client
(the framework's own function-invocation layer over a client that answers from the scripted model
of script.py) in place of an LLM.

Checks: the turn ends with the slow tool's real result; progress reaches the application (the
correlation channel); what cancelling the agent's run during the tool call does to the job.

    python agent_framework_agent.py --mcp URL --result-cid C --result-events URL --cancel-cid C --cancel-events URL
"""

from __future__ import annotations

import asyncio
import json

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    MCPStreamableHTTPTool,
    Message,
)

from script import (PROMPT, RESULT, TERMINAL, Channel, ScriptedModel, cancel_at_first_progress,
                    check,
                    report_cancel, run_turns)


def last_tool_output(messages) -> str | None:
    last = messages[-1] if messages else None
    if last is None:
        return None
    results = [c for c in last.contents if c.type == "function_result"]
    if not results:
        return None
    result = results[-1]
    if result.exception:
        return f"error: {result.exception}"
    value = result.result
    return value if isinstance(value, str) else json.dumps(value, default=str)


class ScriptedChatClient(FunctionInvocationLayer, BaseChatClient):
    """A chat client whose answers come from the script; the framework invokes the tools."""

    def __init__(self, script: ScriptedModel) -> None:
        super().__init__()
        self.script = script
        self.calls = 0

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        async def respond() -> ChatResponse:
            step = self.script.next(last_tool_output(messages))
            self.calls += 1
            if step[0] == "final":
                contents = [Content.from_text(step[1])]
            else:
                _, name, args = step
                contents = [Content.from_function_call(f"call_{self.calls}", name, arguments=args)]
            return ChatResponse(messages=[Message(role="assistant", contents=contents)])

        return respond()


def bridge_tool(mcp_url: str, cid: str) -> MCPStreamableHTTPTool:
    return MCPStreamableHTTPTool(
        name="bridge", url=mcp_url, static_headers={"X-Correlation-Id": cid},
        approval_mode="never_require")


async def result_turn(mcp_url: str, cid: str, events_url: str) -> None:
    channel = Channel(events_url)
    script = ScriptedModel()
    async with bridge_tool(mcp_url, cid) as tool:
        agent = Agent(client=ScriptedChatClient(script), name="counter", tools=tool)
        response = await agent.run(PROMPT)
    print(f"final output: {response.text}", flush=True)
    print(f"script: {script.summary()}", flush=True)
    check(RESULT in response.text, "result reached: the turn ends with the tool's result")
    seen = channel.until(lambda e, d: e in TERMINAL, limit=60)
    progress = [d for e, d in seen if e == "progress"]
    print(f"progress events on the correlation channel: {len(progress)}", flush=True)
    check(len(progress) >= 2, "progress seen by the application (correlation channel)")
    check(seen[-1][0] == "completed", "the job completed")
    print(f"TIMEOUTS {script.timeouts}", flush=True)


async def cancel_turn(mcp_url: str, cid: str, events_url: str) -> None:
    channel = Channel(events_url)
    async with bridge_tool(mcp_url, cid) as tool:
        agent = Agent(client=ScriptedChatClient(ScriptedModel()), name="counter", tools=tool)
        run = asyncio.create_task(agent.run(PROMPT))
        await cancel_at_first_progress(channel, run)
    await report_cancel(channel)


if __name__ == "__main__":
    asyncio.run(run_turns(result_turn, cancel_turn))
