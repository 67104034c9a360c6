"""The MCP authorization flow, driven by the official MCP Python SDK's own OAuth support.

Usage: python_oauth_client.py MCP_URL ISSUER CLIENT_ID

The SDK's ClientCredentialsOAuthProvider does what a machine client (a managed identity) does:
its first request to MCP_URL has no token, so the bridge answers 401 with a
`resource_metadata` URL; the SDK reads the Protected Resource Metadata there (RFC 9728), takes
the authorization server it names, reads that server's metadata, gets a client-credentials
access token for the bridge's resource (RFC 8707 `resource`), and retries with it. Checks, in
order (exit status non-zero on the first failure):
  1. the session opens and lists the demo tools and the job tools;
  2. a tool call through the bridge returns the tool's result;
  3. the SDK asked the IdP for a token for exactly the resource the metadata names.
"""

import asyncio
import sys

import httpx2
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", flush=True)
        sys.exit(1)
    print(f"ok: {message}", flush=True)


class MemoryStorage:
    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


async def main(url, issuer, client_id):
    storage = MemoryStorage()
    auth = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=storage,
        client_id=client_id,
        client_secret=f"{client_id}-secret",
        issuer=issuer,
    )
    token_requests = []

    async def record(request):
        if request.url.path.endswith("/token"):
            token_requests.append(request.content.decode())

    async with httpx2.AsyncClient(auth=auth, timeout=30, event_hooks={"request": [record]}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                for name in ("demo__echo", "demo__slow_count", "wait_for_job"):
                    check(name in tools, f"tools/list has {name}")
                result = await session.call_tool("demo__echo", {"text": "hello over OAuth"})
                text = next((c.text for c in result.content if getattr(c, "type", "") == "text"), "")
                check(text == "hello over OAuth", f"a call returns the tool's result: {text!r}")
    check(storage.tokens is not None, "the SDK obtained an access token")
    resource = auth.context.protected_resource_metadata
    check(resource is not None and str(resource.resource) == url, f"the metadata names the resource {url}")
    check(
        any("resource=" in body for body in token_requests),
        f"the token request named the resource (RFC 8707): {token_requests}",
    )
    print("all checks passed", flush=True)


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(*sys.argv[1:4]), timeout=120))
