# The stack harness and the webhook receiver are imported from tests/ once that folder is on
# sys.path (below).
# ruff: noqa: E402
"""Alert latency, end to end: the detector opens an event → the webhook receives its
notification.

Run: ``.venv/bin/python benchmarks/alert_latency.py [--events N] [--gap SECONDS]
[--kind spike|nan]``

Stack: the whole platform as ``mldiag up --detach`` runs it, in a temporary home on free
ports (``tests/stacks.py``), with a webhook channel and a rule routing NUMERICAL_INSTABILITY
to a receiver in this process (``tests/e2e/webhook.py``, which checks every signature).

N runs (default 50) each write a loss that spikes (12 steady steps, then 100 times the median;
``--kind nan``: a NaN loss) through the edge, ``--gap`` seconds apart (default 0.2, so each
event is measured on its own, not behind a burst). The clock starts when the
detector published the event's ``WorkloadEventOpened`` (its envelope's ``occurred_at``, read
off the bus as the operator) and stops when the receiver has the OPENED notification. The
notifier holds an opened event's notification until its analysis arrives (usually tens of
milliseconds) or ``analysis_wait_seconds`` (0.5 s) passes, so the top cause travels with it.
Goal: p95 ≤ 1 s.
"""

import argparse
import asyncio
import json
import os
import platform
import secrets
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import nats
from _support import emit, percentile

from mldiag_schemas.analyses import AnalysisCompleted
from mldiag_schemas.events import WorkloadEventOpened

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS)]
from e2e.webhook import Receiver, webhook_receiver  # found through the path set above
from stacks import Stack, running_stack

GOAL_P95 = 1.0


