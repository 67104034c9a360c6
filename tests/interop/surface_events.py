"""Scenarios through the bridge with the official Python SDK (2.x) that need more than a listing:
notifications, log levels, output schemas, large answers. Each prints "ok: …" lines and ends
with "all checks passed", or exits non-zero with "FAIL: …" (tests/it/interop_surface.rs runs them).

Usage: surface_events.py SCENARIO URL MODE [ARGS…]
  MODE: legacy, legacy:REVISION or 2026-07-28, as in surface_client.py

Scenarios:
  updated URI TOOL      follow URI (resources/subscribe, or subscriptions/listen at 2026-07-28),
                        call TOOL (it makes the upstream send resources/updated), expect the
                        update under the URI used
  listchanged TOOL      expect tools/list_changed after calling TOOL (which restarts an upstream)
  logging TOOL          at level "info", call TOOL (logs debug, info, error): expect info and
                        error on the request, not debug
  schema TOOL ARGS      TOOL has an output schema and is configured sync: asking for mode
                        async is refused with a clear error; a plain call validates
  big TOOL MIB          TOOL returns MIB MiB of text: read it whole (SSE caps events at 1 MiB)
"""

import asyncio
import json
import sys

import mcp.client.session as client_session
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

WAIT = 30


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", flush=True)
        sys.exit(1)
    print(f"ok: {message}", flush=True)


def connect(url, mode, **kwargs):
    if mode.startswith("legacy:"):
        client_session.LATEST_HANDSHAKE_VERSION = mode[len("legacy:"):]
        mode = "legacy"
    if mode == "2026-07-28":
        mode = "auto"
    return Client(url, mode=mode, **kwargs)


class Inbox:
    """Server notifications a handshake-era session receives outside any request."""

    def __init__(self):
        self.items = []
        self.arrived = asyncio.Event()

    async def __call__(self, message):
        if isinstance(message, types.ServerNotification):
            self.items.append(message)
            self.arrived.set()

    async def wait_for(self, predicate):
        async def wait():
            while not any(predicate(m) for m in self.items):
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(wait(), WAIT)


async def updated(url, mode, uri, tool):
    inbox = Inbox()
    async with connect(url, mode, message_handler=inbox) as client:
        if client.protocol_version >= "2026-07-28":
            async with client.listen(resource_subscriptions=[uri]) as sub:
                check(uri in (sub.honored.resource_subscriptions or []), f"listen accepted {uri}")
                await client.call_tool(tool, {})
                event = await asyncio.wait_for(sub.__anext__(), WAIT)
                check(isinstance(event, ResourceUpdated) and event.uri == uri, f"resources/updated for {uri} on the listen stream: {event}")
        else:
            await client.session.subscribe_resource(uri)
            await client.call_tool(tool, {})
            await inbox.wait_for(lambda m: getattr(m, "method", "") == "notifications/resources/updated" and m.params.uri == uri)
            check(True, f"resources/updated for {uri} on the session")
            await client.session.unsubscribe_resource(uri)


async def listchanged(url, mode, tool):
    inbox = Inbox()
    async with connect(url, mode, message_handler=inbox) as client:
        if client.protocol_version >= "2026-07-28":
            async with client.listen(tools_list_changed=True, prompts_list_changed=True, resources_list_changed=True) as sub:
                check(sub.honored.tools_list_changed, "listen accepted tools_list_changed")
                try:
                    await client.call_tool(tool, {})
                except MCPError:
                    pass  # the tool restarts its server: its own call may fail
                event = await asyncio.wait_for(sub.__anext__(), WAIT)
                check(isinstance(event, ToolsListChanged), f"tools/list_changed on the listen stream: {event}")
        else:
            try:
                await client.call_tool(tool, {})
            except MCPError:
                pass
            await inbox.wait_for(lambda m: getattr(m, "method", "") == "notifications/tools/list_changed")
            check(True, "tools/list_changed on the session")


async def logging(url, mode, tool):
    seen = []

    async def on_log(params):
        seen.append((params.level, params.data))

    async with connect(url, mode, logging_callback=on_log, log_level="info") as client:
        filtered = True
        if client.protocol_version < "2026-07-28":
            # A session that sets no level gets every message, as from the server directly;
            # it can set one where the server offers logging.
            filtered = client.server_capabilities.logging is not None
            if filtered:
                await client.set_logging_level("info")
        result = await client.call_tool(tool, {})
        check(not result.is_error, f"{tool} answered: {result.content}")
        levels = [level for level, _ in seen]
        check("info" in levels and "error" in levels, f"info and error messages reached the caller: {seen}")
        if filtered:
            check("debug" not in levels, f"no debug message below the caller's level: {seen}")
        else:
            check("debug" in levels, f"with no level set, every message reached the caller: {seen}")


async def schema(url, mode, tool, arguments):
    async with connect(url, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        check(tools[tool].output_schema is not None, f"{tool} is listed with its output schema")
        try:
            await client.call_tool(tool, arguments, meta={"mcp-progress-bridge/mode": "async"})
            check(False, "a job handle was asked for a tool with an output schema")
        except MCPError as e:
            check("output schema" in e.error.message and "sync" in e.error.message, f"mode async is refused with what to do: {e.error.message}")
        result = await client.call_tool(tool, arguments)
        check(not result.is_error and result.structured_content is not None, f"a plain call validates against the schema: {result.structured_content}")


async def big(url, mode, tool, mib):
    async with connect(url, mode) as client:
        result = await client.call_tool(tool, {"mib": mib})
        text = result.content[0].text
        check(len(text) == mib * 1024 * 1024, f"{mib} MiB read whole at {client.protocol_version} ({len(text)} characters)")


async def main(argv):
    scenario, url, mode, *rest = argv
    if scenario == "updated":
        await updated(url, mode, rest[0], rest[1])
    elif scenario == "listchanged":
        await listchanged(url, mode, rest[0])
    elif scenario == "logging":
        await logging(url, mode, rest[0])
    elif scenario == "schema":
        await schema(url, mode, rest[0], json.loads(rest[1]))
    elif scenario == "big":
        await big(url, mode, rest[0], int(rest[1]))
    else:
        check(False, f"unknown scenario {scenario}")
    print("all checks passed", flush=True)


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(sys.argv[1:]), timeout=120))
