"""Write path of the registry's metric storage vs raw COPY into the same table.

Run: ``.venv/bin/python benchmarks/storage.py [--points N]`` (PostgreSQL from
``MLDIAG_BENCH_DATABASE_URL``, default the machine's at 127.0.0.1:5432). Each variant gets a
fresh schema in a throwaway database; the figures are points per second.

Variants: raw COPY of (series, step, time, value) rows into ``metric_points`` (the limit);
the registry's ``store_messages`` (ledger + series + COPY + rollups, one transaction per
batch of bus messages); the same without rollups; and one row per step (all of a step's
metrics in arrays), the alternative layout.
"""

import argparse
import asyncio
import logging
import os
import sys
import time
import uuid
from datetime import UTC, datetime

import asyncpg
import structlog

from mldiag_platform.database import apply_migrations, create_pool, load_migrations
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.metrics import repository as metrics_repository
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived, to_unix_micros

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
METRICS = 10
MESSAGES_PER_BATCH = 200  # the registry's default metrics_batch_size


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _messages(points: int, per_message: int) -> list[MetricPointsReceived]:
    base = to_unix_micros(NOW)
    per_metric = per_message // METRICS
    messages = []
    for start in range(0, points // METRICS, per_metric):
        steps = list(range(start, start + per_metric))
        messages.append(
            MetricPointsReceived(
                run_id="bench",
                batch_id=uuid.uuid4(),
                chunk=0,
                series=[
                    MetricColumns(
                        name=f"m{m}",
                        host="host-0",
                        steps=steps,
                        values=[step * 0.001 + m for step in steps],
                        times_unix_us=[base + step * 1000 for step in steps],
                    )
                    for m in range(METRICS)
                ],
            )
        )
    return messages


async def _fresh(url: str, schema: str) -> asyncpg.Pool:
    pool = await create_pool(DatabaseSettings(url=url, pool_min_size=1, pool_max_size=2), schema)
    migrations = [
        *load_migrations("run-registry", "mldiag_run_registry.migrations"),
        *load_migrations("run-registry-metrics", "mldiag_run_registry.metrics.migrations"),
    ]
    await apply_migrations(pool, schema, migrations)
    return pool


async def _raw_copy(url: str, messages: list[MetricPointsReceived]) -> float:
    pool = await _fresh(url, "raw_copy")
    records = [
        (index, step, t, value)
        for message in messages
        for index, columns in enumerate(message.series)
        for step, t, value in zip(
            columns.steps, columns.times_unix_us or [], columns.values, strict=True
        )
    ]
    started = time.perf_counter()
    async with pool.acquire() as conn:
        for start in range(0, len(records), 1_000_000):
            await conn.copy_records_to_table(
                "metric_points",
                records=records[start : start + 1_000_000],
                columns=("series_id", "step", "time_us", "value"),
                schema_name="raw_copy",
            )
    elapsed = time.perf_counter() - started
    await pool.close()
    return elapsed


async def _store(url: str, schema: str, messages: list[MetricPointsReceived]) -> float:
    pool = await _fresh(url, schema)
    repository = MetricsRepository(pool, schema)
    started = time.perf_counter()
    for start in range(0, len(messages), MESSAGES_PER_BATCH):
        await repository.store_messages(messages[start : start + MESSAGES_PER_BATCH])
    elapsed = time.perf_counter() - started
    await pool.close()
    return elapsed


async def _per_step(url: str, messages: list[MetricPointsReceived]) -> float:
    pool = await _fresh(url, "per_step")
    await pool.execute(
        "CREATE TABLE per_step.metric_steps (run_id text, host text, step bigint,"
        " time_us bigint, names text[], values float8[])"
    )
    await pool.execute("CREATE INDEX ON per_step.metric_steps (run_id, step)")
    started = time.perf_counter()
    async with pool.acquire() as conn:
        for message in messages:
            first = message.series[0]
            names = [columns.name for columns in message.series]
            records = [
                (
                    message.run_id,
                    first.host,
                    step,
                    (first.times_unix_us or [])[i],
                    names,
                    [columns.values[i] for columns in message.series],
                )
                for i, step in enumerate(first.steps)
            ]
            await conn.copy_records_to_table(
                "metric_steps", records=records, schema_name="per_step"
            )
    elapsed = time.perf_counter() - started
    await pool.close()
    return elapsed


async def main() -> None:
    """Print the table."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=1_000_000)
    args = parser.parse_args()
    name = f"mldiag_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(SERVER)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{SERVER.rpartition('/')[0]}/{name}"
    try:
        messages = _messages(args.points, 5_000)
        total = sum(message.point_count() for message in messages)
        _emit(
            f"# metric storage write path, {total:,} points, {METRICS} metrics, PostgreSQL {SERVER}"
        )
        _emit(f"# command: .venv/bin/python benchmarks/storage.py --points {args.points}")
        _emit(f"{'variant':<44}{'seconds':>10}{'points/s':>14}{'vs COPY':>10}")
        raw = await _raw_copy(url, messages)
        rows = [("raw COPY into metric_points (limit)", raw)]
        rows.append(
            ("store_messages: ledger+series+COPY+rollups", await _store(url, "s_full", messages))
        )
        levels = metrics_repository.ROLLUP_LEVELS
        repo = metrics_repository
        saved = repo._FINE_ROLLUP_SQL, repo._COARSE_ROLLUP_SQL
        # the rollup SQL's share: both statements become no-ops (the in-memory fold stays)
        repo._FINE_ROLLUP_SQL = (
            "SELECT $1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::float8[],"
            " $6::float8[], $7::float8[], $8::bigint[], $9::bigint[], $10::float8[]"
        )
        repo._COARSE_ROLLUP_SQL = (
            "SELECT $1::bigint[], $2::bigint[], $3::bigint[], $4::int, $5::int"
        )
        rows.append(
            ("store_messages without rollup SQL", await _store(url, "s_no_rollups", messages))
        )
        repo._FINE_ROLLUP_SQL, repo._COARSE_ROLLUP_SQL = saved
        rows.append(("one row per step (arrays), COPY", await _per_step(url, messages)))
        for label, seconds in rows:
            _emit(f"{label:<44}{seconds:>10.2f}{total / seconds:>14,.0f}{raw / seconds:>10.0%}")
        _emit(f"rollup levels (log2 of bucket width): {list(levels)}")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
