"""Drive a running bridge with the official MCP Python SDK: a client nobody on this project wrote.

Usage: python_client.py MCP_URL

Checks, in order, and exits non-zero on the first failure (the message says which):
  1. the session (the SDK negotiates its own protocol revision) lists the demo tools
     namespaced, plus the bridge's job tools;
  2. a quick call answered in auto mode returns the tool's own result, and the progress the
     SDK asked for (it sends a progress token when given a callback) arrives on its request;
  3. a slow call is answered with a job handle; the handle's events_url streams progress and
     then `completed`; `wait_for_job` returns the same result a direct call would;
  4. the handshake-era client (ClientSession + initialize) works the same way.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", flush=True)
        sys.exit(1)
    print(f"ok: {message}", flush=True)


def text_of(result):
    return next((c.text for c in result.content if getattr(c, "type", "") == "text"), "")


async def read_events(url):
    """Read a job's SSE stream until its terminal event: (event, data) pairs."""
    events, event, data = [], None, None
    async with httpx2.AsyncClient(timeout=30) as http:
        async with http.stream("GET", url) as response:
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line[len("event: "):]
                elif line.startswith("data: "):
                    data = json.loads(line[len("data: "):])
                elif line == "" and event is not None:
                    events.append((event, data))
                    if event in ("completed", "failed", "cancelled"):
                        break
                    event, data = None, None
    return events


async def exercise(call_tool, list_tools, label):
    tools = {t.name for t in (await list_tools()).tools}
    for name in ("demo__slow_count", "demo__echo", "get_job_status", "wait_for_job", "cancel_job"):
        check(name in tools, f"[{label}] tools/list has {name}")

    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    quick = await call_tool("demo__slow_count", {"to": 3, "delay_ms": 20}, progress_callback=on_progress)
    check(text_of(quick) == "counted to 3", f"[{label}] a quick call returns the tool's result: {text_of(quick)!r}")
    check([p for p, _, _ in seen] == [1, 2, 3], f"[{label}] progress on the caller's own request: {seen}")
    meta = (quick.meta or {}).get("mcp-progress-bridge/job", {})
    check(len(meta.get("job_id", "")) == 32, f"[{label}] the result names its job in _meta")

    slow = await call_tool("demo__slow_count", {"to": 30, "delay_ms": 150})
    handle = json.loads(text_of(slow))
    check(handle.get("status") == "running", f"[{label}] a slow call answers with a job handle")
    events = await read_events(handle["events_url"])
    kinds = [k for k, _ in events]
    check(kinds[0] == "status" and kinds[-1] == "completed", f"[{label}] the job stream runs status .. completed")
    progress = [d["progress"] for k, d in events if k == "progress"]
    check(progress == list(range(1, 31)), f"[{label}] every step on the job stream")

    waited = await call_tool("wait_for_job", {"job_id": handle["job_id"], "timeout_seconds": 10})
    check(text_of(waited) == "counted to 30", f"[{label}] wait_for_job returns the result: {text_of(waited)!r}")
    check(waited.structured_content == {"counted": 30}, f"[{label}] with the structured content")

    unknown = await call_tool("get_job_status", {"job_id": "0" * 32})
    check(unknown.is_error, f"[{label}] an unknown job is a tool error")


async def main(url):
    async with Client(url) as client:
        await exercise(client.call_tool, client.list_tools, "Client")

    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            print(f"negotiated protocol {init.protocol_version}", flush=True)
            check(init.server_info.name == "mcp-progress-bridge", "serverInfo names the bridge")
            await exercise(session.call_tool, session.list_tools, "ClientSession")
    print("all checks passed", flush=True)


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(sys.argv[1]), timeout=120))
