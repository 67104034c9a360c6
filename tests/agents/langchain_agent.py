"""LangChain (`langchain` 1.x `create_agent`, a LangGraph loop) runs an agent against the bridge
through `langchain-mcp-adapters` at its defaults, the scripted model of script.py in place of an
LLM (a chat model that answers with tool calls).

Checks: the turn ends with the slow tool's real result; progress reaches the application through
the adapters' `on_progress` callback (while the call waits for its result, the bridge's sync
budget) and the correlation channel; what cancelling the agent's run during the tool call does
to the job (the MCP Python SDK 1.x sends no cancel: it runs on).

    python langchain_agent.py --mcp URL --result-cid C --result-events URL --cancel-cid C --cancel-events URL
"""

from __future__ import annotations

import asyncio
import json

from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_mcp_adapters.callbacks import Callbacks
from langchain_mcp_adapters.client import MultiServerMCPClient

from script import (PROMPT, RESULT, TERMINAL, Channel, ScriptedModel, cancel_at_first_progress,
                    check,
                    report_cancel, run_turns)


def text_of(message: ToolMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        part.get("text", "") if isinstance(part, dict) else str(part) for part in content
    )


class ScriptedChatModel(BaseChatModel):
    """A chat model whose answers come from the script: tool calls, then the final text."""

    script: ScriptedModel
    calls: int = 0

    model_config = {"arbitrary_types_allowed": True}

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        last = messages[-1]
        step = self.script.next(text_of(last) if isinstance(last, ToolMessage) else None)
        self.calls += 1
        if step[0] == "final":
            message = AIMessage(content=step[1])
        else:
            _, name, args = step
            message = AIMessage(content="", tool_calls=[
                {"name": name, "args": args, "id": f"call_{self.calls}", "type": "tool_call"}])
        return ChatResult(generations=[ChatGeneration(message=message)])


def client(mcp_url: str, cid: str, progress: list) -> MultiServerMCPClient:
    async def on_progress(value, total, message, context):
        progress.append((value, total, message))

    return MultiServerMCPClient(
        {"bridge": {"transport": "streamable_http", "url": mcp_url,
                    "headers": {"X-Correlation-Id": cid}}},
        callbacks=Callbacks(on_progress=on_progress),
    )


async def result_turn(mcp_url: str, cid: str, events_url: str) -> None:
    channel = Channel(events_url)
    script, progress = ScriptedModel(), []
    tools = await client(mcp_url, cid, progress).get_tools()
    agent = create_agent(ScriptedChatModel(script=script), tools)
    state = await agent.ainvoke({"messages": [("user", PROMPT)]}, {"recursion_limit": 200})
    final = state["messages"][-1].content
    print(f"final output: {final}", flush=True)
    print(f"script: {script.summary()}", flush=True)
    check(RESULT in str(final), "result reached: the turn ends with the tool's result")
    print(f"progress through on_progress: {len(progress)}", flush=True)
    check(len(progress) >= 1, "progress seen by the application (the adapters' on_progress)")
    seen = channel.until(lambda e, d: e in TERMINAL, limit=60)
    check(len([1 for e, _ in seen if e == "progress"]) >= 2, "progress on the correlation channel")
    check(seen[-1][0] == "completed", "the job completed")
    print(f"TIMEOUTS {script.timeouts}", flush=True)


async def cancel_turn(mcp_url: str, cid: str, events_url: str) -> None:
    channel = Channel(events_url)
    tools = await client(mcp_url, cid, []).get_tools()
    agent = create_agent(ScriptedChatModel(script=ScriptedModel()), tools)
    run = asyncio.create_task(agent.ainvoke({"messages": [("user", PROMPT)]}))
    await cancel_at_first_progress(channel, run)
    await report_cancel(channel)


if __name__ == "__main__":
    asyncio.run(run_turns(result_turn, cancel_turn))
