"""A Streamable HTTP MCP server (the official Python SDK) whose SSE events carry ids: an
in-memory event store, so a client that lost a POST's response stream resumes it with `GET`
and `Last-Event-ID` on the same session (the spec's resumability). Its tools: `counted`,
`steps` progress notifications `step_ms` apart, then the text `counted: TOPIC`; `asking`, the
same steps, then a question (`elicitation/create`, a string `name`), then `asked: TOPIC: NAME`.

usage: resumable_http_server.py PORT [--no-store]
"""

import asyncio
import itertools
import sys

import uvicorn
from pydantic import BaseModel
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventStore


# How long new events wait after a replay, for the SDK to attach the resumed stream.
SETTLE_SECS = 0.5


class MemoryEventStore(EventStore):
    """Every event of every stream, in order; ids are decimal counters.

    The SDK stores an event, then sends it live if the stream is attached. A resumed stream is
    attached only after `replay_events_after` returns (its own comment calls this replay-to-live
    window pre-existing), so an event stored during a replay or just after it is kept but never
    sent: a resuming client misses it. Here a new event waits while a replay runs and for
    SETTLE_SECS after, so the tests see the bridge's resume, not that window (docs/replicas.md
    says what it means for a real upstream on this SDK)."""

    def __init__(self):
        self.events = []  # (id, stream_id, message)
        self.ids = itertools.count(1)
        self.settled_at = 0.0  # loop time before which a new event waits

    async def store_event(self, stream_id, message):
        loop = asyncio.get_running_loop()
        while (wait := self.settled_at - loop.time()) > 0:
            await asyncio.sleep(wait)
        event_id = str(next(self.ids))
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):
        from mcp.server.streamable_http import EventMessage

        loop = asyncio.get_running_loop()
        self.settled_at = float("inf")
        try:
            position = next((i for i, e in enumerate(self.events) if e[0] == last_event_id), None)
            if position is None:
                return None
            stream_id = self.events[position][1]
            for event_id, stream, message in self.events[position + 1 :]:
                if stream == stream_id and message is not None:
                    await send_callback(EventMessage(message, event_id))
            return stream_id
        finally:
            self.settled_at = loop.time() + SETTLE_SECS


server = MCPServer("resumable")


@server.tool()
async def counted(
    topic: str, steps: int = 60, step_ms: int = 100, log: bool = False, ctx: Context = None
) -> str:
    """Count `steps` steps, `step_ms` apart, reporting each as progress (after a log line
    `line <step>` when `log`)."""
    for step in range(1, steps + 1):
        await asyncio.sleep(step_ms / 1000)
        if log:
            await ctx.info(f"line {step}")
        await ctx.report_progress(step, steps, f"step {step}/{steps}")
    return f"counted: {topic}"


class Name(BaseModel):
    name: str


@server.tool()
async def asking(topic: str, steps: int = 3, step_ms: int = 100, ctx: Context = None) -> str:
    """Count `steps` steps, then ask who goes on, then say who did."""
    for step in range(1, steps + 1):
        await asyncio.sleep(step_ms / 1000)
        await ctx.report_progress(step, steps + 1, f"step {step}/{steps}")
    answer = await ctx.elicit(f"Who goes on with {topic}?", Name)
    name = answer.data.name if answer.action == "accept" else answer.action
    await ctx.report_progress(steps + 1, steps + 1, "answered")
    return f"asked: {topic}: {name}"


def main():
    port = int(sys.argv[1])
    store = None if "--no-store" in sys.argv else MemoryEventStore()
    app = server.streamable_http_app(event_store=store)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
