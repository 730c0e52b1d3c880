"""All SQL about metric points, their series, rollups and the stored-message ledger.

Points are stored in chunks (``metric_chunks``: up to ``CHUNK_POINTS`` points of one series
per row, encoded by ``chunks``), in partitions of one project and one 7-day period of storage
each, created on demand and dropped whole by retention. Reads fetch only the chunks that can
hold what they need and work on numpy columns (``PointBlock``).
"""

import hashlib
import json
import re
import time
import zlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
import numpy as np
import structlog

from mldiag_run_registry.metrics import blocks, chunks
from mldiag_run_registry.metrics.blocks import Float64s, Int64s, PointBlock
from mldiag_schemas.telemetry import (
    MAX_LABEL_SETS_PER_METRIC,
    MetricPointsReceived,
    to_unix_micros,
)

log = structlog.get_logger(__name__)

ROLLUP_LEVELS: tuple[int, ...] = (6, 8, 10, 12, 14, 16, 18)
"""Rollup bucket widths as powers of two (64 … 262144 steps). With a factor of 4 between
levels a read for N buckets touches between N and 4N rollup rows; below 64 steps per
bucket the raw points are few enough to aggregate directly."""

PARTITION_DAYS = 7
"""Each chunk partition holds one project's chunks stored over 7 days (first day a multiple
of 7 days since 1970-01-01 UTC): retention drops whole weeks of a project."""

SCAN_BLOCK_POINTS = 262_144
"""Points per block of ``scan_points`` at most (bounded memory whatever the range)."""

_CHUNK_COLUMNS = (
    "project",
    "stored_day",
    "series_id",
    "first_step",
    "last_step",
    "point_count",
    "last_time_us",
    "codec",
    "data",
)
_PARTITION_NAME = re.compile(r"^metric_chunks_[0-9a-f]{12}_[0-9]+$")
_MAX_INT64 = (1 << 63) - 1

# Every level is aggregated from the batch in memory (numpy, from the batch's columns) and
# merged additively into what is stored, in one statement; the ledger guarantees a message
# is folded in once, and the merge commutes, so replicas writing the same series agree.
_ROLLUP_COLUMNS = (
    "(series_id, width_log2, bucket, count, nan_count, min, max, sum, first_step, last_step,"
    " last_value, last_time_us)"
)

_ROLLUP_MERGE_SQL = f"""
INSERT INTO metric_rollups AS r {_ROLLUP_COLUMNS}
SELECT * FROM unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::bigint[], $5::bigint[],
                     $6::float8[], $7::float8[], $8::float8[], $9::bigint[], $10::bigint[],
                     $11::float8[], $12::bigint[])
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
    -- under last_value's condition: time and value always describe the same point
    last_time_us = CASE WHEN EXCLUDED.last_step >= r.last_step THEN EXCLUDED.last_time_us
                        ELSE r.last_time_us END,
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
    last_step = GREATEST(s.last_step, u.last_step),
    chunk_span = GREATEST(s.chunk_span, u.chunk_span)
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::float8[],
            $6::bigint[], $7::bigint[])
    AS u(series_id, n, first_step, last_step, last_value, last_time_us, chunk_span)
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
    """Aggregates of one output bucket of one group (its fields in the order the bucket
    queries select them: a row is made from its record's values)."""

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
    last_time_us: int | None
    """The time of the point that gave ``last_value``; None for rollup rows stored before
    rollups kept it (``point_times`` answers for those)."""


@dataclass(frozen=True)
class StoreResult:
    """What storing a batch did."""

    points: int
    dropped_points: int
    messages: int


def partition_name(project: str, first_day: int) -> str:
    """The table of one project's chunks stored from ``first_day`` (days since 1970-01-01
    UTC, a multiple of ``PARTITION_DAYS``): hashed, since project names are not identifiers."""
    digest = hashlib.sha256(project.encode()).hexdigest()[:12]
    return f"metric_chunks_{digest}_{first_day}"


@dataclass
class _Pending:
    key: tuple[str, str, str]
    host: str
    process_index: int | None
    labels: dict[str, str]
    steps: list[Int64s] = field(default_factory=list)
    times: list[Int64s] = field(default_factory=list)
    values: list[Float64s] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(part) for part in self.steps)


