"""Workload monitoring latency, end to end: anomaly published → event readable in the API.

Run: ``.venv/bin/python benchmarks/monitoring_latency.py [--injections N] [--hangs H]
[--quiet Q]``

Stack: ingestion, run-registry, event-detector and analyzer as real processes (``python -m
...``) against the machine's NATS (``MLDIAG_BENCH_NATS_URL``, a fresh namespace) and
PostgreSQL (``MLDIAG_BENCH_DATABASE_URL``, a fresh database).

1. injections: N runs each get a healthy history over HTTP, then one anomalous write (a NaN
   loss, a lifecycle signal reporting an exception, or accelerator memory at 98%); the clock
   runs from that write's POST until the event is readable at
   ``GET .../machineLearningRuns/{run}/monitoredEvents``, then until its analysis is merged
   in (``analyzerReports``). p50/p95/max of both; goals: event p95 ≤ 2 s, analysis ≤ 5 s.
2. hangs: H runs step every 50 ms with heartbeats, then stop stepping; with the project's
   hang floor at 3 s the timeout is 3 s. Reported: time from the last step to the HANG event
   in the API, minus the timeout (goal ≤ 2 s).
3. quiet: Q runs of noisy but healthy telemetry (step-time jitter, duty-cycle noise, 80%
   memory, in-budget checkpoints, warm-up compiles, decreasing noisy loss, identical
   fingerprints), 200 steps each; every event they open is a false positive.
"""

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import structlog
from _support import emit, free_port, process, wait_http

PYTHON = sys.executable
NATS = os.environ.get("MLDIAG_BENCH_NATS_URL", "nats://127.0.0.1:4222")
SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)

HANG_FLOOR = 3.0


def _percentiles(samples: list[float]) -> str:
    if not samples:
        return "no samples"
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return (
        f"p50 {statistics.median(ordered) * 1000:7.0f} ms   p95 {p95 * 1000:7.0f} ms"
        f"   max {ordered[-1] * 1000:7.0f} ms   (n={len(ordered)})"
    )


