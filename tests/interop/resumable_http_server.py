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
import weakref

import uvicorn
from pydantic import BaseModel
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventStore, StreamableHTTPServerTransport


# The longest a new event waits for a resumed stream to be attached (its client may be gone).
ATTACH_WAIT_SECS = 5.0

# Every session's transport, to see when a resumed stream is attached (`_request_streams`).
TRANSPORTS = weakref.WeakSet()
_transport_init = StreamableHTTPServerTransport.__init__


def _noted_init(self, *args, **kwargs):
    _transport_init(self, *args, **kwargs)
    TRANSPORTS.add(self)


StreamableHTTPServerTransport.__init__ = _noted_init


def attached(stream_id):
    """Whether a transport sends `stream_id`'s events to a connected stream."""
    return any(stream_id in getattr(t, "_request_streams", {}) for t in list(TRANSPORTS))


class MemoryEventStore(EventStore):
    """Every event of every stream, in order; ids are decimal counters.

    The SDK stores an event, then sends it live if the stream is attached. A resumed stream is
    attached only after `replay_events_after` returns and its priming event is written (its own
    comment calls this replay-to-live window pre-existing), so an event stored during a replay
    or before that attach is kept but never sent: a resuming client misses it. Here a new event
    waits while a replay runs and until the replayed stream is attached (at most
    ATTACH_WAIT_SECS), so the tests see the bridge's resume, not that window (docs/replicas.md
    says what it means for a real upstream on this SDK)."""

    def __init__(self):
        self.events = []  # (id, stream_id, message)
        self.ids = itertools.count(1)
        self.replaying = 0
        self.resumed = None  # (stream id, loop time) of a replay whose stream is not attached yet

    async def store_event(self, stream_id, message):
        loop = asyncio.get_running_loop()
        while self.replaying or self.resumed:
            if self.resumed and (
                attached(self.resumed[0]) or loop.time() > self.resumed[1] + ATTACH_WAIT_SECS
            ):
                self.resumed = None
                continue
            await asyncio.sleep(0.01)
        event_id = str(next(self.ids))
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):
        from mcp.server.streamable_http import EventMessage

        self.replaying += 1
        stream_id = None
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
            self.replaying -= 1
            if stream_id is not None:
                self.resumed = (stream_id, asyncio.get_running_loop().time())


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
