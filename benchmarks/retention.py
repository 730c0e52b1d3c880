"""Retention: dropping a project's storage week against deleting the same points row by row,
and the purge of a run's metric data.

Run: ``.venv/bin/python benchmarks/retention.py [--points 1000000] [--runs 10]``
(PostgreSQL from ``MLDIAG_BENCH_DATABASE_URL``, default the machine's at 127.0.0.1:5432; a
fresh schema, dropped after).

``--points`` points over ``--runs`` runs (one series each, consecutive steps, bus messages of
5,000 points stored 40 per ``store_messages`` call as the registry's consumer does) are
stored three times, 40 days ago, each copy in its own project: the week of project ``a`` is
expired by ``expire_points`` (what the retention sweep does: ``DROP TABLE`` of the week's
partition); the same week of project ``b`` is deleted with ``DELETE`` of its chunk rows (row
by row in the chunked layout); and the points of project ``c`` are also COPY'd as one row
per point into an indexed table shaped like the old ``metric_points`` and deleted with one
``DELETE`` (row by row in the old layout: the reference). Then one run's metric data is
purged (``purge_run``: its chunks, rollups, series and ledger rows). Each line prints the
seconds the statement took and, for the deletes, the dead tuples left for vacuum.
"""

import argparse
import asyncio
import logging
import os
import sys
import time
import uuid
from array import array
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np
import structlog
from _support import machine_summary

from mldiag_platform.database import apply_migrations, create_pool, load_migrations
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_run_registry.retention.service import day_number
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived

SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
PER_MESSAGE = 5_000
MESSAGES_PER_CALL = 40
STORED_AT = datetime.now(UTC) - timedelta(days=40)
BASE_US = int(STORED_AT.timestamp()) * 1_000_000


def _emit(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _columns(first: int, count: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    steps = np.arange(first, first + count, dtype=np.int64)
    times = BASE_US + steps * 10_000 + rng.integers(-500, 500, count)
    values = 2.0 * np.exp(-steps / 3e6) + 0.3 + 0.05 * rng.standard_normal(count)
    return steps, times, values


def _batches(run_id: str, points: int) -> Iterator[list[MetricPointsReceived]]:
    batch: list[MetricPointsReceived] = []
    for first in range(0, points, PER_MESSAGE):
        steps, times, values = _columns(first, min(PER_MESSAGE, points - first), first)
        arrays: dict[str, Any] = {
            "steps": array("q", steps.tobytes()),
            "values": array("d", values.tobytes()),
            "times_unix_us": array("q", times.tobytes()),
        }
        columns = MetricColumns.model_construct(
            name="loss", host="host-0", process_index=None, labels={}, **arrays
        )
        batch.append(
            MetricPointsReceived(run_id=run_id, batch_id=uuid.uuid4(), chunk=0, series=[columns])
        )
        if len(batch) == MESSAGES_PER_CALL:
            yield batch
            batch = []
    if batch:
        yield batch


async def _fill(repository: MetricsRepository, project: str, runs: int, points: int) -> None:
    for index in range(runs):
        run_id = f"{project}-run-{index}"
        for batch in _batches(run_id, points // runs):
            await repository.store_messages(batch, {run_id: project})


async def _reference(pool: asyncpg.Pool, schema: str, runs: int, points: int) -> None:
    await pool.execute(
        "CREATE TABLE rows_reference (series_id bigint NOT NULL, step bigint NOT NULL,"
        " time_us bigint NOT NULL, value double precision NOT NULL);"
        " CREATE INDEX ON rows_reference (series_id, step, time_us)"
    )
    per_run = points // runs
    for series in range(runs):
        for first in range(0, per_run, PER_MESSAGE * MESSAGES_PER_CALL):
            count = min(PER_MESSAGE * MESSAGES_PER_CALL, per_run - first)
            steps, times, values = _columns(first, count, first)
            await pool.copy_records_to_table(
                "rows_reference",
                records=zip(
                    [series] * count, steps.tolist(), times.tolist(), values.tolist(), strict=True
                ),
                columns=("series_id", "step", "time_us", "value"),
                schema_name=schema,
            )


async def _dead(pool: asyncpg.Pool, table: str) -> int:
    await pool.execute("SELECT pg_stat_force_next_flush()")
    dead: int = await pool.fetchval(
        "SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables"
        " WHERE schemaname = current_schema() AND relname LIKE $1",
        table,
    )
    return dead


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    schema = f"bench_retention_{uuid.uuid4().hex[:8]}"
    pool = await create_pool(DatabaseSettings(url=SERVER, pool_min_size=1, pool_max_size=4), schema)
    _emit(
        f"# benchmarks/retention.py --points {args.points} --runs {args.runs};"
        f" {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    _emit(f"# machine: {machine_summary()}")
    try:
        await apply_migrations(
            pool,
            schema,
            [
                *load_migrations("run-registry", "mldiag_run_registry.migrations"),
                *load_migrations("run-registry-metrics", "mldiag_run_registry.metrics.migrations"),
            ],
        )
        moment = STORED_AT.timestamp()
        repository = MetricsRepository(pool, schema, clock=lambda: moment)
        for project in ("a", "b", "c"):
            await _fill(repository, project, args.runs, args.points)
        await _reference(pool, schema, args.runs, args.points)
        await pool.execute("VACUUM ANALYZE")
        week = await pool.fetchrow(
            "SELECT table_name, first_day, end_day FROM metric_chunk_partitions WHERE project = 'b'"
        )
        before_day = day_number(datetime.now(UTC)) - 14
        _emit(f"{args.points:,} points per project, {args.runs} runs, stored {STORED_AT:%F}")
        _emit("| removing one project's week of points | seconds | dead tuples left |")
        _emit("|---|---|---|")

        started = time.perf_counter()
        dropped = await repository.expire_points("a", before_day)
        seconds = time.perf_counter() - started
        _emit(
            f"| expire_points: DROP TABLE of {dropped} partition (retention) | {seconds:.3f} | 0 |"
        )

        chunks = await pool.fetchval(f"SELECT count(*) FROM {week['table_name']}")  # noqa: S608
        started = time.perf_counter()
        await pool.execute(
            "DELETE FROM metric_chunks WHERE project = 'b' AND stored_day >= $1"
            " AND stored_day < $2",
            week["first_day"],
            week["end_day"],
        )
        seconds = time.perf_counter() - started
        dead = await _dead(pool, "metric_chunks_%")
        _emit(f"| DELETE of the week's {chunks:,} chunk rows | {seconds:.3f} | {dead:,} |")

        started = time.perf_counter()
        await pool.execute("DELETE FROM rows_reference")
        seconds = time.perf_counter() - started
        dead = await _dead(pool, "rows_reference")
        _emit(
            f"| reference: DELETE of {args.points:,} point rows (old layout) |"
            f" {seconds:.3f} | {dead:,} |"
        )

        started = time.perf_counter()
        removed = await repository.purge_run("c-run-0")
        seconds = time.perf_counter() - started
        _emit()
        _emit(f"purge_run of one run ({removed:,} points, its rollups and series): {seconds:.3f} s")
    finally:
        await pool.execute(f"DROP SCHEMA {schema} CASCADE")
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