class OpenedOnTheBus:
    """Every WorkloadEventOpened of the stack, by event id: when the detector published it
    (and when the analyzer published the event's analysis)."""

    def __init__(self, stack: Stack) -> None:
        kept = json.loads((stack.home / "secrets" / "substrate.json").read_text())
        self._url = str(stack.component("nats")["url"])
        self._password = kept["nats-operator"]
        self.published: dict[str, float] = {}
        self.analysed: dict[str, float] = {}
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._listen()), daemon=True)

    def __enter__(self) -> "OpenedOnTheBus":
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("could not subscribe to the stack's NATS")
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _listen(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        client = await nats.connect(self._url, user="operator", password=self._password)

        async def on_message(message: Any) -> None:
            opened = WorkloadEventOpened.model_validate_json(message.data)
            self.published[str(opened.event.event_id)] = opened.occurred_at.timestamp()

        async def on_analysis(message: Any) -> None:
            completed = AnalysisCompleted.model_validate_json(message.data)
            event_id = str(completed.analysis.event_id)
            self.analysed.setdefault(event_id, completed.occurred_at.timestamp())

        await client.subscribe("mldiag.events.workload.opened.*", cb=on_message)
        await client.subscribe("mldiag.analyses.analysis.completed.*", cb=on_analysis)
        await client.flush()
        self._ready.set()
        await self._stop.wait()
        await client.drain()


def _call(stack: Stack, method: str, path: str, body: Any = None, **params: str) -> Any:
    response = httpx.request(
        method, f"{stack.api}{path}", json=body, params=params, headers=stack.auth, timeout=10
    )
    if response.status_code >= 400:
        raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
    return response.json() if response.content else {}


def _route_to(stack: Stack, receiver: Receiver, suite: str) -> None:
    _call(
        stack,
        "POST",
        "/v1/notificationChannels",
        {
            "displayName": "latency bench",
            "kind": "WEBHOOK",
            "config": {"url": receiver.url},
            "secrets": {"signingSecret": receiver.secret},
        },
        channelId="bench",
    )
    # One event per run (no grouping), and no rate limit within the measurement.
    _call(
        stack,
        "POST",
        "/v1/alertRules",
        {
            "displayName": "latency bench",
            "channels": ["bench"],
            "eventTypes": ["NUMERICAL_INSTABILITY"],
            "minSeverity": "INFO",
            "labels": {"suite": suite},
            "notifyOnResolve": False,
            "maxPerHour": 10_000,
        },
        ruleId="bench",
    )


def _loss(kind: str) -> str:
    if kind == "nan":
        steps, values = [1, 2, 3], ["0.9", "nan", "0.8"]
    else:
        steps = list(range(1, 14))
        values = [repr(1.0 + step / 1000) for step in range(1, 13)] + ["100.0"]
    # A bare NaN, as the API takes it (json.dumps of a float NaN writes the same token).
    series = {
        "name": "loss",
        "host": "host-0",
        "steps": steps,
        "values": [float(v) for v in values],
    }
    return json.dumps({"series": [series]})


def _open_events(stack: Stack, suite: str, count: int, gap: float, kind: str) -> list[str]:
    runs = []
    for index in range(count):
        run_id = f"alert-bench-{suite}-{index}"
        _call(
            stack,
            "POST",
            "/v1/machineLearningRuns",
            {"runId": run_id, "displayName": run_id, "labels": {"suite": suite}},
        )
        runs.append(run_id)
    # The runs exist before the first write: the notifier knows them by then.
    time.sleep(1.0)
    text = _loss(kind)
    for run_id in runs:
        written = httpx.post(
            f"{stack.api}/v1/machineLearningRuns/{run_id}/metrics:write",
            content=text,
            headers=stack.auth,
            timeout=10,
        )
        if written.status_code != 202:
            raise RuntimeError(f"write to {run_id}: {written.status_code} {written.text}")
        time.sleep(gap)
    return runs


def _summary(samples: list[float]) -> str:
    if not samples:
        return "no samples"
    return (
        f"p50 {percentile(samples, 50) * 1000:.0f} ms, p95 {percentile(samples, 95) * 1000:.0f}"
        f" ms, max {max(samples) * 1000:.0f} ms (n={len(samples)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=50, help="events to open [50]")
    parser.add_argument("--gap", type=float, default=0.2, help="seconds between writes [0.2]")
    parser.add_argument("--timeout", type=float, default=60.0, help="wait for the last [60]")
    parser.add_argument("--kind", choices=("spike", "nan"), default="spike", help="[spike]")
    args = parser.parse_args()

    emit(f"# mldiag alert latency {datetime.now(UTC):%Y-%m-%d %H:%M}Z")
    emit(
        f"# machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()},"
        f" Python {platform.python_version()}"
    )
    emit(f"# command: .venv/bin/python benchmarks/alert_latency.py {' '.join(sys.argv[1:])}")
    suite = uuid.uuid4().hex[:8]
    started = time.monotonic()
    with (
        running_stack("mldiag-alert-bench-") as stack,
        webhook_receiver(secrets.token_urlsafe(24)) as receiver,
        OpenedOnTheBus(stack) as bus,
    ):
        emit(f"# stack up in {time.monotonic() - started:.1f} s at {stack.api}")
        _route_to(stack, receiver, suite)
        runs = set(_open_events(stack, suite, args.events, args.gap, args.kind))
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            with receiver.lock:
                opened = [
                    item
                    for item in receiver.received
                    if item.body.get("kind") == "OPENED"
                    and (item.body.get("run") or {}).get("runId") in runs
                ]
            if len(opened) >= len(runs):
                break
            time.sleep(0.1)
        latencies, analyses, unsigned, with_cause, unmatched = [], [], 0, 0, 0
        for item in opened:
            event_id = item.body["event"]["eventId"]
            published = bus.published.get(event_id)
            if published is None:
                unmatched += 1
                continue
            latencies.append(item.at - published)
            if event_id in bus.analysed:
                analyses.append(bus.analysed[event_id] - published)
            unsigned += not item.signed
            with_cause += item.body.get("topCause") is not None
        emit()
        emit("| figure | measured | goal |")
        emit("|---|---|---|")
        ok = bool(latencies) and percentile(latencies, 95) <= GOAL_P95
        emit(
            f"| event opened → notification received | {_summary(latencies)} |"
            f" p95 ≤ {GOAL_P95 * 1000:.0f} ms {'✓' if ok else '✗'} |"
        )
        emit(f"| of which: event opened → its analysis published | {_summary(analyses)} | |")
        emit(f"| notifications received / events opened | {len(opened)} / {len(runs)} | all |")
        emit(f"| with the analysis's top cause | {with_cause} / {len(opened)} | all |")
        emit(f"| signature not valid | {unsigned} | 0 |")
        if unmatched:
            emit(f"| notifications whose opening was not seen on the bus | {unmatched} | 0 |")
        return 0 if ok and len(opened) == len(runs) and not unsigned else 1


if __name__ == "__main__":
    sys.exit(main())
