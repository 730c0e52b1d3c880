"""All SQL about metric points, their series, rollups and the stored-message ledger."""

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import asyncpg

from mldiag_schemas.telemetry import (
    MAX_LABEL_SETS_PER_METRIC,
    MetricPointsReceived,
    to_unix_micros,
)

ROLLUP_LEVELS: tuple[int, ...] = (6, 8, 10, 12, 14, 16, 18)
"""Rollup bucket widths as powers of two (64 … 262144 steps). With a factor of 4 between
levels a read for N buckets touches between N and 4N rollup rows; below 64 steps per
bucket the raw points are few enough to aggregate directly."""

_POINT_COLUMNS = ("series_id", "step", "time_us", "value")

# Every level is aggregated from the batch in memory (the finest from the points, each
# coarser one from the level below) and merged additively into what is stored, in one
# statement; the ledger guarantees a message is folded in once, and the merge commutes, so
# replicas writing the same series agree. Re-reading the batch's points in SQL instead cost
# more than their COPY (1.4 s per million points); rebuilding each coarser level from the
# stored finer rows cost a statement per level.
_ROLLUP_COLUMNS = (
    "(series_id, width_log2, bucket, count, nan_count, min, max, sum, first_step, last_step,"
    " last_value)"
)

_ROLLUP_MERGE_SQL = f"""
INSERT INTO metric_rollups AS r {_ROLLUP_COLUMNS}
SELECT * FROM unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::bigint[], $5::bigint[],
                     $6::float8[], $7::float8[], $8::float8[], $9::bigint[], $10::bigint[],
                     $11::float8[])
ON CONFLICT (series_id, width_log2, bucket) DO UPDATE SET
    count = r.count + EXCLUDED.count,
    nan_count = r.nan_count + EXCLUDED.nan_count,
    min = LEAST(r.min, EXCLUDED.min),
    max = GREATEST(r.max, EXCLUDED.max),
    sum = CASE WHEN r.sum IS NULL THEN EXCLUDED.sum
               WHEN EXCLUDED.sum IS NULL THEN r.sum
               ELSE r.sum + EXCLUDED.sum END,
    first_step = LEAST(r.first_step, EXCLUDED.first_step),
    last_value = CASE WHEN EXCLUDED.last_step >= r.last_step THEN EXCLUDED.last_value
                      ELSE r.last_value END,
    last_step = GREATEST(r.last_step, EXCLUDED.last_step)
"""

_SERIES_STATS_SQL = """
UPDATE metric_series AS s SET
    point_count = s.point_count + u.n,
    first_step = LEAST(s.first_step, u.first_step),
    last_value = CASE WHEN s.last_step IS NULL OR u.last_step >= s.last_step
                      THEN u.last_value ELSE s.last_value END,
    last_time_us = CASE WHEN s.last_step IS NULL OR u.last_step >= s.last_step
                        THEN u.last_time_us ELSE s.last_time_us END,
    last_step = GREATEST(s.last_step, u.last_step)
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::float8[],
            $6::bigint[]) AS u(series_id, n, first_step, last_step, last_value, last_time_us)
WHERE s.series_id = u.series_id
"""


def series_key(host: str, process_index: int | None, labels: dict[str, str]) -> str:
    """The canonical identity text of a series within its (run, metric)."""
    return json.dumps([host, process_index, sorted(labels.items())], separators=(",", ":"))


@dataclass(frozen=True)
class SeriesRow:
    """A stored series and its counters."""

    series_id: int
    run_id: str
    metric: str
    host: str
    process_index: int | None
    labels: dict[str, str]
    point_count: int
    first_step: int | None
    last_step: int | None
    last_value: float | None
    last_time_us: int | None


@dataclass(frozen=True)
class BucketRow:
    """Aggregates of one output bucket of one group."""

    group: int
    bucket: int
    count: int
    nan_count: int
    min: float | None
    max: float | None
    sum: float | None
    first_step: int
    last_step: int
    last_value: float
    last_series_id: int
    """A series of the group whose point at ``last_step`` gave ``last_value``."""


@dataclass(frozen=True)
class StoreResult:
    """What storing a batch did."""

    points: int
    dropped_points: int
    messages: int


@dataclass
class _Pending:
    key: tuple[str, str, str]
    host: str
    process_index: int | None
    labels: dict[str, str]
    steps: list[int]
    times: list[int]
    values: list[float]


