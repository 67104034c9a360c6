"""The same agent on the Microsoft Agent Framework: a Foundry chat client, the bridge as a hosted
MCP tool (Foundry calls it, not this program), the run streamed, and live job progress.

Foundry passes no MCP progress on: the run's stream carries the `mcp_call` item, whose output is
the tool's text, the bridge's job handle. The framework hands it over as an
`mcp_server_tool_result` content; this program picks the handle out of it and follows
`events_url` while the model calls `wait_for_job`.

    pip install -r requirements.txt
    export FOUNDRY_PROJECT_ENDPOINT=https://<resource>.services.ai.azure.com/api/projects/<project>
    export FOUNDRY_MODEL=gpt-4.1               # your deployment name
    export BRIDGE_URL=https://bridge.example.com   # reachable from Azure's cloud, not localhost
    export BRIDGE_TOKEN=...                    # one of the bridge's [auth] mcp_tokens
    az login                                   # the credential (DefaultAzureCredential)
    python agent_framework_agent.py "Count to 20 slowly with the demo tool, then tell me the result."
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
import uuid

from agent_framework import Agent, Message
from agent_framework.foundry import FoundryChatClient
from azure.core.credentials import AccessToken

from follow import job_handle, show_job

# The bridge's own job tools only read or stop a job the user already approved: no approval for
# them. Every other tool is approved by the user (Foundry's default is "always").
JOB_TOOLS = ["get_job_status", "wait_for_job", "cancel_job"]


class StaticToken:
    """A credential with a fixed bearer token (FOUNDRY_STATIC_TOKEN), for a gateway or a local
    stand-in of the platform; Azure itself takes DefaultAzureCredential."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def get_token(self, *scopes, **kwargs) -> AccessToken:
        return AccessToken(self.token, int(time.time()) + 3600)

    async def close(self) -> None:
        pass


def credential():
    if token := os.environ.get("FOUNDRY_STATIC_TOKEN"):
        return StaticToken(token)
    from azure.identity.aio import DefaultAzureCredential

    return DefaultAzureCredential()


def bridge_tool(client: FoundryChatClient, args: argparse.Namespace, correlation_id: str):
    headers = {"X-Correlation-Id": correlation_id}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    return client.get_mcp_tool(
        name="bridge",
        url=args.bridge.rstrip("/") + "/mcp",
        headers=headers,
        allowed_tools=args.tools + JOB_TOOLS,
        approval_mode={"never_require_approval": JOB_TOOLS},
    )


async def run_turn(agent: Agent, prompt: str, assume_yes: bool) -> str:
    """One user turn: stream the run, follow each job handle, answer approvals, until the model
    has its final text."""
    session = agent.create_session()
    request: str | list[Message] = prompt
    watchers: list[threading.Thread] = []
    while True:
        approvals, text = [], []
        async for update in agent.run(request, session=session, stream=True):
            for content in update.contents:
                if content.type == "function_approval_request":
                    approvals.append(content)
                elif content.type == "mcp_server_tool_result":
                    output = "".join(c.text or "" for c in content.output or [] if c.type == "text")
                    handle = job_handle({"output": output})
                    if handle:
                        print(f"[job {handle['job_id']}] following {handle['events_url']}", flush=True)
                        watcher = threading.Thread(target=show_job, args=(handle["events_url"],))
                        watcher.start()
                        watchers.append(watcher)
                elif content.type == "text" and content.text:
                    text.append(content.text)
        if not approvals:
            break
        answers = []
        for approval in approvals:
            call = approval.function_call
            yes = assume_yes or input(f"allow {call.name}({call.arguments})? [y/N] ").strip().lower() == "y"
            print(f"[approval] {call.name}: {'approved' if yes else 'denied'}", flush=True)
            answers.append(approval.to_function_approval_response(approved=yes))
        request = [Message(role="user", contents=answers)]
    for watcher in watchers:
        watcher.join()
    final = "".join(text)
    print(f"\n{final}", flush=True)
    return final


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt", nargs="?", default="Count to 20 slowly with the demo tool, then tell me the result.")
    parser.add_argument("--bridge", default=os.environ.get("BRIDGE_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--token", default=os.environ.get("BRIDGE_TOKEN"), help="bearer token for /mcp")
    parser.add_argument("--tools", nargs="+", default=["demo__slow_count"], help="tools the model may call")
    parser.add_argument("--yes", action="store_true", help="approve every tool call without asking")
    args = parser.parse_args()
    client = FoundryChatClient(
        project_endpoint=os.environ.get("FOUNDRY_PROJECT_ENDPOINT"),
        model=os.environ.get("FOUNDRY_MODEL"),
        credential=credential(),
    )
    tool = bridge_tool(client, args, f"turn-{uuid.uuid4().hex[:8]}")
    agent = Agent(client=client, name="bridge-agent", tools=[tool],
                  instructions="Use the tools. When a tool answers with a job handle, follow its instructions.")
    final = await run_turn(agent, args.prompt, args.yes)
    return 0 if final else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
