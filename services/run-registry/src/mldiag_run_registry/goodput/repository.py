"""All SQL goodput reads: per-process totals of the time metrics (from the coarsest rollups),
the start of the first step and the split of compilation around it (from raw points, a few
rows: the first point of each step series, one point per compilation)."""

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from mldiag_run_registry.metrics.repository import ROLLUP_LEVELS


@dataclass(frozen=True)
class ProcessTotal:
    """One process's (host, process index) total of one metric."""

    metric: str
    host: str
    process_index: int | None
    total: float
    count: int


@dataclass(frozen=True)
class ProcessStart:
    """When one process's first step began (µs since the epoch)."""

    host: str
    process_index: int | None
    start_us: int


@dataclass(frozen=True)
class CompileSplit:
    """One process's compilation seconds before and after a moment."""

    host: str
    process_index: int | None
    before: float
    after: float


class GoodputRepository:
    """Reads over metric_series, metric_rollups and metric_points."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def process_totals(self, run_id: str, metrics: Sequence[str]) -> list[ProcessTotal]:
        """Sum and count of the non-NaN values of each metric per process (all its label
        sets), from the coarsest rollup level: a few rows per series, however long."""
        rows = await self._pool.fetch(
            "SELECT s.metric, s.host, s.process_index, coalesce(sum(r.sum), 0) AS total,"
            " sum(r.count - r.nan_count)::bigint AS n"
            " FROM metric_series s JOIN metric_rollups r"
            " ON r.series_id = s.series_id AND r.width_log2 = $3"
            " WHERE s.run_id = $1 AND s.metric = ANY($2::text[])"
            " GROUP BY s.metric, s.host, s.process_index"
            " ORDER BY s.metric, s.host, s.process_index",
            run_id,
            list(metrics),
            ROLLUP_LEVELS[-1],
        )
        return [
            ProcessTotal(r["metric"], r["host"], r["process_index"], r["total"], r["n"])
            for r in rows
            if r["n"]
        ]

    async def first_step_starts(self, run_id: str, metric: str) -> list[ProcessStart]:
        """Per process, when its first step began: the time of its first point (lowest
        step, earliest time) minus that point's value in seconds."""
        rows = await self._pool.fetch(
            "SELECT s.host, s.process_index, min(p.time_us - CASE WHEN p.value BETWEEN 0"
            " AND 1e9 THEN (p.value * 1e6)::bigint ELSE 0 END) AS start_us"
            " FROM metric_series s CROSS JOIN LATERAL ("
            "  SELECT time_us, value FROM metric_points WHERE series_id = s.series_id"
            "  ORDER BY step, time_us LIMIT 1) p"
            " WHERE s.run_id = $1 AND s.metric = $2"
            " GROUP BY s.host, s.process_index ORDER BY s.host, s.process_index",
            run_id,
            metric,
        )
        return [ProcessStart(r["host"], r["process_index"], r["start_us"]) for r in rows]

    async def compile_split(self, run_id: str, metric: str, cutoff_us: int) -> list[CompileSplit]:
        """Per process, the metric's non-NaN seconds recorded at or before ``cutoff_us`` and
        after it (compilations are one point each, so the raw points are few)."""
        rows = await self._pool.fetch(
            "SELECT s.host, s.process_index,"
            " coalesce(sum(p.value) FILTER (WHERE p.time_us <= $3), 0) AS before,"
            " coalesce(sum(p.value) FILTER (WHERE p.time_us > $3), 0) AS after"
            " FROM metric_series s JOIN metric_points p ON p.series_id = s.series_id"
            " WHERE s.run_id = $1 AND s.metric = $2 AND p.value <> 'NaN'"
            " GROUP BY s.host, s.process_index ORDER BY s.host, s.process_index",
            run_id,
            metric,
            cutoff_us,
        )
        return [CompileSplit(r["host"], r["process_index"], r["before"], r["after"]) for r in rows]