@dataclass(frozen=True)
class _Chunk:
    series_id: int
    first_step: int
    point_count: int
    codec: int
    data: bytes


class MetricsRepository:
    """Metric points, series, rollups and the ledger of bus messages already stored."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        schema: str,
        max_series_per_metric: int = MAX_LABEL_SETS_PER_METRIC,
        chunk_points: int = chunks.CHUNK_POINTS,
        chunk_grid: int = chunks.CHUNK_GRID,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._max_series = max_series_per_metric
        self._chunk_points = chunk_points
        self._chunk_grid = chunk_grid
        self._clock = clock
        # partitions known to exist: (project, first day); creating one is a round trip and
        # a lock on the parent, so it is done once per process and week
        self._partitions: set[tuple[str, int]] = set()

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

    async def store_messages(
        self, messages: Sequence[MetricPointsReceived], projects: Mapping[str, str]
    ) -> StoreResult:
        """Store the points of messages not stored before, with their rollups and series.

        ``projects`` maps run id → project: a run's chunks go to its project's partitions (a
        run missing from it gets the project ''). The ledger insert, the series update, the
        chunks' COPY and the rollup merge share one transaction, so a message is either fully
        stored and recorded, or neither: a redelivery after a crash stores it exactly once and
        rollups never count a point twice. A message twice in one batch (a retry past
        JetStream's dedupe window beside its original) is stored once too.
        """
        messages = list({message.event_id: message for message in messages}.values())
        if not messages:
            return StoreResult(0, 0, 0)
        day = int(self._clock() // 86_400)
        owners = {message.run_id: projects.get(message.run_id, "") for message in messages}
        await self._ensure_partitions(set(owners.values()), day)
        try:
            return await self._store(messages, owners, day)
        except asyncpg.CheckViolationError:
            # "no partition for row": another replica's retention dropped a partition this
            # process still knew; find out again and retry once (the transaction rolled back)
            self._partitions.clear()
            await self._ensure_partitions(set(owners.values()), day)
            return await self._store(messages, owners, day)

    async def _store(
        self, messages: list[MetricPointsReceived], owners: Mapping[str, str], day: int
    ) -> StoreResult:
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
                return StoreResult(0, 0, len(fresh_ids))
            ids = await self._series_ids(conn, pending)
            stored = sorted((ids[p.key], p) for p in pending.values() if p.key in ids)
            dropped = sum(p.count for p in pending.values() if p.key not in ids)
            if stored:
                await self._write(conn, stored, owners, day)
        return StoreResult(
            points=sum(p.count for _, p in stored),
            dropped_points=dropped,
            messages=len(fresh_ids),
        )

    async def _ensure_partitions(self, projects: set[str], day: int) -> None:
        """Create the partitions of ``projects`` for ``day``'s week unless they exist.

        Outside the batch's transaction: CREATE TABLE ... PARTITION OF locks the parent, and
        the store's transaction must not hold that lock. Replicas may race here: each creates
        under an advisory lock on the table's name, IF NOT EXISTS, and records it ON CONFLICT
        DO NOTHING, so whoever comes second changes nothing.
        """
        first_day = day - day % PARTITION_DAYS
        missing = sorted(p for p in projects if (p, first_day) not in self._partitions)
        if not missing:
            return
        async with self._pool.acquire() as conn:
            for project in missing:
                name = partition_name(project, first_day)
                async with conn.transaction():
                    await conn.execute(
                        "SELECT pg_advisory_xact_lock($1)",
                        zlib.crc32(f"mldiag-metric-chunks:{self._schema}:{name}".encode()),
                    )
                    known = await conn.fetchval(
                        "SELECT true FROM metric_chunk_partitions WHERE table_name = $1", name
                    )
                    if not known:
                        # DDL takes no parameters: format() quotes the project as a literal
                        create = await conn.fetchval(
                            "SELECT format('CREATE TABLE IF NOT EXISTS %I PARTITION OF"
                            " metric_chunks FOR VALUES FROM (%L, %s) TO (%L, %s)',"
                            " $1::text, $2::text, $3::integer, $2::text, $4::integer)",
                            name,
                            project,
                            first_day,
                            first_day + PARTITION_DAYS,
                        )
                        await conn.execute(create)
                        await conn.execute(
                            f"ALTER TABLE {name} ALTER COLUMN data SET STORAGE EXTERNAL"
                        )
                        await conn.execute(
                            "INSERT INTO metric_chunk_partitions"
                            " (table_name, project, first_day, end_day)"
                            " VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                            name,
                            project,
                            first_day,
                            first_day + PARTITION_DAYS,
                        )
                        log.info(
                            "metrics.partition.created",
                            table=name,
                            project=project,
                            first_day=first_day,
                        )
                self._partitions.add((project, first_day))

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

    async def _write(
        self,
        conn: asyncpg.Connection,
        stored: list[tuple[int, _Pending]],
        owners: Mapping[str, str],
        day: int,
    ) -> None:
        """Series counters, chunks and rollups of the batch's points (series in id order)."""
        counts = np.array([p.count for _, p in stored], dtype=np.int64)
        series_ids = np.repeat(np.array([sid for sid, _ in stored], dtype=np.int64), counts)
        steps = np.concatenate([part for _, p in stored for part in p.steps])
        times = np.concatenate([part for _, p in stored for part in p.times])
        values = np.concatenate([part for _, p in stored for part in p.values])
        # (series, step) order, stable: of points at one step the later write stays later
        order = chunks.write_order(series_ids, steps)
        if order is not None:
            series_ids, steps = series_ids[order], steps[order]
            times, values = times[order], values[order]
        rollups = chunks.fold_rollups(series_ids, steps, times, values, ROLLUP_LEVELS)
        series_ends = np.cumsum(counts) - 1
        series_starts = series_ends - counts + 1
        # the chunks keep (step, time) order; only a step written twice needs another sort
        same_step = (np.diff(series_ids) == 0) & (np.diff(steps) == 0)
        if np.any(same_step):
            by_time = np.lexsort((times, steps, series_ids))
            c_steps, c_times, c_values = steps[by_time], times[by_time], values[by_time]
        else:
            c_steps, c_times, c_values = steps, times, values
        owner_of = {series_id: owners.get(p.key[0], "") for series_id, p in stored}
        records = self._chunk_records(owner_of, day, series_ids, c_steps, c_times, c_values)
        # the widest chunk of each series bounds the index range a read searches
        spans: dict[int, int] = {}
        for record in records:
            spans[record[2]] = max(spans.get(record[2], 0), record[4] - record[3])
        stats = [
            [sid for sid, _ in stored],
            counts.tolist(),
            steps[series_starts].tolist(),
            steps[series_ends].tolist(),
            values[series_ends].tolist(),
            times[series_ends].tolist(),
            [spans[sid] for sid, _ in stored],
        ]
        # Lock the batch's series first, in id order: a replica writing the same series
        # waits here, so each rollup merge sees every committed point of its buckets.
        await conn.execute(
            "SELECT 1 FROM metric_series WHERE series_id = ANY($1::bigint[])"
            " ORDER BY series_id FOR UPDATE",
            stats[0],
        )
        await conn.execute(_SERIES_STATS_SQL, *stats)
        await conn.copy_records_to_table(
            "metric_chunks", records=records, columns=_CHUNK_COLUMNS, schema_name=self._schema
        )
        await conn.execute(_ROLLUP_MERGE_SQL, *rollups.merge_arguments())

    def _chunk_records(
        self,
        owner_of: Mapping[int, str],
        day: int,
        series_ids: Int64s,
        steps: Int64s,
        times: Int64s,
        values: Float64s,
    ) -> list[tuple[str, int, int, int, int, int, int, int, bytes]]:
        """COPY rows of the chunks of points sorted by (series, step, time)."""
        starts = chunks.chunk_starts(series_ids, steps, self._chunk_points, self._chunk_grid)
        stops = np.append(starts[1:], len(steps))
        records = []
        for low, high in zip(starts.tolist(), stops.tolist(), strict=True):
            series_id = int(series_ids[low])
            records.append(
                (
                    owner_of[series_id],
                    day,
                    series_id,
                    int(steps[low]),
                    int(steps[high - 1]),
                    high - low,
                    int(times[high - 1]),  # the latest time at the last step
                    chunks.CODEC_PLANES,
                    chunks.encode(steps[low:high], times[low:high], values[low:high]),
                )
            )
        return records

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
        self,
        project: str,
        series_ids: Sequence[int],
        limit: int,
        after: tuple[int, int, int] | None,
    ) -> PointBlock:
        """Up to ``limit`` points in (step, series id, time) order, after a keyset position.

        Per series only the chunks that can hold the page are fetched (the (series_id,
        first_step) index from the position's step less the series' widest chunk span), so a
        page costs the same at the start or the end of a 100M-point series.
        """
        if not series_ids or limit <= 0:
            return PointBlock.empty()
        async with self._pool.acquire() as conn:
            return await self._page(conn, project, series_ids, limit, after, None)

    async def scan_points(
        self,
        project: str,
        series_ids: Sequence[int],
        start_step: int | None,
        end_step: int | None,
    ) -> AsyncIterator[PointBlock]:
        """Every point of the series from ``start_step`` to ``end_step`` (inclusive; None:
        open) in (step, series id, time) order, in blocks of at most ``SCAN_BLOCK_POINTS``."""
        if not series_ids:
            return
        after = (-1 if start_step is None else start_step - 1, _MAX_INT64, _MAX_INT64)
        size = SCAN_BLOCK_POINTS
        while True:
            async with self._pool.acquire() as conn:
                block = await self._page(conn, project, series_ids, size + 1, after, end_step)
            if len(block) <= size:
                if len(block):
                    yield block
                return
            # Points equal in (step, series, time) (a step written twice at one time) must
            # not straddle two blocks: the next block starts after that key. So the block
            # ends before the tie that the first point left out belongs to.
            cut = size
            while cut > 0 and blocks.same_key(block, cut - 1, size):
                cut -= 1
            if cut == 0:  # more ties than a block: the block grows to hold them all
                size *= 2
                continue
            yield blocks.head(block, cut)
            last = cut - 1
            after = (int(block.steps[last]), int(block.series_ids[last]), int(block.times_us[last]))
            size = SCAN_BLOCK_POINTS

    async def _page(
        self,
        conn: asyncpg.Connection,
        project: str,
        series_ids: Sequence[int],
        limit: int,
        after: tuple[int, int, int] | None,
        end_step: int | None,
    ) -> PointBlock:
        """The first ``limit`` points after ``after`` (up to ``end_step``), chunk by chunk.

        Chunks come per series in first_step order, a few at a time: a series is complete
        once the page's last step lies below the first step of every chunk not fetched.
        Overlapping chunks (steps written out of order) only make that take more rounds.
        """
        low_step, after_id, after_time = after if after is not None else (-1, 0, 0)
        high_step = _MAX_INT64 if end_step is None else end_step
        # a dense series' chunks hold a grid cell's points: ask for enough for the page, and
        # a few more for the partial first chunk and the short ones at batch boundaries
        want = -(-limit // min(self._chunk_points, self._chunk_grid)) + 4
        todo = list(dict.fromkeys(series_ids))
        done: list[PointBlock] = []
        while todo:
            fetched = await self._chunks(conn, project, todo, low_step, high_step, want)
            by_series: dict[int, list[_Chunk]] = {sid: [] for sid in todo}
            for chunk in fetched:
                by_series[chunk.series_id].append(chunk)
            again = []
            for series_id, found in by_series.items():
                block = blocks.after_position(
                    _decode(found), low_step, after_id, after_time, high_step, series_id
                )
                if len(found) == want:
                    # more chunks may follow: they start at or after the last one fetched
                    if len(block) < limit:
                        again.append(series_id)
                        continue
                    cut = int(np.partition(block.steps, limit - 1)[limit - 1])
                    if found[-1].first_step <= cut:
                        again.append(series_id)
                        continue
                done.append(block)
            todo = again
            want *= 2
        return blocks.first_in_order(blocks.concat(done), limit)

    async def _chunks(
        self,
        conn: asyncpg.Connection,
        project: str,
        series_ids: Sequence[int],
        low_step: int,
        high_step: int,
        limit: int | None,
    ) -> list[_Chunk]:
        """Per series, the first ``limit`` (None: all) chunks, by first step, that can hold
        steps from ``low_step`` to ``high_step``.

        A chunk reaching ``low_step`` starts at most the series' widest chunk span before it:
        that bounds the index range. The project prunes partitions; '' is searched too, where
        points of a run unknown when stored (or when migrated) went.
        """
        rows = await conn.fetch(
            "SELECT c.series_id, c.first_step, c.point_count, c.codec, c.data"
            " FROM metric_series s CROSS JOIN LATERAL ("
            "  SELECT k.series_id, k.first_step, k.point_count, k.codec, k.data"
            "  FROM metric_chunks k"
            "  WHERE k.project = ANY($2::text[]) AND k.series_id = s.series_id"
            "  AND k.first_step >= $3 - s.chunk_span AND k.first_step <= $4"
            "  AND k.last_step >= $3"
            "  ORDER BY k.first_step LIMIT $5) AS c"
            " WHERE s.series_id = ANY($1::bigint[])"
            " ORDER BY c.series_id, c.first_step",
            list(series_ids),
            [project, ""] if project else [""],
            max(low_step, 0),
            high_step,
            limit,
        )
        return [
            _Chunk(r["series_id"], r["first_step"], r["point_count"], r["codec"], r["data"])
            for r in rows
        ]

    async def read_buckets(
        self,
        project: str,
        groups: dict[int, int],
        width: int,
        level: int | None,
        first: int,
        last: int,
    ) -> list[BucketRow]:
        """Aggregates per (group, step // width) of buckets ``first`` … ``last``, from rollup
        ``level`` or raw points (None).

        ``groups`` maps series id → group: series of one group merge into one line. With a
        rollup level, ``width`` is a multiple of its bucket width, so buckets never straddle
        and a whole output bucket is read: the first and last are exact too. ``last_value``,
        ``last_series_id`` and ``last_time_us`` come from one point; a tie on the step goes
        to the latest time (raw points only), then to the highest series id.
        """
        ids, numbers = list(groups), list(groups.values())
        low, high = first * width, last * width + width - 1
        if level is None:
            return await self._raw_buckets(project, groups, width, low, high)
        if width == 1 << level and len(set(numbers)) == len(numbers):
            # one series per line at the level's own width: the rollup rows are the answer
            query = """
            SELECT g.grp, r.bucket AS b, r.count AS n, r.nan_count AS nan_n, r.min AS lo,
                   r.max AS hi, r.sum AS total, r.first_step, r.last_step, r.last_value,
                   r.series_id AS last_series, r.last_time_us AS last_time
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
                       AS last_series,
                   (array_agg(r.last_time_us ORDER BY r.last_step DESC, r.series_id DESC))[1]
                       AS last_time
            FROM unnest($1::bigint[], $2::int[]) AS g(series_id, grp)
            JOIN metric_rollups r ON r.series_id = g.series_id AND r.width_log2 = $4
                                 AND r.bucket BETWEEN $5 AND $6
            GROUP BY 1, 2 ORDER BY 1, 2"""
            rows = await self._pool.fetch(
                query, ids, numbers, width, level, low >> level, high >> level
            )
        # By position, not by name: a chart reads up to 2000 rows, and the 12 lookups by
        # name were two thirds of making one.
        return [BucketRow(*row) for row in rows]

    async def _raw_buckets(
        self, project: str, groups: dict[int, int], width: int, low: int, high: int
    ) -> list[BucketRow]:
        """Buckets aggregated from the points of steps ``low`` … ``high`` (numpy)."""
        async with self._pool.acquire() as conn:
            found = await self._chunks(conn, project, list(groups), low, high, None)
        block = _decode(found)
        keep = (block.steps >= low) & (block.steps <= high)
        sids, steps = block.series_ids[keep], block.steps[keep]
        times, values = block.times_us[keep], block.values[keep]
        if not len(steps):
            return []
        members = np.array(list(groups), dtype=np.int64)
        numbers = np.array(list(groups.values()), dtype=np.int64)
        by_id = np.argsort(members)
        grp = numbers[by_id][np.searchsorted(members[by_id], sids)]
        bucket = steps // width
        # ascending (group, bucket, step, time, series): a bucket's last point is the one at
        # its highest step, latest time, then highest series id
        # one series' chunks decode in (step, time) order already: sort only when needed
        if len(groups) > 1 or np.any(np.diff(steps) < 0) or blocks.unordered_ties(steps, times):
            order = np.lexsort((sids, times, steps, bucket, grp))
            grp, bucket, sids = grp[order], bucket[order], sids[order]
            steps, times, values = steps[order], times[order], values[order]
        change = (np.diff(grp) != 0) | (np.diff(bucket) != 0)
        starts = np.concatenate(([0], np.flatnonzero(change) + 1))
        ends = np.append(starts[1:], len(steps)) - 1
        nan = np.isnan(values)
        counts = np.diff(np.append(starts, len(steps)))
        nan_counts = np.add.reduceat(nan.astype(np.int64), starts)
        lo = np.minimum.reduceat(np.where(nan, np.inf, values), starts)
        hi = np.maximum.reduceat(np.where(nan, -np.inf, values), starts)
        with np.errstate(invalid="ignore"):  # +Inf and -Inf together: NaN, as SQL's sum
            total = np.add.reduceat(np.where(nan, 0.0, values), starts)
        rows = []
        for index, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            real = int(counts[index]) > int(nan_counts[index])
            rows.append(
                BucketRow(
                    group=int(grp[start]),
                    bucket=int(bucket[start]),
                    count=int(counts[index]),
                    nan_count=int(nan_counts[index]),
                    min=float(lo[index]) if real else None,
                    max=float(hi[index]) if real else None,
                    sum=float(total[index]) if real else None,
                    first_step=int(steps[start]),
                    last_step=int(steps[end]),
                    last_value=float(values[end]),
                    last_series_id=int(sids[end]),
                    last_time_us=int(times[end]),
                )
            )
        return rows

    async def point_times(
        self, project: str, points: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], int]:
        """Time (µs) of the point at each (series id, step); the latest of a rewritten step.

        One index probe per pair lists the chunks that can hold its step. A chunk ending at
        the step answers from its row (it keeps the latest time at its last step; a dense
        series' chunks end where buckets of 1024 steps and more end); only chunks holding
        the step inside are fetched, each once, and decoded. The cost follows the number
        of pairs, never the series' length.
        """
        unique = list(dict.fromkeys(points))
        if not unique:
            return {}
        projects = [project, ""] if project else [""]
        async with self._pool.acquire() as conn:
            hits = await conn.fetch(
                # materialized, and OFFSET 0 keeping the lateral probe a probe: the lower
                # bound must reach the index condition (flattened, the planner merge-joined
                # every chunk of the series: 67 ms for 1000 probes instead of 4). The span is
                # a key lookup per pair: a join let the planner hash every series of the
                # store (a sequential scan of metric_series, growing with the store)
                "WITH q AS MATERIALIZED (SELECT u.series_id, u.step, u.step - (SELECT"
                "  s.chunk_span FROM metric_series s WHERE s.series_id = u.series_id) AS low"
                "  FROM unnest($1::bigint[], $2::bigint[]) AS u(series_id, step))"
                " SELECT q.series_id, q.step, h.first_step, h.last_step, h.last_time_us"
                " FROM q CROSS JOIN LATERAL (SELECT k.first_step, k.last_step, k.last_time_us"
                "  FROM metric_chunks k WHERE k.project = ANY($3::text[])"
                "  AND k.series_id = q.series_id AND k.first_step BETWEEN q.low AND q.step"
                "  AND k.last_step >= q.step OFFSET 0) AS h",
                [series_id for series_id, _ in unique],
                [step for _, step in unique],
                projects,
            )
            times: dict[tuple[int, int], int] = {}
            inside: dict[tuple[int, int, int], list[int]] = {}
            for hit in hits:
                key = (hit["series_id"], hit["step"])
                if hit["last_step"] == hit["step"]:
                    times[key] = max(times.get(key, -1), hit["last_time_us"])
                else:
                    chunk = (hit["series_id"], hit["first_step"], hit["last_step"])
                    inside.setdefault(chunk, []).append(hit["step"])
            if inside:
                keys = list(inside)
                rows = await conn.fetch(
                    "SELECT c.series_id, c.first_step, c.last_step, c.point_count, c.codec,"
                    " c.data FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])"
                    " AS q(series_id, first_step, last_step)"
                    " CROSS JOIN LATERAL (SELECT k.series_id, k.first_step, k.last_step,"
                    "  k.point_count, k.codec, k.data FROM metric_chunks k"
                    "  WHERE k.project = ANY($4::text[]) AND k.series_id = q.series_id"
                    "  AND k.first_step = q.first_step AND k.last_step = q.last_step OFFSET 0)"
                    " AS c",
                    [key[0] for key in keys],
                    [key[1] for key in keys],
                    [key[2] for key in keys],
                    projects,
                )
                for row in rows:
                    decoded = chunks.decode(row["codec"], row["data"], row["point_count"])
                    steps = inside[row["series_id"], row["first_step"], row["last_step"]]
                    hit_at = np.isin(decoded.steps, steps)
                    for step, micros in zip(
                        decoded.steps[hit_at].tolist(),
                        decoded.times_us[hit_at].tolist(),
                        strict=True,
                    ):
                        key = (row["series_id"], step)
                        times[key] = max(times.get(key, -1), micros)
        return times

    async def compact_chunks(
        self, project: str, small: int = 256, series_limit: int = 1_000
    ) -> int:
        """Merge each series' small chunks (fewer than ``small`` points) within one partition
        into full ones; return how many chunks were merged away.

        Live training runs send a few steps per series per batch, and each batch's points
        become chunks of their own: ~100 bytes of row and index per chunk then outweigh the
        points. Run in the background (a sweep): every (series, week) with two or more small
        chunks, up to ``series_limit`` of them, is rewritten in its own transaction under the
        series' row lock (writers and other compactors of the series wait), so readers see
        the old chunks or the new, never both. The new chunks stay in the partition (their
        day is the latest of the merged ones), so retention drops them with their week.
        """
        groups = await self._pool.fetch(
            "SELECT series_id, stored_day - stored_day % $3 AS first_day FROM metric_chunks"
            " WHERE project = $1 AND point_count < $2"
            " GROUP BY 1, 2 HAVING count(*) > 1 ORDER BY 1, 2 LIMIT $4",
            project,
            small,
            PARTITION_DAYS,
            series_limit,
        )
        merged = 0
        for group in groups:
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "SELECT 1 FROM metric_series WHERE series_id = $1 FOR UPDATE",
                    group["series_id"],
                )
                gone = await conn.fetch(
                    "DELETE FROM metric_chunks WHERE project = $1 AND series_id = $2"
                    " AND stored_day >= $3 AND stored_day < $3 + $4 AND point_count < $5"
                    " RETURNING stored_day, series_id, first_step, point_count, codec, data",
                    project,
                    group["series_id"],
                    group["first_day"],
                    PARTITION_DAYS,
                    small,
                )
                if len(gone) < 2:  # another compactor was first: put nothing back twice
                    if gone:
                        raise RuntimeError("a chunk vanished under the series lock")
                    continue
                block = _decode(
                    [
                        _Chunk(
                            r["series_id"], r["first_step"], r["point_count"], r["codec"], r["data"]
                        )
                        for r in gone
                    ]
                )
                order = np.lexsort((block.times_us, block.steps))
                steps, times = block.steps[order], block.times_us[order]
                values = block.values[order]
                records = self._chunk_records(
                    {group["series_id"]: project},
                    max(r["stored_day"] for r in gone),
                    block.series_ids[order],
                    steps,
                    times,
                    values,
                )
                await conn.copy_records_to_table(
                    "metric_chunks",
                    records=records,
                    columns=_CHUNK_COLUMNS,
                    schema_name=self._schema,
                )
                await conn.execute(
                    "UPDATE metric_series SET chunk_span = GREATEST(chunk_span, $2)"
                    " WHERE series_id = $1",
                    group["series_id"],
                    max(record[4] - record[3] for record in records),
                )
                merged += len(gone) - len(records)
        if merged:
            log.info("metrics.chunks.compacted", project=project, chunks=merged)
        return merged

    async def projects_with_points(self) -> list[str]:
        """Every project with a point partition (whatever its retention policy)."""
        rows = await self._pool.fetch(
            "SELECT DISTINCT project FROM metric_chunk_partitions ORDER BY project"
        )
        return [row["project"] for row in rows]

    async def expire_points(self, project: str, before_day: int) -> int:
        """Drop every chunk partition of ``project`` whose days all lie before
        ``before_day`` (days since 1970-01-01 UTC), with its bookkeeping row, in one
        transaction; return how many were dropped.

        Whole tables go: nothing is deleted row by row. Series counters and rollups stay
        (rollups are kept longer than raw points; the counters say what was recorded).
        """
        async with self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                "DELETE FROM metric_chunk_partitions WHERE project = $1 AND end_day <= $2"
                " RETURNING table_name, first_day",
                project,
                before_day,
            )
            for row in rows:
                name = row["table_name"]
                if not _PARTITION_NAME.match(name):  # never interpolate anything else
                    raise ValueError(f"unexpected partition name {name!r}")
                await conn.execute(f"DROP TABLE IF EXISTS {name}")
        for row in rows:
            self._partitions.discard((project, row["first_day"]))
        if rows:
            log.info(
                "metrics.partitions.expired",
                project=project,
                before_day=before_day,
                partitions=len(rows),
            )
        return len(rows)

    async def prune_ledger(self, stored_before: datetime) -> int:
        """Forget the ids of messages stored before ``stored_before``; return how many.

        The ledger is what makes a redelivered or replayed message store nothing, so prune
        only past the oldest redelivery or replay the deployment allows (the TELEMETRY
        stream's age, for one). With live runs' small messages it costs ~2.4 bytes a point.
        """
        removed = await self._pool.fetchval(
            "WITH gone AS (DELETE FROM metric_messages WHERE stored_at < $1 RETURNING 1)"
            " SELECT count(*) FROM gone",
            stored_before,
        )
        return int(removed)

    async def purge_run(self, run_id: str) -> int:
        """Delete every chunk, rollup and series of a run deleted for good, in one
        transaction; return how many points were removed.

        The run's ledger rows stay (``prune_ledger`` ages them out): a message of the run
        redelivered or replayed after the purge still stores nothing, instead of bringing
        back a fragment of the run."""
        async with self._pool.acquire() as conn, conn.transaction():
            series_ids = [
                row["series_id"]
                for row in await conn.fetch(
                    "SELECT series_id FROM metric_series WHERE run_id = $1 FOR UPDATE", run_id
                )
            ]
            removed = await conn.fetchval(
                "WITH gone AS (DELETE FROM metric_chunks WHERE series_id = ANY($1::bigint[])"
                " RETURNING point_count) SELECT coalesce(sum(point_count), 0)::bigint FROM gone",
                series_ids,
            )
            await conn.execute(
                "DELETE FROM metric_rollups WHERE series_id = ANY($1::bigint[])", series_ids
            )
            await conn.execute("DELETE FROM metric_series WHERE run_id = $1", run_id)
        return int(removed)


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
    """The batch's points per series as numpy columns (several messages may carry one
    series); columns may be lists or ``array.array``."""
    pending: dict[tuple[str, str, str], _Pending] = {}
    for message in messages:
        received_us = None
        for columns in message.series:
            if not len(columns.steps):
                continue
            key = (
                message.run_id,
                columns.name,
                series_key(columns.host, columns.process_index, columns.labels),
            )
            entry = pending.get(key)
            if entry is None:
                entry = pending[key] = _Pending(
                    key, columns.host, columns.process_index, columns.labels
                )
            steps = np.asarray(columns.steps, dtype=np.int64)
            entry.steps.append(steps)
            entry.values.append(np.asarray(columns.values, dtype=np.float64))
            if columns.times_unix_us is not None:
                entry.times.append(np.asarray(columns.times_unix_us, dtype=np.int64))
            else:
                if received_us is None:
                    received_us = to_unix_micros(message.occurred_at)
                entry.times.append(np.full(len(steps), received_us, dtype=np.int64))
    return pending


def _decode(found: Sequence[_Chunk]) -> PointBlock:
    """The points of chunks as one block (in chunk order, not sorted)."""
    if not found:
        return PointBlock.empty()
    parts = [chunks.decode(c.codec, c.data, c.point_count) for c in found]
    counts = [c.point_count for c in found]
    return PointBlock(
        steps=np.concatenate([p.steps for p in parts]),
        series_ids=np.repeat(np.array([c.series_id for c in found], dtype=np.int64), counts),
        times_us=np.concatenate([p.times_us for p in parts]),
        values=np.concatenate([p.values for p in parts]),
    )
