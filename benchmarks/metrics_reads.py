# The driver runs one step at a time; blocking clients inside it are the measurement.
# ruff: noqa: ASYNC210
"""Raw reads of a long series, side by side with PostgreSQL's own in one run.

Run: ``.venv/bin/python benchmarks/metrics_reads.py [--points N] [--repeat R]``

Stack: the run-registry as a real process (``python -m mldiag_run_registry``, uvicorn)
against the machine's NATS (``MLDIAG_BENCH_NATS_URL``, a fresh namespace) and PostgreSQL
(``MLDIAG_BENCH_DATABASE_URL``, a fresh database). One run gets one N-point series
(default 1M; a noisy decaying loss, NaN and ±Inf now and then), stored through the
registry's own repository (its chunks and rollups, as the bus consumer stores them).

1. the first raw page of 10,000 points over HTTP (median of 21), against the goal (20 ms)
   and against fetching 10,000 rows of the same points with asyncpg from a plain
   row-per-point table (``ref_points``: series, step, time, value, host; its primary key on
   (series, step, time)), what a client reading PostgreSQL itself would pay;
2. the whole series exported over HTTP as CSV and as JSON Lines (best of R), in points/s,
   against the goal (1M/s) and against ``COPY (SELECT … FROM ref_points ORDER BY …) TO
   STDOUT (FORMAT csv)`` of the same points: PostgreSQL writing the same text itself;
3. the run's metric list (``GET …/metrics``, median of 51), the console's first request.
"""

import argparse
import asyncio
import logging
import math
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
import numpy as np
import structlog
from _support import (
    create_database,
    drop_database,
    drop_streams,
    emit,
    free_port,
    machine_summary,
    median_get_ms,
    process,
    wait_http,
)

from mldiag_platform.database import create_pool
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived, to_unix_micros

PYTHON = sys.executable
NATS = os.environ.get("MLDIAG_BENCH_NATS_URL", "nats://127.0.0.1:4222")
SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
SCHEMA = "bench_registry"
PAGE = 10_000
GOAL_PAGE_MS = 20.0
GOAL_EXPORT_RATE = 1_000_000
MESSAGE_POINTS = 5_000
BATCH_MESSAGES = 40