class Platform:
    """HTTP calls a workload and a dashboard make."""

    def __init__(self, api: str, ingestion: str, token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        self.api = httpx.Client(base_url=api, headers=headers, timeout=30)
        self.ingestion = httpx.Client(base_url=ingestion, headers=headers, timeout=30)

    def create_run(self, run_id: str) -> None:
        self.api.post(
            "/v1/machineLearningRuns", json={"runId": run_id, "displayName": run_id}
        ).raise_for_status()

    def write(self, run_id: str, series: list[dict[str, Any]]) -> None:
        # NaN and ±Inf travel as the JSON tokens the API accepts (json.dumps writes them).
        self.ingestion.post(
            f"/v1/machineLearningRuns/{run_id}/metrics:write",
            content=json.dumps({"series": series}),
            headers={"Content-Type": "application/json"},
        ).raise_for_status()

    def heartbeat(self, run_id: str, host: str, step: int, **fingerprint: str) -> None:
        self.ingestion.post(
            f"/v1/machineLearningRuns/{run_id}:heartbeat",
            json={
                "host": host,
                "pid": 1000,
                "step": step,
                "intervalSeconds": 10,
                "fingerprint": fingerprint,
            },
        ).raise_for_status()

    def signal(self, run_id: str, body: dict[str, Any]) -> None:
        self.ingestion.post(
            f"/v1/machineLearningRuns/{run_id}:reportSignal", json=body
        ).raise_for_status()

    def events(self, run_id: str) -> list[dict[str, Any]]:
        response = self.api.get(f"/v1/machineLearningRuns/{run_id}/monitoredEvents")
        response.raise_for_status()
        events: list[dict[str, Any]] = response.json().get("events", [])
        return events

    def set_project_rules(self, rules: dict[str, Any]) -> None:
        self.api.patch(
            "/v1/projects/default/locations/local/monitoringRules", json={"rules": rules}
        ).raise_for_status()


def _series(name: str, host: str, steps: list[int], values: list[float]) -> dict[str, Any]:
    return {"name": name, "host": host, "steps": steps, "values": values}


def _timed(
    name: str, host: str, steps: list[int], values: list[float], base: datetime
) -> dict[str, Any]:
    """A series with one time per point (a second per step from ``base``); NaN: no point."""
    kept = [
        (step, value) for step, value in zip(steps, values, strict=True) if not math.isnan(value)
    ]
    return {
        **_series(name, host, [step for step, _ in kept], [value for _, value in kept]),
        "times": [(base + timedelta(seconds=step)).isoformat() for step, _ in kept],
    }


def _wait_event(
    platform: Platform, run_id: str, event_type: str, started: float, timeout: float = 30.0
) -> tuple[float, float | None]:
    """(seconds until the run's ``event_type`` event is readable, seconds until its analysis
    is merged in)."""
    event_at: float | None = None
    deadline = started + timeout
    while time.perf_counter() < deadline:
        events = [e for e in platform.events(run_id) if e["type"] == event_type]
        if events and event_at is None:
            event_at = time.perf_counter() - started
        if events and any(event.get("analyzerReports") for event in events):
            return event_at or 0.0, time.perf_counter() - started
        time.sleep(0.01)
    if event_at is None:
        seen = [e["type"] for e in platform.events(run_id)]
        raise RuntimeError(f"no {event_type} event for {run_id} within {timeout} s (saw {seen})")
    return event_at, None


def _inject(platform: Platform, run_id: str, kind: str) -> None:
    """One anomalous write of ``kind`` (the clock is already running)."""
    if kind == "nan":
        platform.write(run_id, [_series("loss", "h0", [20], [math.nan])])
    elif kind == "exception":
        platform.signal(
            run_id,
            {
                "kind": "EXCEPTION",
                "host": "h0",
                "errorType": "ValueError",
                "message": "shapes (8,) and (9,) do not match",
            },
        )
    else:
        platform.write(run_id, [_series("hbm_utilization", "h0", [20, 21], [98.0, 98.5])])


def _injections(platform: Platform, count: int) -> tuple[dict[str, list[float]], list[float], int]:
    kinds = {
        "nan": "NUMERICAL_INSTABILITY",
        "exception": "TERMINATION",
        "memory": "ACCELERATOR_MEMORY_PRESSURE",
    }
    events: dict[str, list[float]] = {kind: [] for kind in kinds}
    analyses: list[float] = []
    unanalysed = 0
    for index in range(count):
        run_id = f"inject-{index}-{uuid.uuid4().hex[:6]}"
        platform.create_run(run_id)
        steps = list(range(20))
        platform.write(
            run_id,
            [
                _series("loss", "h0", steps, [2.0 - 0.01 * s for s in steps]),
                _series("hbm_utilization", "h0", steps, [70.0] * 20),
            ],
        )
        time.sleep(0.3)  # the healthy history is folded in before the clock starts
        started = time.perf_counter()
        kind = list(kinds)[index % len(kinds)]
        _inject(platform, run_id, kind)
        event, analysis = _wait_event(platform, run_id, kinds[kind], started)
        events[kind].append(event)
        if analysis is None:
            unanalysed += 1
        else:
            analyses.append(analysis - event)
    return events, analyses, unanalysed


def _hangs(platform: Platform, count: int) -> list[float]:
    late: list[float] = []
    for index in range(count):
        run_id = f"hang-{index}-{uuid.uuid4().hex[:6]}"
        platform.create_run(run_id)
        platform.heartbeat(run_id, "h0", 0)
        for step in range(1, 21):
            platform.write(run_id, [_series("step_time", "h0", [step], [0.05])])
            time.sleep(0.05)
        last_step = time.perf_counter()
        platform.heartbeat(run_id, "h0", 20)
        deadline = last_step + HANG_FLOOR + 30
        while time.perf_counter() < deadline:
            if any(event["type"] == "HANG" for event in platform.events(run_id)):
                late.append(time.perf_counter() - last_step - HANG_FLOOR)
                break
            time.sleep(0.02)
        else:
            raise RuntimeError(f"no HANG for {run_id}")
    return late


def _quiet(platform: Platform, count: int, rng: random.Random) -> tuple[int, list[str]]:
    run_ids = []
    # The workload's clock: one simulated second per step, ending now.
    base = datetime.now(UTC) - timedelta(seconds=200)
    for index in range(count):
        run_id = f"quiet-{index}-{uuid.uuid4().hex[:6]}"
        run_ids.append(run_id)
        platform.create_run(run_id)
        for host in ("h0", "h1", "h2"):
            platform.heartbeat(run_id, host, 0, jax="0.4.35", packages="3f2a")
        for start in range(0, 200, 20):
            steps = list(range(start, start + 20))
            series = []
            for host in ("h0", "h1", "h2"):
                readings = {
                    "step_time": [rng.gauss(1.0, 0.03) for _ in steps],
                    "data_wait_time": [rng.uniform(0.0, 0.05) for _ in steps],
                    "loss": [3.0 * math.exp(-s / 80) + rng.gauss(0, 0.03) for s in steps],
                    "tpu_duty_cycle": [rng.gauss(78, 2.5) for _ in steps],
                    "hbm_utilization": [rng.gauss(80, 1.5) for _ in steps],
                    "host_memory_utilization": [rng.gauss(60, 3) for _ in steps],
                }
                if start == 0:
                    readings["compile_time"] = [4.0, 1.0, 0.5] + [math.nan] * 17
                if start and start % 100 == 0:
                    readings["checkpoint_time"] = [1.5] + [math.nan] * 19
                series += [
                    _timed(name, host, steps, values, base) for name, values in readings.items()
                ]
            platform.write(run_id, series)
            time.sleep(0.05)
    time.sleep(3.0)  # anything the detector or its clock would open, it has by now
    opened = [
        f"{run_id}: {event['type']} {event['displayName']}"
        for run_id in run_ids
        for event in platform.events(run_id)
    ]
    return len(opened), opened


def main() -> None:
    """Start the stack, run the three parts, print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--injections", type=int, default=60)
    parser.add_argument("--hangs", type=int, default=5)
    parser.add_argument("--quiet", type=int, default=10)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    tag = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="mldiag-bench-"))
    db_name = f"mldiag_monitoring_{tag}"
    asyncio.run(_admin(f'CREATE DATABASE "{db_name}"'))
    db = f"{SERVER.rpartition('/')[0]}/{db_name}"
    token = "mldiag_" + secrets.token_urlsafe(32)
    ports = {name: free_port() for name in ("api", "ingestion", "detector", "analyzer")}
    env = {
        "MLDIAG_NATS_URL": NATS,
        "MLDIAG_NATS_NAMESPACE": f"bench{tag}",
        "MLDIAG_DATABASE_URL": db,
        "MLDIAG_LOG_LEVEL": "WARNING",
        "MLDIAG_RUN_REGISTRY_PORT": str(ports["api"]),
        "MLDIAG_RUN_REGISTRY_BOOTSTRAP_ADMIN_TOKEN": token,
        "MLDIAG_INGESTION_PORT": str(ports["ingestion"]),
        "MLDIAG_INGESTION_OTLP_GRPC_PORT": str(free_port()),
        "MLDIAG_INGESTION_OTLP_HTTP_PORT": str(free_port()),
        "MLDIAG_EVENT_DETECTOR_PORT": str(ports["detector"]),
        "MLDIAG_ANALYZER_PORT": str(ports["analyzer"]),
    }
    emit(
        f"# mldiag monitoring latency {datetime.now(UTC):%Y-%m-%d %H:%M}Z, {os.cpu_count()} CPUs,"
        f" PostgreSQL {SERVER}, NATS {NATS}"
    )
    try:
        with contextlib.ExitStack() as stack:
            for name, module in (
                ("api", "mldiag_run_registry"),
                ("ingestion", "mldiag_ingestion"),
                ("detector", "mldiag_event_detector"),
                ("analyzer", "mldiag_analyzer"),
            ):
                stack.enter_context(process([PYTHON, "-m", module], env, tmp / f"{name}.log"))
            for port in ports.values():
                wait_http(f"http://127.0.0.1:{port}/healthz")
            platform = Platform(
                f"http://127.0.0.1:{ports['api']}",
                f"http://127.0.0.1:{ports['ingestion']}",
                token,
            )
            platform.set_project_rules({"hang": {"thresholds": {"floorSeconds": HANG_FLOOR}}})
            time.sleep(0.5)
            events, analyses, unanalysed = _injections(platform, args.injections)
            emit("\n## anomaly published → event readable in the API (goal p95 ≤ 2 s)")
            emit(f"  {_percentiles([e for kind in events.values() for e in kind])}")
            for kind, latencies in events.items():
                emit(f"    {kind:<10} {_percentiles(latencies)}")
            emit("\n## event readable → its analysis merged in (goal ≤ 5 s)")
            emit(f"  {_percentiles(analyses)}   without analysis after 30 s: {unanalysed}")
            late = _hangs(platform, args.hangs)
            emit(f"\n## hang reported after its {HANG_FLOOR:.0f} s timeout (goal ≤ 2 s late)")
            emit(f"  {_percentiles(late)}")
            count, opened = _quiet(platform, args.quiet, random.Random(7))  # noqa: S311  # noise, not secrets
            emit(f"\n## quiet runs: {args.quiet} x 3 hosts x 200 steps")
            emit(f"  false positives: {count}")
            for line in opened:
                emit(f"    {line}")
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)'))


async def _admin(statement: str) -> None:
    conn = await asyncpg.connect(SERVER)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


if __name__ == "__main__":
    main()
