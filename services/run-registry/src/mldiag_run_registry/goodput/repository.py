"""Goodput's reads: per-process totals of the time metrics (SQL over the coarsest rollups),
the start of the first step and the split of compilation around it (raw points through the
metrics repository, which alone knows how they are stored: the first point of each step
series, one point per compilation)."""

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import numpy as np

from mldiag_run_registry.metrics.repository import ROLLUP_LEVELS, MetricsRepository

_MAX_STEP_SECONDS = 1e9
"""A first step's own duration is subtracted only when it is plausible (not NaN, ±Inf)."""


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


Process = tuple[str, int | None]


def _in_order(process: Process) -> tuple[str, bool, int]:
    """(host, process index) with processes without an index last, as SQL orders NULLs."""
    host, index = process
    return host, index is None, index or 0


class GoodputRepository:
    """Reads over metric_series and metric_rollups, and raw points through ``metrics``."""

    def __init__(self, pool: asyncpg.Pool, metrics: MetricsRepository) -> None:
        self._pool = pool
        self._metrics = metrics

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

    async def first_step_starts(self, project: str, run_id: str, metric: str) -> list[ProcessStart]:
        """Per process, when its first step began: the time of its first point (lowest
        step, earliest time) minus that point's value in seconds."""
        starts: dict[Process, int] = {}
        for series in await self._metrics.list_series([run_id], metric):
            first = await self._metrics.read_points(project, [series.series_id], 1, None)
            if not len(first):
                continue
            value = float(first.values[0])
            took = round(value * 1e6) if 0 <= value <= _MAX_STEP_SECONDS else 0
            start = int(first.times_us[0]) - took
            process = (series.host, series.process_index)
            starts[process] = min(starts.get(process, start), start)
        return [
            ProcessStart(host, index, starts[(host, index)])
            for host, index in sorted(starts, key=_in_order)
        ]

    async def compile_split(
        self, project: str, run_id: str, metric: str, cutoff_us: int
    ) -> list[CompileSplit]:
        """Per process, the metric's non-NaN seconds recorded at or before ``cutoff_us`` and
        after it (compilations are one point each, so the raw points are few)."""
        series = await self._metrics.list_series([run_id], metric)
        process_of = {row.series_id: (row.host, row.process_index) for row in series}
        split: dict[Process, list[float]] = {}
        async for block in self._metrics.scan_points(project, list(process_of), None, None):
            real = ~np.isnan(block.values)
            early = real & (block.times_us <= cutoff_us)
            late = real & (block.times_us > cutoff_us)
            for series_id in np.unique(block.series_ids[real]).tolist():
                mine = block.series_ids == series_id
                sums = split.setdefault(process_of[series_id], [0.0, 0.0])
                sums[0] += float(block.values[mine & early].sum())
                sums[1] += float(block.values[mine & late].sum())
        return [
            CompileSplit(host, index, *split[(host, index)])
            for host, index in sorted(split, key=_in_order)
        ]