class MetricsRepository:
    """Metric points, series, rollups and the ledger of bus messages already stored."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        schema: str,
        max_series_per_metric: int = MAX_LABEL_SETS_PER_METRIC,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._max_series = max_series_per_metric

    async def means(
        self, run_ids: Sequence[str], metrics: Sequence[str]
    ) -> dict[tuple[str, str], float]:
        """The mean of every non-NaN value of ``metrics`` in each run (all its series), from
        the coarsest rollups: a few rows per series, whatever its length."""
        rows = await self._pool.fetch(
            "SELECT s.run_id, s.metric, sum(r.sum) AS total,"
            " sum(r.count - r.nan_count)::float8 AS n"
            " FROM metric_series s JOIN metric_rollups r"
            " ON r.series_id = s.series_id AND r.width_log2 = $3"
            " WHERE s.run_id = ANY($1::text[]) AND s.metric = ANY($2::text[])"
            " GROUP BY s.run_id, s.metric",
            list(run_ids),
            list(metrics),
            ROLLUP_LEVELS[-1],
        )
        return {
            (row["run_id"], row["metric"]): row["total"] / row["n"]
            for row in rows
            if row["n"] and row["total"] is not None
        }

    async def store_messages(self, messages: Sequence[MetricPointsReceived]) -> StoreResult:
        """Store the points of messages not stored before, with their rollups and series.

        The ledger insert, the COPY and the rollup merge share one transaction, so a message
        is either fully stored and recorded, or neither: a redelivery after a crash stores it
        exactly once and rollups never count a point twice. A message twice in one batch (a
        retry past JetStream's dedupe window beside its original) is stored once too.
        """
        messages = list({message.event_id: message for message in messages}.values())
        async with self._pool.acquire() as conn, conn.transaction():
            fresh = await conn.fetch(
                "INSERT INTO metric_messages (event_id, run_id, point_count)"
                " SELECT * FROM unnest($1::uuid[], $2::text[], $3::integer[])"
                " ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
                [message.event_id for message in messages],
                [message.run_id for message in messages],
                [message.point_count() for message in messages],
            )
            fresh_ids = {row["event_id"] for row in fresh}
            pending = _group([m for m in messages if m.event_id in fresh_ids])
            if not pending:
                return StoreResult(0, 0, 0)
            ids = await self._series_ids(conn, pending)
            stored = [(ids[p.key], p) for p in pending.values() if p.key in ids]
            dropped = sum(len(p.steps) for p in pending.values() if p.key not in ids)
            if stored:
                await self._write(conn, stored)
        return StoreResult(
            points=sum(len(p.steps) for _, p in stored),
            dropped_points=dropped,
            messages=len(fresh_ids),
        )

    async def _series_ids(
        self, conn: asyncpg.Connection, pending: dict[tuple[str, str, str], _Pending]
    ) -> dict[tuple[str, str, str], int]:
        """Ids of the batch's series, creating new ones within the per-metric bound."""
        keys = list(pending)
        rows = await conn.fetch(
            "SELECT series_id, run_id, metric, series_key FROM metric_series"
            " WHERE (run_id, metric, series_key) IN"
            " (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))",
            [k[0] for k in keys],
            [k[1] for k in keys],
            [k[2] for k in keys],
        )
        ids = {(r["run_id"], r["metric"], r["series_key"]): r["series_id"] for r in rows}
        missing = [key for key in keys if key not in ids]
        if not missing:
            return ids
        counts = await conn.fetch(
            "SELECT run_id, metric, count(*) AS n FROM metric_series"
            " WHERE (run_id, metric) IN (SELECT * FROM unnest($1::text[], $2::text[]))"
            " GROUP BY run_id, metric",
            [k[0] for k in missing],
            [k[1] for k in missing],
        )
        room = {(r["run_id"], r["metric"]): self._max_series - r["n"] for r in counts}
        allowed = []
        for key in missing:
            left = room.get(key[:2], self._max_series)
            if left > 0:
                allowed.append(key)
                room[key[:2]] = left - 1
        if allowed:
            created = await conn.fetch(
                "INSERT INTO metric_series (run_id, metric, host, process_index, labels,"
                " series_key)"
                " SELECT r, m, h, p, l::jsonb, k FROM unnest($1::text[], $2::text[],"
                " $3::text[], $4::integer[], $5::text[], $6::text[]) AS u(r, m, h, p, l, k)"
                # a replica may have created it meanwhile: the no-op update returns its id
                " ON CONFLICT (run_id, metric, series_key) DO UPDATE SET series_key ="
                " EXCLUDED.series_key RETURNING series_id, run_id, metric, series_key",
                [k[0] for k in allowed],
                [k[1] for k in allowed],
                [pending[k].host for k in allowed],
                [pending[k].process_index for k in allowed],
                [json.dumps(pending[k].labels) for k in allowed],
                [k[2] for k in allowed],
            )
            ids.update(
                {(r["run_id"], r["metric"], r["series_key"]): r["series_id"] for r in created}
            )
        return ids

    async def _write(self, conn: asyncpg.Connection, stored: list[tuple[int, _Pending]]) -> None:
        records: list[tuple[int, int, int, float]] = []
        stats: list[tuple[int, int, int, int, float, int]] = []
        for series_id, p in stored:
            records.extend(zip(repeat(series_id), p.steps, p.times, p.values, strict=False))
            last_step = max(p.steps)
            # the last occurrence of the highest step: the newest write of it wins
            at = len(p.steps) - 1 - p.steps[::-1].index(last_step)
            stats.append(
                (series_id, len(p.steps), min(p.steps), last_step, p.values[at], p.times[at])
            )
        stats.sort()
        columns = [list(column) for column in zip(*stats, strict=True)]
        # Lock the batch's series first, in id order: a replica writing the same series
        # waits here, so each rollup recompute sees every committed point of its buckets.
        await conn.execute(
            "SELECT 1 FROM metric_series WHERE series_id = ANY($1::bigint[])"
            " ORDER BY series_id FOR UPDATE",
            columns[0],
        )
        await conn.execute(_SERIES_STATS_SQL, *columns)
        await conn.copy_records_to_table(
            "metric_points", records=records, columns=_POINT_COLUMNS, schema_name=self._schema
        )
        fine: dict[tuple[int, int], _Bucket] = {}
        for series_id, p in stored:
            _fold(fine, series_id, p.steps, p.values, ROLLUP_LEVELS[0])
        await conn.execute(_ROLLUP_MERGE_SQL, *_bucket_columns(_every_level(fine)))

    async def list_series(self, run_ids: Sequence[str], metric: str | None) -> list[SeriesRow]:
        """The series of the runs (of one metric, or all), by run, metric and identity."""
        rows = await self._pool.fetch(
            "SELECT series_id, run_id, metric, host, process_index, labels, point_count,"
            " first_step, last_step, last_value, last_time_us FROM metric_series"
            " WHERE run_id = ANY($1::text[]) AND ($2::text IS NULL OR metric = $2)"
            " AND point_count > 0 ORDER BY run_id, metric, series_key",
            list(run_ids),
            metric,
        )
        return [_series_row(row) for row in rows]

    async def list_metrics(self, run_id: str) -> list[tuple[str, int, int]]:
        """(metric, points, highest step) of every metric the run recorded."""
        rows = await self._pool.fetch(
            "SELECT metric, sum(point_count)::bigint AS n, max(last_step) AS last_step"
            " FROM metric_series WHERE run_id = $1 AND point_count > 0"
            " GROUP BY metric ORDER BY metric",
            run_id,
        )
        return [(row["metric"], row["n"], row["last_step"]) for row in rows]

    async def read_points(
        self, series_ids: Sequence[int], limit: int, after: tuple[int, int, int] | None
    ) -> list[tuple[int, int, int, float]]:
        """(step, series id, time µs, value) in that order, after a keyset position."""
        if after is None:
            after = (-1, 0, 0)
        # Per series an index range scan of at most a page (LATERAL ... LIMIT), then a merge
        # of those: a page never sorts a whole series. `step >= $2` is what the index uses.
        rows = await self._pool.fetch(
            "SELECT x.step, x.series_id, x.time_us, x.value"
            " FROM unnest($1::bigint[]) AS s(id) CROSS JOIN LATERAL ("
            "  SELECT p.step, p.series_id, p.time_us, p.value FROM metric_points p"
            "  WHERE p.series_id = s.id AND p.step >= $2"
            "  AND (p.step, p.series_id, p.time_us) > ($2, $3, $4)"
            "  ORDER BY p.step, p.time_us LIMIT $5) AS x"
            " ORDER BY x.step, x.series_id, x.time_us LIMIT $5",
            list(series_ids),
            *after,
            limit,
        )
        return [(r["step"], r["series_id"], r["time_us"], r["value"]) for r in rows]

    async def read_buckets(
        self, groups: dict[int, int], width: int, level: int | None, first: int, last: int
    ) -> list[BucketRow]:
        """Aggregates per (group, step // width) of buckets ``first`` … ``last``, from rollup
        ``level`` or raw points (None).

        ``groups`` maps series id → group: series of one group merge into one line. With a
        rollup level, ``width`` is a multiple of its bucket width, so buckets never straddle
        and a whole output bucket is read: the first and last are exact too. ``last_value``
        and ``last_series_id`` come from one point; a tie on the step goes to the latest
        time (raw points only), then to the highest series id.
        """
        ids, numbers = list(groups), list(groups.values())
        low, high = first * width, last * width + width - 1
        if level is None:
            # the join's step range is what the (series, step, time) index scans, per series
            query = """
            SELECT g.grp, p.step / $3 AS b, count(*) AS n,
                   count(*) FILTER (WHERE p.value = 'NaN') AS nan_n,
                   min(p.value) FILTER (WHERE p.value <> 'NaN') AS lo,
                   max(p.value) FILTER (WHERE p.value <> 'NaN') AS hi,
                   sum(p.value) FILTER (WHERE p.value <> 'NaN') AS total,
                   min(p.step) AS first_step, max(p.step) AS last_step,
                   (array_agg(p.value ORDER BY p.step DESC, p.time_us DESC, p.series_id DESC))[1]
                       AS last_value,
                   (array_agg(p.series_id ORDER BY p.step DESC, p.time_us DESC,
                              p.series_id DESC))[1] AS last_series
            FROM unnest($1::bigint[], $2::int[]) AS g(series_id, grp)
            JOIN metric_points p ON p.series_id = g.series_id AND p.step BETWEEN $4 AND $5
            GROUP BY 1, 2 ORDER BY 1, 2"""
            rows = await self._pool.fetch(query, ids, numbers, width, low, high)
        elif width == 1 << level and len(set(numbers)) == len(numbers):
            # one series per line at the level's own width: the rollup rows are the answer
            query = """
            SELECT g.grp, r.bucket AS b, r.count AS n, r.nan_count AS nan_n, r.min AS lo,
                   r.max AS hi, r.sum AS total, r.first_step, r.last_step, r.last_value,
                   r.series_id AS last_series
            FROM unnest($1::bigint[], $2::int[]) AS g(series_id, grp)
            JOIN metric_rollups r ON r.series_id = g.series_id AND r.width_log2 = $3
                                 AND r.bucket BETWEEN $4 AND $5
            ORDER BY 1, 2"""
            rows = await self._pool.fetch(query, ids, numbers, level, low >> level, high >> level)
        else:
            query = """
            SELECT g.grp, (r.bucket << $4) / $3 AS b, sum(r.count)::bigint AS n,
                   sum(r.nan_count)::bigint AS nan_n, min(r.min) AS lo, max(r.max) AS hi,
                   sum(r.sum) AS total, min(r.first_step) AS first_step,
                   max(r.last_step) AS last_step,
                   (array_agg(r.last_value ORDER BY r.last_step DESC, r.series_id DESC))[1]
                       AS last_value,
                   (array_agg(r.series_id ORDER BY r.last_step DESC, r.series_id DESC))[1]
                       AS last_series
            FROM unnest($1::bigint[], $2::int[]) AS g(series_id, grp)
            JOIN metric_rollups r ON r.series_id = g.series_id AND r.width_log2 = $4
                                 AND r.bucket BETWEEN $5 AND $6
            GROUP BY 1, 2 ORDER BY 1, 2"""
            rows = await self._pool.fetch(
                query, ids, numbers, width, level, low >> level, high >> level
            )
        return [
            BucketRow(
                group=r["grp"],
                bucket=r["b"],
                count=r["n"],
                nan_count=r["nan_n"],
                min=r["lo"],
                max=r["hi"],
                sum=r["total"],
                first_step=r["first_step"],
                last_step=r["last_step"],
                last_value=r["last_value"],
                last_series_id=r["last_series"],
            )
            for r in rows
        ]

    async def point_times(self, points: Sequence[tuple[int, int]]) -> dict[tuple[int, int], int]:
        """Time (µs) of the point at each (series id, step); the latest of a rewritten step.

        One index probe per pair (the (series, step, time) index read backwards, one row),
        so the cost follows the number of buckets, never the series' length.
        """
        unique = list(dict.fromkeys(points))
        rows = await self._pool.fetch(
            "SELECT q.series_id, q.step, t.time_us"
            " FROM unnest($1::bigint[], $2::bigint[]) AS q(series_id, step)"
            " CROSS JOIN LATERAL (SELECT p.time_us FROM metric_points p"
            "  WHERE p.series_id = q.series_id AND p.step = q.step"
            "  ORDER BY p.time_us DESC LIMIT 1) AS t",
            [series_id for series_id, _ in unique],
            [step for _, step in unique],
        )
        return {(r["series_id"], r["step"]): r["time_us"] for r in rows}


def _series_row(row: asyncpg.Record) -> SeriesRow:
    return SeriesRow(
        series_id=row["series_id"],
        run_id=row["run_id"],
        metric=row["metric"],
        host=row["host"],
        process_index=row["process_index"],
        labels=json.loads(row["labels"]),
        point_count=row["point_count"],
        first_step=row["first_step"],
        last_step=row["last_step"],
        last_value=row["last_value"],
        last_time_us=row["last_time_us"],
    )


def _group(messages: Sequence[MetricPointsReceived]) -> dict[tuple[str, str, str], _Pending]:
    """The batch's points per series (several messages may carry one series)."""
    pending: dict[tuple[str, str, str], _Pending] = {}
    for message in messages:
        received_us = None
        for columns in message.series:
            if not columns.steps:
                continue
            key = (
                message.run_id,
                columns.name,
                series_key(columns.host, columns.process_index, columns.labels),
            )
            entry = pending.get(key)
            if entry is None:
                entry = pending[key] = _Pending(
                    key, columns.host, columns.process_index, columns.labels, [], [], []
                )
            entry.steps.extend(columns.steps)
            entry.values.extend(columns.values)
            if columns.times_unix_us is not None:
                entry.times.extend(columns.times_unix_us)
            else:
                if received_us is None:
                    received_us = to_unix_micros(message.occurred_at)
                entry.times.extend(repeat(received_us, len(columns.steps)))
    return pending


# count, NaN count, min, max, sum (non-NaN; None when none), first step, last step, last value
_Bucket = list[Any]


def _fold(
    into: dict[tuple[int, int], _Bucket],
    series_id: int,
    steps: list[int],
    values: list[float],
    shift: int,
) -> None:
    """Aggregate points into buckets of 2**shift steps, one ascending run at a time.

    Points mostly come in step order, so a bucket is usually one slice: a tight loop finds
    its end and builtins aggregate it. A run breaks where steps go down; partial buckets
    merge, later points winning a tie on ``last``.
    """
    total = len(steps)
    start = 0
    while start < total:
        first = steps[start]
        limit = ((first >> shift) + 1) << shift
        end = start + 1
        while end < total and first <= steps[end] < limit and steps[end] >= steps[end - 1]:
            end += 1
        chunk = values[start:end]
        real = [value for value in chunk if value == value]  # noqa: PLR0124  # NaN test
        bucket: _Bucket = [
            end - start,
            end - start - len(real),
            min(real) if real else None,
            max(real) if real else None,
            sum(real) if real else None,
            first,
            steps[end - 1],
            chunk[-1],
        ]
        key = (series_id, first >> shift)
        seen = into.get(key)
        into[key] = bucket if seen is None else _merge(seen, bucket)
        start = end


def _merge(old: _Bucket, new: _Bucket) -> _Bucket:
    def pick(a: float | None, b: float | None, better: Any) -> float | None:
        return b if a is None else a if b is None else better(a, b)

    return [
        old[0] + new[0],
        old[1] + new[1],
        pick(old[2], new[2], min),
        pick(old[3], new[3], max),
        pick(old[4], new[4], lambda a, b: a + b),
        min(old[5], new[5]),
        max(old[6], new[6]),
        new[7] if new[6] >= old[6] else old[7],
    ]


def _every_level(fine: dict[tuple[int, int], _Bucket]) -> dict[tuple[int, int, int], _Bucket]:
    """The batch's buckets at every rollup level, each coarser level folded from the one
    below (a few rows per series, whatever the batch's size)."""
    levels: dict[tuple[int, int, int], _Bucket] = {
        (series_id, ROLLUP_LEVELS[0], bucket): row for (series_id, bucket), row in fine.items()
    }
    below = fine
    for finer, level in itertools.pairwise(ROLLUP_LEVELS):
        above: dict[tuple[int, int], _Bucket] = {}
        for (series_id, bucket), row in below.items():
            key = (series_id, bucket >> (level - finer))
            seen = above.get(key)
            above[key] = row if seen is None else _merge(seen, row)
        levels.update(
            {(series_id, level, bucket): row for (series_id, bucket), row in above.items()}
        )
        below = above
    return levels


def _bucket_columns(buckets: dict[tuple[int, int, int], _Bucket]) -> list[list[Any]]:
    """Rollup rows as the merge's columns, in key order (replicas lock rows alike)."""
    columns: list[list[Any]] = [[] for _ in range(11)]
    for (series_id, level, bucket), row in sorted(buckets.items(), key=lambda item: item[0]):
        columns[0].append(series_id)
        columns[1].append(level)
        columns[2].append(bucket)
        for index, value in enumerate(row, start=3):
            columns[index].append(value)
    return columns
