"""A stand-in for Azure AI Foundry's side of a Responses API run, for the Agent Framework example
(examples/foundry/agent_framework_agent.py) in tests/it/foundry.rs: the real framework and its
Foundry client talk to this server instead of Azure.

What it does as the platform does (docs of the Responses API's `mcp` tool): it calls each hosted
MCP server itself, with the tool's `headers`, over Streamable HTTP, with NO progress token; it
lists the tools (an `mcp_list_tools` item) and keeps `allowed_tools`; a call that
`require_approval` covers ends the response with an `mcp_approval_request`, and runs when a later
request answers it; each call is an `mcp_call` item whose `output` is the tool's text. The model
is script.py's ScriptedModel, not an LLM. Each request's `mcp` tools and each call are printed
(TOOLS …, CALL …) for the test to check.

    python foundry_platform.py --port N    # serves POST …/openai/v1/responses on 127.0.0.1:N
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

from aiohttp import web
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from script import ScriptedModel

# Approval requests not answered yet: id -> (the model, the tool config, the tool, its arguments).
PENDING: dict[str, tuple[ScriptedModel, dict, str, dict]] = {}


def needs_approval(tool: dict, name: str) -> bool:
    rule = tool.get("require_approval", "always")
    if isinstance(rule, str):
        return rule != "never"
    if name in rule.get("never", {}).get("tool_names", []):
        return False
    if name in rule.get("always", {}).get("tool_names", []):
        return True
    return "always" not in rule


def tool_text(result) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


class Run:
    """One response: its items, streamed as Responses API events."""

    def __init__(self, body: dict) -> None:
        self.id = f"resp_{uuid.uuid4().hex}"
        self.body = body
        self.output: list[dict] = []
        self.events: asyncio.Queue[dict | None] = asyncio.Queue()
        self.seq = 0

    def emit(self, kind: str, **fields) -> None:
        self.events.put_nowait({"type": kind, "sequence_number": self.seq, **fields})
        self.seq += 1

    def response(self, status: str) -> dict:
        return {
            "id": self.id, "object": "response", "created_at": int(time.time()), "status": status,
            "model": self.body.get("model"), "output": self.output, "tools": self.body.get("tools", []),
            "parallel_tool_calls": True, "tool_choice": "auto", "error": None,
            "incomplete_details": None, "instructions": None, "metadata": {},
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }

    def add(self, item: dict) -> None:
        """An item that is whole at once: added and done."""
        index = len(self.output)
        self.output.append(item)
        self.emit("response.output_item.added", output_index=index, item=item)
        self.emit("response.output_item.done", output_index=index, item=item)

    def say(self, text: str) -> None:
        item_id = f"msg_{uuid.uuid4().hex[:12]}"
        index = len(self.output)
        item = {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}
        self.emit("response.output_item.added", output_index=index, item=item)
        self.emit("response.output_text.delta", item_id=item_id, output_index=index, content_index=0,
                  delta=text, logprobs=[])
        done = {**item, "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}
        self.output.append(done)
        self.emit("response.output_item.done", output_index=index, item=done)


async def play(run: Run) -> None:
    """The platform's loop for one request, to the final text or an approval request."""
    run.emit("response.created", response=run.response("in_progress"))
    tool = next(t for t in run.body.get("tools", []) if t.get("type") == "mcp")
    print(f"TOOLS {json.dumps(tool, sort_keys=True)}", flush=True)
    model, last, call = ScriptedModel(), None, None
    for item in run.body.get("input", []) if isinstance(run.body.get("input"), list) else []:
        if item.get("type") == "mcp_approval_response" and item.get("approval_request_id") in PENDING:
            model, _, name, arguments = PENDING.pop(item["approval_request_id"])
            if not item.get("approve"):
                run.say("The call was not approved.")
                return
            call = (name, arguments)
    headers = tool.get("headers") or {}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(tool["server_url"], http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = (await session.list_tools()).tools
        allowed = tool.get("allowed_tools")
        kept = [t for t in listed if allowed is None or t.name in allowed]
        run.add({"type": "mcp_list_tools", "id": f"mcpl_{uuid.uuid4().hex[:12]}",
                 "server_label": tool["server_label"], "error": None,
                 "tools": [{"name": t.name, "description": t.description, "input_schema": t.input_schema,
                            "annotations": None} for t in kept]})
        while True:
            if call is None:
                step = model.next(last)
                if step[0] == "final":
                    run.say(step[1])
                    return
                _, name, arguments = step
                if name not in {t.name for t in kept}:
                    raise RuntimeError(f"the model called {name}, which allowed_tools does not keep")
                if needs_approval(tool, name):
                    request_id = f"mcpr_{uuid.uuid4().hex[:12]}"
                    PENDING[request_id] = (model, tool, name, arguments)
                    run.add({"type": "mcp_approval_request", "id": request_id,
                             "server_label": tool["server_label"], "name": name,
                             "arguments": json.dumps(arguments)})
                    return
                call = (name, arguments)
            name, arguments = call
            call = None
            print(f"CALL {name} {json.dumps(arguments)}", flush=True)
            item = {"type": "mcp_call", "id": f"mcp_{uuid.uuid4().hex[:12]}", "server_label": tool["server_label"],
                    "name": name, "arguments": json.dumps(arguments), "output": None, "error": None,
                    "status": "in_progress"}
            index = len(run.output)
            run.output.append(item)
            run.emit("response.output_item.added", output_index=index, item=item)
            # As Foundry calls a tool: no progress callback, so no progressToken.
            result = await session.call_tool(name, arguments)
            last = tool_text(result)
            run.output[index] = {**item, "output": last, "status": "completed",
                                 "error": last if result.is_error else None}
            run.emit("response.output_item.done", output_index=index, item=run.output[index])


async def responses(request: web.Request) -> web.StreamResponse:
    run = Run(await request.json())

    async def drive() -> None:
        try:
            await play(run)
            run.emit("response.completed", response=run.response("completed"))
        except Exception as error:  # the test reads it on stdout and in the failed response
            print(f"PLATFORM ERROR {error!r}", flush=True)
            failed = run.response("failed")
            failed["error"] = {"code": "server_error", "message": str(error)}
            run.emit("response.failed", response=failed)
        run.events.put_nowait(None)

    task = asyncio.create_task(drive())
    if not run.body.get("stream"):
        await task
        return web.json_response(run.response("completed"))
    stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await stream.prepare(request)
    while (event := await run.events.get()) is not None:
        await stream.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
    await task
    return stream


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_post("/{tail:.*}/responses", responses)
    web.run_app(app, host="127.0.0.1", port=args.port, print=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
