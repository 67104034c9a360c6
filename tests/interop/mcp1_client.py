"""The official MCP Python SDK 1.x (`ClientSession`) against a server: what it sees, as JSON, in
the shape surface_client.py prints (so tests/it/interop_surface.rs compares both alike), and the
output-schema scenario, which 1.x checks itself (it refuses a result without structured content
for a tool that has an output schema).

Usage: mcp1_client.py surface TARGET REVISION
       mcp1_client.py schema URL REVISION TOOL ARGS_JSON
  TARGET    http://…/mcp, or "stdio:" followed by a JSON array [command, arg, …]
  REVISION  the handshake revision the client offers (2025-03-26, 2025-06-18, 2025-11-25)
"""

import asyncio
import contextlib
import hashlib
import json
import re
import sys

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", flush=True)
        sys.exit(1)
    print(f"ok: {message}", flush=True)


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def digest(contents):
    out = []
    for c in contents:
        item = dump(c)
        for key in ("text", "blob"):
            if key in item:
                data = item.pop(key).encode()
                item[key] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        out.append(item)
    return out


def error_of(e):
    if isinstance(e, McpError):
        return {"error": e.error.code, "message": e.error.message}
    return {"error": type(e).__name__, "message": str(e)}


@contextlib.asynccontextmanager
async def session(target, revision):
    # The client offers the SDK's newest revision; an older client offers an older one.
    types.LATEST_PROTOCOL_VERSION = revision
    if target.startswith("stdio:"):
        command = json.loads(target[len("stdio:"):])
        transport = stdio_client(StdioServerParameters(command=command[0], args=command[1:]))
    else:
        transport = streamablehttp_client(target)
    async with transport as streams:
        async with ClientSession(streams[0], streams[1]) as s:
            init = await s.initialize()
            yield s, init


async def surface(target, revision):
    async with session(target, revision) as (s, init):
        caps = init.capabilities
        out = {
            "protocol": init.protocolVersion,
            "capabilities": sorted(k for k, v in dump(caps).items() if v is not None),
            "resources_subscribe": bool(caps.resources and caps.resources.subscribe),
        }
        tools = (await s.list_tools()).tools
        out["tools"] = sorted(
            [{"name": t.name, "output_schema": t.outputSchema is not None} for t in tools],
            key=lambda t: t["name"],
        )
        if caps.resources:
            resources = (await s.list_resources()).resources
            out["resources"] = sorted((dump(r) for r in resources), key=lambda r: r["uri"])
            out["reads"] = {}
            for r in resources[:50]:
                try:
                    out["reads"][str(r.uri)] = digest((await s.read_resource(r.uri)).contents)
                except Exception as e:
                    out["reads"][str(r.uri)] = error_of(e)
            templates = (await s.list_resource_templates()).resourceTemplates
            out["templates"] = sorted((dump(t) for t in templates), key=lambda t: t["uriTemplate"])
        if caps.prompts:
            prompts = (await s.list_prompts()).prompts
            out["prompts"] = sorted((dump(p) for p in prompts), key=lambda p: p["name"])
            out["prompt_gets"] = {}
            for p in prompts:
                args = {a.name: "1" for a in (p.arguments or []) if a.required}
                try:
                    out["prompt_gets"][p.name] = dump(await s.get_prompt(p.name, args))
                except Exception as e:
                    out["prompt_gets"][p.name] = error_of(e)
        if caps.completions:
            out["completions"] = {}
            for p in out.get("prompts", []):
                for a in p.get("arguments", []):
                    key = f"prompt {p['name']} {a['name']}"
                    try:
                        ref = types.PromptReference(type="ref/prompt", name=p["name"])
                        r = await s.complete(ref, {"name": a["name"], "value": ""})
                        out["completions"][key] = r.completion.values
                    except Exception as e:
                        out["completions"][key] = error_of(e)
            for t in out.get("templates", []):
                for var in re.findall(r"\{[+#./;?&]?([A-Za-z0-9_]+)", t["uriTemplate"]):
                    key = f"template {t['uriTemplate']} {var}"
                    try:
                        ref = types.ResourceTemplateReference(type="ref/resource", uri=t["uriTemplate"])
                        r = await s.complete(ref, {"name": var, "value": ""})
                        out["completions"][key] = r.completion.values
                    except Exception as e:
                        out["completions"][key] = error_of(e)
        print(json.dumps(out, indent=1, sort_keys=True))


async def schema(url, revision, tool, arguments):
    async with session(url, revision) as (s, init):
        check(init.protocolVersion == revision, f"negotiated {init.protocolVersion}")
        tools = {t.name: t for t in (await s.list_tools()).tools}
        check(tools[tool].outputSchema is not None, f"{tool} is listed with its output schema")
        try:
            await s.call_tool(tool, arguments, meta={"mcp-progress-bridge/mode": "async"})
            check(False, "a job handle was asked for a tool with an output schema")
        except McpError as e:
            check("output schema" in e.error.message and "sync" in e.error.message, f"mode async is refused with what to do: {e.error.message}")
        result = await s.call_tool(tool, arguments)
        check(not result.isError and result.structuredContent is not None, f"a plain call validates against the schema: {result.structuredContent}")
    print("all checks passed", flush=True)


async def main(argv):
    if argv[0] == "surface":
        await surface(argv[1], argv[2])
    elif argv[0] == "schema":
        await schema(argv[1], argv[2], argv[3], json.loads(argv[4]))
    else:
        check(False, f"unknown scenario {argv[0]}")


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(sys.argv[1:]), timeout=120))
