"""Follow a job's event stream (the `events_url` of a bridge job handle) with the standard
library only, as a backend or a script would. Reconnects after a dropped connection with
Last-Event-ID, so no step is lost or repeated, and stops at the terminal event.

    for event, data in follow(handle["events_url"]):
        print(event, data)
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

TERMINAL = ("completed", "failed", "cancelled")


def follow(events_url: str, *, max_failures: int = 30) -> Iterator[tuple[str, dict]]:
    """Yield (event, data) for every event of the job until and including its terminal event.

    events_url is used exactly as the handle gave it: it may carry a capability token
    (`?token=`). Raises RuntimeError when the stream is refused (unknown or expired job, wrong
    token) or cannot be reached again after max_failures attempts.
    """
    last_id: str | None = None
    retry_s = 1.0
    failures = 0
    while True:
        request = urllib.request.Request(events_url, headers={"Accept": "text/event-stream"})
        if last_id is not None:
            request.add_header("Last-Event-ID", last_id)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                failures = 0
                event, data, seen_id = "message", [], None
                for raw in response:
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if line == "":
                        if seen_id is not None:
                            last_id = seen_id
                        if data:
                            payload = json.loads("\n".join(data))
                            yield event, payload
                            if event in TERMINAL:
                                return
                        event, data, seen_id = "message", [], None
                    elif line.startswith(":"):
                        continue
                    else:
                        field, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if field == "event":
                            event = value
                        elif field == "data":
                            data.append(value)
                        elif field == "id":
                            seen_id = value
                        elif field == "retry" and value.isdigit():
                            retry_s = int(value) / 1000
        except urllib.error.HTTPError as error:
            raise RuntimeError(
                f"{events_url}: HTTP {error.code}: the job is unknown or expired, or the token is wrong"
            ) from error
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            failures += 1
            if failures > max_failures:
                raise RuntimeError(f"lost {events_url} and could not get it back: {error}") from error
        # The stream ended without a terminal event, or broke: resume after the last event seen.
        time.sleep(retry_s)


def describe(event: str, data: dict) -> str | None:
    """One line for a person, or None for events not worth a line."""
    if event in ("status", "reset"):
        return f"[{event}] job {data.get('job_id')} is {data.get('status')}"
    if event == "progress":
        total = data.get("total")
        amount = f"{data['progress']:g}/{total:g}" if total is not None else f"{data['progress']:g}"
        message = data.get("message") or ""
        return f"[progress] {amount} {message}".rstrip()
    if event == "log":
        return f"[log {data.get('level')}] {data.get('data')}"
    if event == "heartbeat":
        return f"[heartbeat] still running, no progress for {data.get('since_progress_ms', 0) / 1000:.0f} s"
    if event in TERMINAL:
        return f"[{event}] {data.get('message') or data.get('reason') or ''}".rstrip()
    return None


def job_handle(mcp_call_item) -> dict | None:
    """The bridge's job handle in an `mcp_call` output item (a dict, or the OpenAI SDK's object):
    its `output` is the tool's text, which for a bridge job is the handle as JSON. None when
    the tool answered directly or failed."""
    get = mcp_call_item.get if isinstance(mcp_call_item, dict) else lambda k: getattr(mcp_call_item, k, None)
    if get("error"):
        return None
    try:
        value = json.loads(get("output") or "")
    except json.JSONDecodeError:
        return None
    if isinstance(value, dict) and "job_id" in value and "events_url" in value:
        return value
    return None


def show_job(events_url: str, prefix: str = "    ") -> None:
    """Print a line per event of the job for the user (after `prefix`), until its terminal
    event."""
    for event, data in follow(events_url):
        line = describe(event, data)
        if line:
            print(f"{prefix}{line}", flush=True)
        if event in TERMINAL:
            return
