"""The chunked metric store: bytes per point, store CPU and raw reads, beside row-per-point.

Run: ``.venv/bin/python benchmarks/metrics_chunks.py [--points 10000000]
[--cpu-points 1600000] [--chunk-sizes 4096/1024,4096/4096,16384/16384,1024/1024]``
(PostgreSQL from ``MLDIAG_BENCH_DATABASE_URL``, default the machine's at 127.0.0.1:5432;
each part gets a fresh schema, dropped after).

Data as a training run writes it: one series, consecutive steps, times 10 ms ± 0.5 ms apart,
a noisy decaying loss; bus messages of 5,000 points (array.array columns, as read from a
binary frame) stored 40 per ``store_messages`` call, as the registry's consumer does.

1. chunk size: ``--cpu-points`` stored at each of ``--chunk-sizes`` (points per chunk / the
   step grid that cuts a dense series' chunks): the
   Python process's CPU seconds in ``store_messages`` per point, wall points/s, and bytes per
   point; beside them the reference: the same points COPY'd as rows (series, step, time,
   value) into a table shaped like the old ``metric_points`` with its (series, step, time)
   index, which is the raw-COPY limit and the old layout's size.
   Then ``--live-points`` stored 50 points per batch (a live run's shape), bytes per point
   as stored and after ``compact_chunks`` (then ``VACUUM FULL`` of chunks and rollups: the
   space dead rows held, which autovacuum lets later writes reuse).
2. ``--points`` stored at the default chunk size, then bytes per point:
   ``pg_total_relation_size`` (heap, TOAST, indexes) of ``metric_chunks`` (all partitions),
   ``metric_rollups``, ``metric_series`` and ``metric_messages``, over the points stored;
   and reads, median of 21: a 10,000-point page at the start, middle and end of the series,
   a scan of 1M points (points/s), 1000 raw buckets of 50 steps, and the times of a
   1000-bucket chart's buckets looked up in the chunks (``point_times``: since migration 3
   rollup rows carry their times, so this is only the fallback for rows stored before).
"""

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
import uuid
from array import array
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import asyncpg
import numpy as np
import structlog
from _support import machine_summary

from mldiag_platform.database import apply_migrations, create_pool, load_migrations
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.metrics.chunks import CHUNK_POINTS
from mldiag_run_registry.metrics.repository import ROLLUP_LEVELS, MetricsRepository
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived

SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
PER_MESSAGE = 5_000
MESSAGES_PER_CALL = 40
BASE_US = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000


