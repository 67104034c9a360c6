"""A tool's question answered by the waiting caller: the official MCP Python SDK (2.x) with an
elicitation callback calls the demo tool `ask` through the bridge (configured sync).

Usage: python_elicit.py MCP_URL

  1. the handshake-era ClientSession (initialize; the bridge sends `elicitation/create` on the
     call's own stream, the SDK's callback answers it);
  2. the default Client (it negotiates its own revision: at 2026-07-28 the bridge answers the
     call with `input_required` and the SDK retries it with the answer);
  3. a ClientSession without a callback (it declares no elicitation): the question is not
     sent to it; nobody answers the job, so it is declined after jobs.input_timeout_secs.
Exits non-zero on the first failure.
"""

import asyncio
import sys

from mcp import Client, types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", flush=True)
        sys.exit(1)
    print(f"ok: {message}", flush=True)


def text_of(result):
    return next((c.text for c in result.content if getattr(c, "type", "") == "text"), "")


def answering(name, asked):
    async def callback(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": name})

    return callback


async def main(url):
    asked = []
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write, elicitation_callback=answering("Grace", asked)) as session:
            init = await session.initialize()
            print(f"negotiated protocol {init.protocol_version}", flush=True)
            result = await session.call_tool("demo__ask", {"question": "Who are you?"})
            check(text_of(result) == "you said: Grace", f"[ClientSession] the callback answered: {text_of(result)!r}")
            check(asked == ["Who are you?"], f"[ClientSession] the callback saw the question: {asked}")

    asked = []
    async with Client(url, elicitation_callback=answering("Ada", asked)) as client:
        result = await client.call_tool("demo__ask", {"question": "And you?"})
        check(text_of(result) == "you said: Ada", f"[Client] the callback answered: {text_of(result)!r}")
        check(asked == ["And you?"], f"[Client] the callback saw the question: {asked}")

    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("demo__ask", {})
            check(text_of(result) == "no answer: declined", f"[no callback] declined after the timeout: {text_of(result)!r}")
    print("all checks passed", flush=True)


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(sys.argv[1]), timeout=90))
