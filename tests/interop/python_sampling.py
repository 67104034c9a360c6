"""An upstream's sampling and roots answered by the waiting 2026-07-28 caller: the official MCP
Python SDK (2.x) `Client` with a sampling callback and a roots callback calls the demo tools
`sample` and `roots` through the bridge (configured sync). At 2026-07-28 the bridge cannot send
the client a request during the call: it answers with `input_required` (the request in
`inputRequests`), and the SDK answers it with its callback and retries the call.

Usage: python_sampling.py MCP_URL

  1. a Client with both callbacks (it declares sampling and roots): the tool gets its sample
     and its roots;
  2. a Client without them (it declares neither): the sample is refused, the roots are none.
Exits non-zero on the first failure.
"""

import asyncio
import sys

from mcp import Client, types


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", flush=True)
        sys.exit(1)
    print(f"ok: {message}", flush=True)


def text_of(result):
    return next((c.text for c in result.content if getattr(c, "type", "") == "text"), "")


async def main(url):
    prompts = []
    roots_asked = []

    async def sampling(context, params):
        prompts.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="hello from python"),
            model="python-test-model",
        )

    async def list_roots(context):
        roots_asked.append(True)
        return types.ListRootsResult(roots=[types.Root(uri="file:///python/work")])

    async with Client(url, sampling_callback=sampling, list_roots_callback=list_roots) as client:
        print(f"negotiated protocol {client.protocol_version}", flush=True)
        check(client.protocol_version == "2026-07-28", "the Client speaks 2026-07-28")
        result = await client.call_tool("demo__sample", {"prompt": "Say hello"})
        check(
            text_of(result) == "the model said: hello from python",
            f"[Client] the sampling callback answered: {text_of(result)!r}",
        )
        check(prompts == ["Say hello"], f"[Client] the callback saw the prompt: {prompts}")
        result = await client.call_tool("demo__roots", {})
        check(text_of(result) == "roots: file:///python/work", f"[Client] the roots callback answered: {text_of(result)!r}")
        check(roots_asked == [True], "[Client] the roots callback was asked once")

    async with Client(url) as client:
        result = await client.call_tool("demo__sample", {"prompt": "Say hello"})
        check(
            "sampling is not available" in text_of(result),
            f"[no callbacks] the sample is refused: {text_of(result)!r}",
        )
        result = await client.call_tool("demo__roots", {})
        check(text_of(result) == "roots: none", f"[no callbacks] the roots are none: {text_of(result)!r}")
    print("all checks passed", flush=True)


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(sys.argv[1]), timeout=90))