def _emit(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _loss(rng: np.random.Generator, first: int, count: int) -> tuple[np.ndarray, ...]:
    steps = np.arange(first, first + count, dtype=np.int64)
    times = BASE_US + steps * 10_000 + rng.integers(-500, 500, count)
    values = 2.0 * np.exp(-steps / 3e6) + 0.3 + 0.05 * rng.standard_normal(count)
    return steps, times, values


def _batches(
    points: int, per_message: int = PER_MESSAGE, per_call: int = MESSAGES_PER_CALL
) -> Iterator[list[MetricPointsReceived]]:
    """Messages of one series, ``per_call`` at a time (columns built without a per-point
    step)."""
    rng = np.random.default_rng(1)
    batch: list[MetricPointsReceived] = []
    for first in range(0, points, per_message):
        steps, times, values = _loss(rng, first, min(per_message, points - first))
        # array.array columns, as a binary frame is read (typed as lists in the model)
        arrays: dict[str, Any] = {
            "steps": array("q", steps.tobytes()),
            "values": array("d", values.tobytes()),
            "times_unix_us": array("q", times.tobytes()),
        }
        columns = MetricColumns.model_construct(
            name="loss", host="host-0", process_index=None, labels={}, **arrays
        )
        batch.append(
            MetricPointsReceived(run_id="bench", batch_id=uuid.uuid4(), chunk=0, series=[columns])
        )
        if len(batch) == per_call:
            yield batch
            batch = []
    if batch:
        yield batch


async def _schema(pool_for: Callable[[str], Awaitable[asyncpg.Pool]]) -> tuple[asyncpg.Pool, str]:
    schema = f"bench_chunks_{uuid.uuid4().hex[:8]}"
    pool = await pool_for(schema)
    await apply_migrations(
        pool,
        schema,
        [
            *load_migrations("run-registry", "mldiag_run_registry.migrations"),
            *load_migrations("run-registry-metrics", "mldiag_run_registry.metrics.migrations"),
        ],
    )
    return pool, schema


async def _store(
    repository: MetricsRepository,
    points: int,
    per_message: int = PER_MESSAGE,
    per_call: int = MESSAGES_PER_CALL,
) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of storing ``points``, message building left out."""
    cpu = wall = 0.0
    for batch in _batches(points, per_message, per_call):
        c0, w0 = time.process_time(), time.perf_counter()
        await repository.store_messages(batch, {"bench": "bench-project"})
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
    return cpu, wall


async def _bytes(pool: asyncpg.Pool, schema: str) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT c.relname AS name, CASE WHEN c.relkind = 'p' THEN"
        " (SELECT coalesce(sum(pg_total_relation_size(t.relid)), 0)"
        "  FROM pg_partition_tree(c.oid) t) ELSE pg_total_relation_size(c.oid) END::bigint AS n"
        " FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace"
        " WHERE s.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
        " AND c.relname IN ('metric_chunks', 'metric_rollups', 'metric_series',"
        " 'metric_messages', 'rows_reference')",
        schema,
    )
    return {row["name"]: row["n"] for row in rows}


async def _copy_reference(pool: asyncpg.Pool, schema: str, points: int) -> tuple[float, float]:
    """Wall seconds of COPY'ing the points as rows into an indexed table, and its bytes."""
    await pool.execute(
        "CREATE TABLE rows_reference (series_id bigint NOT NULL, step bigint NOT NULL,"
        " time_us bigint NOT NULL, value double precision NOT NULL);"
        " CREATE INDEX ON rows_reference (series_id, step, time_us)"
    )
    wall = 0.0
    rng = np.random.default_rng(1)
    for first in range(0, points, PER_MESSAGE * MESSAGES_PER_CALL):
        count = min(PER_MESSAGE * MESSAGES_PER_CALL, points - first)
        steps, times, values = _loss(rng, first, count)
        records = list(
            zip([1] * count, steps.tolist(), times.tolist(), values.tolist(), strict=True)
        )
        w0 = time.perf_counter()
        await pool.copy_records_to_table(
            "rows_reference",
            records=records,
            columns=("series_id", "step", "time_us", "value"),
            schema_name=schema,
        )
        wall += time.perf_counter() - w0
    await pool.execute("VACUUM ANALYZE rows_reference")
    return wall, (await _bytes(pool, schema))["rows_reference"] / points


def _median_ms(samples: list[float]) -> str:
    """The median, and the minimum (what the read costs on a quiet machine)."""
    return f"{statistics.median(samples) * 1000:.2f} (min {min(samples) * 1000:.2f})"


async def _timed(call: Callable[[], Awaitable[object]], repeat: int = 21) -> list[float]:
    await call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=10_000_000)
    parser.add_argument("--cpu-points", type=int, default=1_600_000)
    parser.add_argument("--live-points", type=int, default=200_000)
    parser.add_argument(
        "--chunk-sizes",
        default="4096/1024,4096/4096,16384/16384,1024/1024",
        help="points per chunk / step grid of dense series",
    )
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    settings = DatabaseSettings(url=SERVER, pool_min_size=1, pool_max_size=4)

    async def pool_for(schema: str) -> asyncpg.Pool:
        return await create_pool(settings, schema)

    _emit(
        f"# benchmarks/metrics_chunks.py --points {args.points} --cpu-points"
        f" {args.cpu_points} --chunk-sizes {args.chunk_sizes}; {os.cpu_count()} CPUs,"
        f" load average {os.getloadavg()[0]:.1f}"
    )
    _emit(f"# machine: {machine_summary()}")
    _emit(
        "| variant | store CPU µs/point | points/s (wall) |"
        " bytes/point (chunks+rollups+series+ledger) |"
    )
    _emit("|---|---|---|---|")
    pool, schema = await _schema(pool_for)
    try:
        wall, size = await _copy_reference(pool, schema, args.cpu_points)
        _emit(
            f"| reference: COPY of rows into an indexed table (the limit; the old layout) |"
            f" | {args.cpu_points / wall:,.0f} | {size:.1f} (rows + index) |"
        )
    finally:
        await pool.execute(f"DROP SCHEMA {schema} CASCADE")
        await pool.close()
    for size_text in args.chunk_sizes.split(","):
        chunk_points, grid = (int(part) for part in size_text.split("/"))
        pool, schema = await _schema(pool_for)
        try:
            repository = MetricsRepository(pool, schema, chunk_points=chunk_points, chunk_grid=grid)
            cpu, wall = await _store(repository, args.cpu_points)
            await pool.execute("VACUUM ANALYZE metric_chunks, metric_rollups, metric_series")
            sizes = await _bytes(pool, schema)
            _emit(
                f"| store_messages, {chunk_points} points per chunk, grid {grid} steps |"
                f" {cpu / args.cpu_points * 1e6:.2f} | {args.cpu_points / wall:,.0f} |"
                f" {sum(sizes.values()) / args.cpu_points:.2f} |"
            )
        finally:
            await pool.execute(f"DROP SCHEMA {schema} CASCADE")
            await pool.close()

    if args.live_points:
        await _live(pool_for, args.live_points)
    if args.points:
        _emit()
        await _big(pool_for, args.points)