def _series(points: int) -> tuple[list[int], list[int], list[float]]:
    """Steps 0…N-1, a time 10 ms apart (±0.5 ms), a noisy decaying loss with a NaN and an
    Inf now and then (what the store must keep)."""
    rng = np.random.default_rng(19)
    steps = np.arange(points, dtype=np.int64)
    base = to_unix_micros(datetime(2026, 1, 1, tzinfo=UTC))
    times = base + steps * 10_000 + rng.integers(-500, 500, points)
    values = 2.0 * np.exp(-steps / max(points / 5, 1)) + rng.normal(0, 0.05, points)
    values[rng.integers(0, points, max(points // 10_000, 1))] = math.nan
    values[rng.integers(0, points, max(points // 50_000, 1))] = math.inf
    return steps.tolist(), times.tolist(), values.tolist()


async def _fill(db: str, run_id: str, points: int) -> None:
    """The series through the registry's repository, 40 messages of 5,000 points a batch."""
    pool = await create_pool(DatabaseSettings(url=db, pool_min_size=1, pool_max_size=2), SCHEMA)
    repository = MetricsRepository(pool, SCHEMA)
    steps, times, values = _series(points)
    for start in range(0, points, MESSAGE_POINTS * BATCH_MESSAGES):
        messages = []
        end = min(start + MESSAGE_POINTS * BATCH_MESSAGES, points)
        for chunk in range(start, end, MESSAGE_POINTS):
            cut = slice(chunk, min(chunk + MESSAGE_POINTS, end))
            messages.append(
                MetricPointsReceived(
                    run_id=run_id,
                    batch_id=uuid.uuid4(),
                    chunk=0,
                    series=[
                        MetricColumns(
                            name="loss",
                            host="h0",
                            steps=steps[cut],
                            values=values[cut],
                            times_unix_us=times[cut],
                        )
                    ],
                )
            )
        await repository.store_messages(messages, {run_id: "default"})
    await pool.close()


async def _reference_table(db: str, points: int) -> None:
    """The same points, one row each, in a plain table (the references read it)."""
    conn = await asyncpg.connect(db)
    try:
        await conn.execute(
            "CREATE TABLE ref_points (series_id bigint, step bigint, time timestamptz,"
            " value float8, host text, PRIMARY KEY (series_id, step, time))"
        )
        steps, times, values = _series(points)
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        origin = to_unix_micros(epoch)
        records = (
            (1, step, datetime.fromtimestamp((micros - origin) / 1e6, UTC), value, "h0")
            for step, micros, value in zip(steps, times, values, strict=True)
        )
        await conn.copy_records_to_table("ref_points", records=records)
        await conn.execute("ANALYZE ref_points")
    finally:
        await conn.close()


async def _reference_page_ms(db: str, repeat: int) -> float:
    conn = await asyncpg.connect(db)
    try:
        samples = []
        for _ in range(repeat + 3):
            started = time.perf_counter()
            rows = await conn.fetch(
                "SELECT step, series_id, time, value, host FROM ref_points"
                " WHERE series_id = 1 ORDER BY step, time LIMIT $1",
                PAGE,
            )
            samples.append((time.perf_counter() - started) * 1000)
            if len(rows) != PAGE:
                raise RuntimeError(f"the reference read {len(rows)} rows, not {PAGE}")
        return statistics.median(samples[3:])
    finally:
        await conn.close()


async def _reference_copy_rate(db: str, points: int, repeat: int) -> float:
    conn = await asyncpg.connect(db)
    try:
        best = math.inf
        for _ in range(repeat):
            size = 0

            async def sink(data: bytes) -> None:
                nonlocal size
                size += len(data)

            started = time.perf_counter()
            await conn.copy_from_query(
                "SELECT step, value, time, host FROM ref_points WHERE series_id = 1"
                " ORDER BY step, time",
                output=sink,
                format="csv",
            )
            best = min(best, time.perf_counter() - started)
        return points / best
    finally:
        await conn.close()


def _page_ms(http: httpx.Client, url: str, repeat: int) -> float:
    """The median ms of the first 10,000-point page (after three reads to warm the
    connection and the caches), checked to hold them all."""
    page = {"pageSize": PAGE}
    if len(http.get(url, params=page).json()["points"]) != PAGE:
        raise RuntimeError("the page does not hold 10,000 points")
    return median_get_ms(http, url, repeat, page, warmup=3)


def _export_rate(http: httpx.Client, url: str, fmt: str, points: int, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        lines = 0
        started = time.perf_counter()
        with http.stream("GET", url, params={"metric": "loss", "format": fmt}) as answer:
            answer.raise_for_status()
            for chunk in answer.iter_raw():
                lines += chunk.count(b"\n")
        best = min(best, time.perf_counter() - started)
        expected = points + (1 if fmt == "csv" else 0)
        if lines != expected:
            raise RuntimeError(f"the {fmt} export held {lines} lines, not {expected}")
    return points / best


async def main() -> None:
    """Fill, measure, print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="exports per format (best)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    tag = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="mldiag-bench-"))
    name = f"mldiag_reads_{tag}"
    db = await create_database(SERVER, name)
    port = free_port()
    token = "mldiag_" + secrets.token_urlsafe(32)
    env = {
        "MLDIAG_NATS_URL": NATS,
        "MLDIAG_NATS_NAMESPACE": f"bench{tag}",
        "MLDIAG_DATABASE_URL": db,
        "MLDIAG_RUN_REGISTRY_DB_SCHEMA": SCHEMA,
        "MLDIAG_RUN_REGISTRY_PORT": str(port),
        "MLDIAG_LOG_LEVEL": "WARNING",
        "MLDIAG_RUN_REGISTRY_BOOTSTRAP_ADMIN_TOKEN": token,
    }
    api = f"http://127.0.0.1:{port}"
    emit(
        f"# mldiag raw reads benchmark {datetime.now(UTC):%Y-%m-%d %H:%M}Z,"
        f" {os.cpu_count()} CPUs, PostgreSQL {SERVER}, NATS {NATS}"
    )
    emit(f"# machine: {machine_summary()}")
    emit(
        "# command: .venv/bin/python benchmarks/metrics_reads.py"
        f" --points {args.points} --repeat {args.repeat}"
    )
    try:
        with process([PYTHON, "-m", "mldiag_run_registry"], env, tmp / "registry.log"):
            wait_http(f"{api}/healthz")
            headers = {"Authorization": f"Bearer {token}"}
            run_id = f"reads-{tag}"
            httpx.post(
                f"{api}/v1/machineLearningRuns",
                json={"runId": run_id, "displayName": run_id},
                headers=headers,
                timeout=10,
            ).raise_for_status()
            started = time.perf_counter()
            await _fill(db, run_id, args.points)
            fill_s = time.perf_counter() - started
            await _reference_table(db, args.points)
            emit(f"# filled {args.points:,} points through the repository in {fill_s:.1f} s")
            with httpx.Client(base_url=api, headers=headers, timeout=120) as http:
                runs = f"/v1/machineLearningRuns/{run_id}"
                page = _page_ms(http, f"{runs}/metrics/loss", 21)
                rates = {
                    fmt: _export_rate(http, f"{runs}/metrics:export", fmt, args.points, args.repeat)
                    for fmt in ("csv", "jsonl")
                }
                listing = median_get_ms(http, f"{runs}/metrics", 51, warmup=3)
            reference_page = await _reference_page_ms(db, 21)
            copy_rate = await _reference_copy_rate(db, args.points, args.repeat)
        emit()
        emit(f"## raw reads of a {args.points:,}-point series")
        emit(f"{'read':<58}{'mldiag':>12}{'goal':>10}{'reference':>12}")
        emit(
            f"{'first raw page, 10,000 points (ms, median of 21)':<58}{page:>12.1f}"
            f"{GOAL_PAGE_MS:>10.0f}{reference_page:>12.1f}"
        )
        for fmt, rate in rates.items():
            label = f"export, whole series as {fmt.upper()} (points/s, best of {args.repeat})"
            emit(f"{label:<58}{rate:>12,.0f}{GOAL_EXPORT_RATE:>10,}{copy_rate:>12,.0f}")
        emit(f"{'metric list, GET …/metrics (ms, median of 51)':<58}{listing:>12.1f}")
        emit()
        emit("reference: the page, asyncpg fetching 10,000 rows of a row-per-point table;")
        emit("           an export, COPY (SELECT … ORDER BY step) TO STDOUT (FORMAT csv) of it")
    finally:
        await drop_database(SERVER, name)
        await drop_streams(NATS, f"bench{tag}")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
