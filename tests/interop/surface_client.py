"""What an MCP client sees of a server, as JSON, with the official Python SDK: capabilities,
tools, resources (and what reading each gives), resource templates, prompts (and what getting
each gives), and completions. The Rust tests run it once against an upstream directly and once
through the bridge, and compare the two item by item (tests/it/interop_surface.rs).

Usage: surface_client.py TARGET MODE [--read-limit N]
  TARGET  http://…/mcp, or "stdio:" followed by a JSON array [command, arg, …]
  MODE    legacy (the initialize handshake, the SDK's newest handshake revision),
          legacy:REVISION (the handshake at that revision, e.g. legacy:2025-06-18), or
          2026-07-28 (no handshake, per-request metadata)
"""

import asyncio
import hashlib
import json
import re
import sys

import mcp.client.session as client_session
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference, ResourceTemplateReference


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def digest(contents):
    """A resource's contents, with text and blobs as length and hash (they can be large)."""
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
    if isinstance(e, MCPError):
        return {"error": e.error.code, "message": e.error.message}
    return {"error": type(e).__name__, "message": str(e)}


def sample_arguments(prompt):
    """Arguments to get a prompt with: every required one set to a plain value."""
    return {a.name: "1" for a in (prompt.arguments or []) if a.required}


async def surface(client, read_limit):
    caps = client.server_capabilities
    out = {
        "protocol": client.protocol_version,
        "capabilities": sorted(k for k, v in dump(caps).items() if v is not None),
        "resources_subscribe": bool(caps.resources and caps.resources.subscribe),
    }
    tools = (await client.list_tools()).tools
    out["tools"] = sorted(
        [{"name": t.name, "output_schema": t.output_schema is not None} for t in tools],
        key=lambda t: t["name"],
    )
    if caps.resources:
        resources = (await client.list_resources()).resources
        out["resources"] = sorted((dump(r) for r in resources), key=lambda r: r["uri"])
        reads = {}
        for r in resources[:read_limit]:
            try:
                reads[r.uri] = digest((await client.read_resource(r.uri)).contents)
            except Exception as e:  # an error is part of what the client sees
                reads[r.uri] = error_of(e)
        out["reads"] = reads
        templates = (await client.list_resource_templates()).resource_templates
        out["templates"] = sorted((dump(t) for t in templates), key=lambda t: t["uriTemplate"])
    if caps.prompts:
        prompts = (await client.list_prompts()).prompts
        out["prompts"] = sorted((dump(p) for p in prompts), key=lambda p: p["name"])
        gets = {}
        for p in prompts:
            try:
                gets[p.name] = dump(await client.get_prompt(p.name, sample_arguments(p)))
            except Exception as e:
                gets[p.name] = error_of(e)
        out["prompt_gets"] = gets
    if caps.completions:
        completions = {}
        for p in out.get("prompts", []):
            for a in p.get("arguments", []):
                key = f"prompt {p['name']} {a['name']}"
                try:
                    result = await client.complete(PromptReference(name=p["name"]), {"name": a["name"], "value": ""})
                    completions[key] = result.completion.values
                except Exception as e:
                    completions[key] = error_of(e)
        for t in out.get("templates", []):
            for var in re.findall(r"\{[+#./;?&]?([A-Za-z0-9_]+)", t["uriTemplate"]):
                key = f"template {t['uriTemplate']} {var}"
                try:
                    result = await client.complete(
                        ResourceTemplateReference(uri=t["uriTemplate"]), {"name": var, "value": ""}
                    )
                    completions[key] = result.completion.values
                except Exception as e:
                    completions[key] = error_of(e)
        out["completions"] = completions
    return out


def client_for(target, mode):
    if target.startswith("stdio:"):
        command = json.loads(target[len("stdio:"):])
        server = StdioServerParameters(command=command[0], args=command[1:])
    else:
        server = target
    if mode.startswith("legacy:"):
        # The SDK offers its newest handshake revision; an older client offers an older one.
        client_session.LATEST_HANDSHAKE_VERSION = mode[len("legacy:"):]
        mode = "legacy"
    if mode == "2026-07-28":
        # "auto" discovers the server (server/discover) and adopts 2026-07-28 when it is
        # offered; a pinned version would skip discovery and know no capabilities.
        mode = "auto"
    return Client(server, mode=mode)


async def main(target, mode, read_limit):
    async with client_for(target, mode) as client:
        print(json.dumps(await surface(client, read_limit), indent=1, sort_keys=True))


if __name__ == "__main__":
    limit = 50
    if "--read-limit" in sys.argv:
        limit = int(sys.argv[sys.argv.index("--read-limit") + 1])
    asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2], limit), timeout=120))