async def _live(pool_for: Callable[[str], Awaitable[asyncpg.Pool]], points: int) -> None:
    """A live run's shape: 50 points of the series per batch, one message per call; bytes
    per point as stored, then after ``compact_chunks``."""
    pool, schema = await _schema(pool_for)
    try:
        repository = MetricsRepository(pool, schema)
        cpu, wall = await _store(repository, points, per_message=50, per_call=1)
        await pool.execute("VACUUM ANALYZE metric_chunks, metric_rollups, metric_series")
        stored = sum((await _bytes(pool, schema)).values()) / points
        started = time.perf_counter()
        merged = await repository.compact_chunks("bench-project", series_limit=1_000_000)
        took = time.perf_counter() - started
        await pool.execute("VACUUM FULL metric_chunks, metric_rollups")
        sizes = await _bytes(pool, schema)
        compacted = sum(sizes.values()) / points
        parts = ", ".join(f"{name} {n / points:.2f}" for name, n in sorted(sizes.items()))
        _emit(
            f"| store_messages, 50 points per series and batch ({points:,} points) |"
            f" {cpu / points * 1e6:.2f} | {points / wall:,.0f} |"
            f" {stored:.2f}; {compacted:.2f} after compact_chunks ({merged:,} chunks merged"
            f" in {took:.1f} s) and VACUUM FULL: {parts} |"
        )
    finally:
        await pool.execute(f"DROP SCHEMA {schema} CASCADE")
        await pool.close()


async def _big(pool_for: Callable[[str], Awaitable[asyncpg.Pool]], points: int) -> None:
    """``points`` stored at the default chunking, then bytes per point and reads."""
    pool, schema = await _schema(pool_for)
    try:
        repository = MetricsRepository(pool, schema)
        cpu, wall = await _store(repository, points)
        await pool.execute("VACUUM ANALYZE metric_chunks, metric_rollups, metric_series")
        sizes = await _bytes(pool, schema)
        per = {name: n / points for name, n in sizes.items()}
        _emit(
            f"{points:,} points at {CHUNK_POINTS} per chunk: store {cpu:.1f} CPU s"
            f" ({cpu / points * 1e6:.2f} µs/point), {points / wall:,.0f} points/s"
        )
        _emit(
            f"bytes/point: total {sum(per.values()):.2f} = "
            + ", ".join(f"{name} {value:.2f}" for name, value in sorted(per.items()))
        )
        series_id = await pool.fetchval("SELECT series_id FROM metric_series")
        for label, step in (
            ("start", 0),
            ("middle", points // 2),
            ("end", points - 10_000),
        ):
            position = (step - 1, series_id, 2**62)
            samples = await _timed(
                partial(repository.read_points, "bench-project", [series_id], 10_000, position)
            )
            _emit(f"10,000-point page at the {label}: {_median_ms(samples)} ms median")
        scan_points = min(1_000_000, points)
        started = time.perf_counter()
        scanned = 0
        async for block in repository.scan_points(
            "bench-project", [series_id], points // 3, points // 3 + scan_points - 1
        ):
            scanned += len(block)
        elapsed = time.perf_counter() - started
        _emit(f"scan of {scanned:,} points: {scanned / elapsed:,.0f} points/s")
        low = points // 2
        samples = await _timed(
            lambda: repository.read_buckets(
                "bench-project", {series_id: 0}, 50, None, low // 50, low // 50 + 999
            )
        )
        _emit(f"1000 raw buckets of 50 steps: {_median_ms(samples)} ms median")
        wanted = -(-points // 1000)
        level = max((k for k in ROLLUP_LEVELS if 1 << k <= wanted), default=ROLLUP_LEVELS[0])
        width = -(-wanted // (1 << level)) * (1 << level)
        rows = await repository.read_buckets(
            "bench-project", {series_id: 0}, width, level, 0, (points - 1) // width
        )
        probes = [(row.last_series_id, row.last_step) for row in rows]
        samples = await _timed(partial(repository.point_times, "bench-project", probes))
        _emit(
            f"times of a {len(probes)}-bucket chart looked up in the chunks (the fallback for"
            f" rollup rows stored before migration 3; buckets of {width} steps, rollup level"
            f" {level}): {_median_ms(samples)} ms median"
        )
    finally:
        await pool.execute(f"DROP SCHEMA {schema} CASCADE")
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
