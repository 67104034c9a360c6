"""A Responses API call with the bridge as an MCP tool, streamed, with live job progress.

The model calls a slow tool through the bridge; the platform streams only lifecycle events for
it (`response.mcp_call.in_progress` / `.completed`), but the `mcp_call` output item carries the
tool's text output, which is the bridge's job handle. This program picks the handle out of it
and follows `events_url`, so the user sees every step while the model waits (`wait_for_job`).

    pip install -r requirements.txt
    export OPENAI_BASE_URL=https://<resource>.openai.azure.com/openai/v1/   # Azure (or unset: OpenAI)
    export OPENAI_API_KEY=...            # the resource's key
    export MODEL=gpt-4.1                 # your deployment name
    export BRIDGE_URL=https://bridge.example.com   # reachable from Azure's cloud, not localhost
    export BRIDGE_TOKEN=...              # one of the bridge's [auth] mcp_tokens
    python agent.py "Count to 20 slowly with the demo tool, then tell me the result."
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import uuid

from openai import OpenAI

from follow import job_handle, show_job

# The bridge's own job tools only read or stop jobs: no approval needed for them. Every other
# tool is approved by the user (require_approval defaults to "always" in Foundry).
JOB_TOOLS = ["get_job_status", "wait_for_job", "cancel_job"]


def mcp_tool(bridge_url: str, token: str | None, correlation_id: str, tools: list[str]) -> dict:
    headers = {"X-Correlation-Id": correlation_id}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return {
        "type": "mcp",
        "server_label": "bridge",
        "server_url": bridge_url.rstrip("/") + "/mcp",
        "headers": headers,
        "allowed_tools": tools + JOB_TOOLS,
        "require_approval": {"never": {"tool_names": JOB_TOOLS}},
    }


def run_turn(client: OpenAI, model: str, tool: dict, prompt: str, assume_yes: bool) -> None:
    request = {"model": model, "tools": [tool], "input": prompt}
    watchers: list[threading.Thread] = []
    while True:
        approvals = []
        response_id = None
        with client.responses.stream(**request) as stream:
            for event in stream:
                if event.type == "response.created":
                    response_id = event.response.id
                elif event.type == "response.output_text.delta":
                    print(event.delta, end="", flush=True)
                elif event.type == "response.mcp_call.in_progress":
                    print("\n[tool call running]", flush=True)
                elif event.type == "response.output_item.done":
                    item = event.item
                    if item.type == "mcp_call":
                        handle = job_handle(item)
                        if handle:
                            print(f"\n[job {handle['job_id']}: following its progress]", flush=True)
                            watcher = threading.Thread(target=show_job, args=(handle["events_url"], "\n    "), daemon=True)
                            watcher.start()
                            watchers.append(watcher)
                    elif item.type == "mcp_approval_request":
                        approvals.append(item)
        if not approvals:
            break
        # The platform stops and asks before calling a tool that needs approval.
        answers = []
        for item in approvals:
            ok = assume_yes or input(f"\nAllow {item.name}({item.arguments})? [y/N] ").strip().lower() == "y"
            answers.append({"type": "mcp_approval_response", "approval_request_id": item.id, "approve": ok})
        request = {"model": model, "tools": [tool], "previous_response_id": response_id, "input": answers}
    for watcher in watchers:
        watcher.join(timeout=600)
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt", nargs="?", default="Count to 15 with demo__slow_count, then tell me the result.")
    parser.add_argument("--tool", action="append", default=None, help="a bridge tool the model may call (repeatable)")
    parser.add_argument("--yes", action="store_true", help="approve every tool call without asking")
    args = parser.parse_args()
    bridge = os.environ.get("BRIDGE_URL")
    model = os.environ.get("MODEL")
    if not bridge or not model:
        print("set BRIDGE_URL (the bridge's public URL) and MODEL (the deployment name)", file=sys.stderr)
        return 2
    correlation_id = f"turn-{uuid.uuid4().hex[:12]}"
    tool = mcp_tool(bridge, os.environ.get("BRIDGE_TOKEN"), correlation_id, args.tool or ["demo__slow_count"])
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    print(f"[correlation {correlation_id}: every job of this turn streams at {bridge}/correlations/{correlation_id}/events]")
    run_turn(client, model, tool, args.prompt, args.yes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
