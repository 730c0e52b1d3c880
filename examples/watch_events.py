"""Print a run's monitored events as they open, following the API's live stream.

Shows the pattern the console uses (docs/console.md, "Live updates"): follow
``GET /v1/machineLearningRuns/{run}:watch`` (server-sent events), and on each hint that the
run's events changed (and on ``ready``, which also follows every reconnection) read the
run's events, ``GET /v1/machineLearningRuns/{run}/monitoredEvents``, and print those not
seen yet. A hint is only a reason to read again, never the data, so nothing is missed when
hints are lost. Only httpx is needed (the SDK depends on it).

    export MLDIAG_API_URL=http://127.0.0.1:8080 MLDIAG_TOKEN=...
    python examples/watch_events.py RUN_ID            # until Ctrl-C
    python examples/watch_events.py RUN_ID --count 1  # exit after the first event

Each event is one line: its start time, type, state, severity and display name.
"""

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx

API_URL = os.environ.get("MLDIAG_API_URL", "http://127.0.0.1:8080").rstrip("/")
TOKEN = os.environ.get("MLDIAG_TOKEN", "")
RECONNECT_SECONDS = 2.0


def hints(client: httpx.Client, run_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The stream's ``(event, data)`` pairs, for as long as it stays open."""
    url = f"/v1/machineLearningRuns/{run_id}:watch"
    with client.stream("GET", url, timeout=httpx.Timeout(10.0, read=None)) as response:
        if response.status_code != 200:
            response.read()
            raise SystemExit(f"{url}: {response.status_code} {response.text}")
        event, data = "message", ""
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                data += line.partition(":")[2].strip()
            elif not line:  # a blank line ends one server-sent event
                if data:
                    yield event, json.loads(data)
                event, data = "message", ""


def events_of(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    """The run's events (the first page, newest first: enough for what just opened)."""
    response = client.get(f"/v1/machineLearningRuns/{run_id}/monitoredEvents")
    response.raise_for_status()
    found: list[dict[str, Any]] = response.json()["events"]
    return found


def main() -> None:
    """Follow one run and print each of its events once."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("--count", type=int, default=0, help="exit after N events (0: never)")
    args = parser.parse_args()
    seen: set[str] = set()
    headers = {"Authorization": f"Bearer {TOKEN}"} if TOKEN else {}
    with httpx.Client(base_url=API_URL, headers=headers, timeout=10.0) as client:
        while True:
            try:
                for kind, data in hints(client, args.run_id):
                    if kind == "ready":
                        print(f"watching {args.run_id}", flush=True)  # noqa: T201
                    elif data.get("kind") != "events":
                        continue
                    for event in reversed(events_of(client, args.run_id)):
                        if event["eventId"] in seen:
                            continue
                        seen.add(event["eventId"])
                        print(  # noqa: T201 (the example's output)
                            event["startTime"],
                            event["type"],
                            event["state"],
                            event["severity"],
                            event["displayName"],
                            flush=True,
                        )
                        if args.count and len(seen) >= args.count:
                            return
            except httpx.TransportError as exc:  # the server restarted: read again after
                print(f"stream lost ({exc}); reconnecting", file=sys.stderr, flush=True)  # noqa: T201
            time.sleep(RECONNECT_SECONDS)


if __name__ == "__main__":
    main()
