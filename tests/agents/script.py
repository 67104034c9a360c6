"""What every agent test here shares: a scripted model that does what the bridge's answers say,
and an application that follows the bridge's SSE channels.

The scripted model stands in for an LLM and is obedient: it calls the slow tool, reads the text
of each tool result, calls `wait_for_job` when the result is a job handle or says the job is still
running, calls it again when a wait failed on the client's own timeout ("timed out"), and ends the
turn with the tool's real result. Each framework's script wraps it in that framework's model type.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import re
import threading
import urllib.request

SLOW_TOOL = "demo__slow_count"
SLOW_ARGS = {"to": 40, "delay_ms": 500}
RESULT = "counted to 40"
# The same result as a client that prefers `structuredContent` shows it.
RESULT_STRUCTURED = '"counted": 40'
PROMPT = "Count to 40 slowly with the demo tool, then tell me the result."
# The most tool calls one turn may make: a loop that never ends fails instead.
MAX_STEPS = 60

JOB_ID = re.compile(r'"?job_id"?\s*[:=]\s*\\?"([0-9a-f]{32})')


class ScriptedModel:
    """Decides the next step from the last tool output (its text, as the framework gives it)."""

    def __init__(self) -> None:
        self.job_id: str | None = None
        self.steps = 0
        self.timeouts = 0
        self.waits = 0
        self.instructions: list[str] = []

    def next(self, last_output: str | None) -> tuple[str, str, dict] | tuple[str, str]:
        """("call", tool, args) or ("final", text)."""
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise RuntimeError(f"no result after {MAX_STEPS} steps")
        if last_output is None:
            return ("call", SLOW_TOOL, dict(SLOW_ARGS))
        if RESULT in last_output or RESULT_STRUCTURED in last_output:
            return ("final", f"The tool says: {RESULT}.")
        found = JOB_ID.search(last_output)
        if found:
            self.job_id = found.group(1)
        lowered = last_output.lower()
        if "timed out" in lowered or "timeout" in lowered or "try again" in lowered:
            self.timeouts += 1
        elif "wait_for_job" not in last_output:
            raise RuntimeError(f"the model does not know what to do with: {last_output[:500]}")
        if self.job_id is None:
            raise RuntimeError(f"no job_id to wait for in: {last_output[:500]}")
        said = re.search(r"each call waits up to [0-9.]+ s", last_output)
        if said:
            self.instructions.append(said.group(0))
        self.waits += 1
        return ("call", "wait_for_job", {"job_id": self.job_id})

    def summary(self) -> str:
        return (
            f"steps={self.steps} waits={self.waits} timeouts={self.timeouts} "
            f"instructions={sorted(set(self.instructions))}"
        )


class Channel:
    """An SSE channel of the bridge (a job's or a correlation's events_url) read in a thread:
    its events, parsed, arrive on a queue."""

    def __init__(self, url: str) -> None:
        self.events: queue.Queue[tuple[str, dict]] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(url,), daemon=True)
        self._thread.start()

    def _read(self, url: str) -> None:
        request = urllib.request.Request(url, headers={"Accept": "text/event-stream"})
        with urllib.request.urlopen(request, timeout=120) as stream:
            event, data = "message", []
            for raw in stream:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line == "":
                    if data:
                        self.events.put((event, json.loads("\n".join(data))))
                    event, data = "message", []
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())

    def until(self, wanted, limit: float = 90.0) -> list[tuple[str, dict]]:
        """Events up to and including the first for which `wanted(event, data)` holds."""
        seen = []
        while True:
            event, data = self.events.get(timeout=limit)
            seen.append((event, data))
            if wanted(event, data):
                return seen


TERMINAL = ("completed", "failed", "cancelled")


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"CHECK FAILED: {what}")
    print(f"ok: {what}", flush=True)


async def cancel_at_first_progress(channel: Channel, run: asyncio.Task) -> None:
    """Cancel the agent's run once its job shows progress, and let the run end."""
    await asyncio.to_thread(channel.until, lambda e, d: e == "progress")
    run.cancel()
    try:
        await run
    except asyncio.CancelledError:
        pass


async def report_cancel(channel: Channel) -> None:
    """Print how the job ended after its run was cancelled, for the test to compare with
    docs/agents.md."""
    seen = await asyncio.to_thread(channel.until, lambda e, d: e in TERMINAL, 60)
    print(f"CANCEL {seen[-1][0]}", flush=True)


async def run_turns(result_turn, cancel_turn) -> None:
    """The scripts' command line: a turn that must reach the result, then one cancelled."""
    parser = argparse.ArgumentParser()
    for name in ("mcp", "result-cid", "result-events", "cancel-cid", "cancel-events"):
        parser.add_argument(f"--{name}", required=True)
    a = parser.parse_args()
    await result_turn(a.mcp, a.result_cid, a.result_events)
    await cancel_turn(a.mcp, a.cancel_cid, a.cancel_events)
    print("all checks passed", flush=True)
