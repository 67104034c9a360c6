"""Play Azure AI Foundry's side of a conversation against a running bridge, over MCP, exactly as
the platform does (no Azure needed), and print what the user would see.

The platform, as an MCP client (the official Python SDK here):
  1. lists the tools (`response.mcp_list_tools`), keeps the `allowed_tools`;
  2. calls the tool WITHOUT a progress token (Foundry forwards no progress), with the headers
     configured on the `mcp` tool: the bearer token and an X-Correlation-Id;
  3. puts the tool's text output into an `mcp_call` output item: here, the job handle;
  4. the model reads the handle's instructions and calls wait_for_job until the result is in.
The application, meanwhile, picks the handle out of the `mcp_call` item and follows events_url:
that is the progress the user sees.

    python simulate.py --bridge http://127.0.0.1:8080 --tool demo__slow_count --args '{"to": 10}'

Exit status 0 when the job completed and both sides saw it end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import uuid

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from follow import TERMINAL, describe, follow, job_handle


def say(who: str, text: str) -> None:
    print(f"{who:>6} | {text}", flush=True)


def tool_text(result) -> str:
    """The text a platform passes on from a tool result: its text blocks, joined."""
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


async def agent_and_app(args: argparse.Namespace) -> int:
    headers = {"X-Correlation-Id": args.correlation_id}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    allowed_tools = [args.tool, "wait_for_job"]
    url = args.bridge.rstrip("/") + "/mcp"

    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = (await session.list_tools()).tools
        visible = [t.name for t in listed if t.name in allowed_tools]
        say("agent", f"mcp_list_tools: {len(listed)} tools, allowed_tools keeps {visible}")
        missing = set(allowed_tools) - set(visible)
        if missing:
            say("agent", f"the bridge does not offer {sorted(missing)}: check --tool")
            return 2

        # The call as Foundry makes it: no progress callback, so no progressToken.
        say("agent", f"mcp_call {args.tool} {json.dumps(args.arguments)}")
        result = await session.call_tool(args.tool, args.arguments)
        item = {
            "type": "mcp_call",
            "id": f"mcp_{uuid.uuid4().hex[:12]}",
            "server_label": "bridge",
            "name": args.tool,
            "arguments": json.dumps(args.arguments),
            "output": tool_text(result),
            "error": None,
        }
        handle = job_handle(item)
        if handle is None:
            say("agent", f"answered directly: {item['output']}")
            return 1 if result.is_error else 0
        say("app", f"mcp_call output item has job {handle['job_id']}: following {handle['events_url']}")

        # The application follows the job channel while the agent waits for the result.
        app = asyncio.create_task(asyncio.to_thread(show_progress, handle["events_url"]))
        final = await wait_for_result(session, handle["job_id"])
        ended = await app
        say("agent", f"wait_for_job returned: {final}")
        say("app", f"the user saw the job end: {ended}")
        return 0 if ended == "completed" else 1


def show_progress(events_url: str) -> str:
    """The application's side: print each event for the user; return how the job ended."""
    for event, data in follow(events_url):
        line = describe(event, data)
        if line:
            say("user", line)
        if event in TERMINAL:
            return event
    return "unknown"


async def wait_for_result(session: ClientSession, job_id: str) -> str:
    """The model's side: call wait_for_job until the job has ended (each call answers within
    the platform's limit)."""
    for _ in range(100):
        result = await session.call_tool("wait_for_job", {"job_id": job_id, "timeout_seconds": 20})
        body = result.structured_content or {}
        if body.get("status") == "running" and "instructions" in body:
            say("agent", f"wait_for_job: still running ({body.get('progress')}/{body.get('total')}), calling again")
            continue
        return tool_text(result)
    raise RuntimeError("the job did not end after 100 calls of wait_for_job")


def main() -> int:
    # At the end the SDK ends its session with DELETE; the bridge (rmcp) answers 202 where the
    # SDK expects 200, and the SDK logs a harmless "Session termination failed: 202".
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bridge", default=os.environ.get("BRIDGE_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--token", default=os.environ.get("BRIDGE_TOKEN"), help="bearer token for /mcp")
    parser.add_argument("--tool", default="demo__slow_count")
    parser.add_argument("--args", dest="arguments", type=json.loads, default={"to": 10, "delay_ms": 300})
    parser.add_argument("--correlation-id", default=f"turn-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args()
    try:
        return asyncio.run(agent_and_app(args))
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
