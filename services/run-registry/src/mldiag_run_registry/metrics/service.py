"""Metric series: storing points from the bus and reading them back (no SQL here).

Downsampling plans each read so it touches between N and 4N rollup rows: the bucket width
is the smallest multiple of a rollup level's width that gives at most N buckets over the
steps read: the requested range cut to the steps recorded, so a zoomed-in read gets finer
buckets and still touches N to 4N rows. Short ranges (fewer than 64 steps per requested
bucket) are aggregated from the raw points, which are then few.
"""

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from prometheus_client import Counter

from mldiag_platform.listing.paging import (
    decode_token,
    encode_token,
    page_size,
    token_int,
)
from mldiag_run_registry.lookup import RunFinder, RunLookup, SummaryWriter
from mldiag_run_registry.metrics.blocks import PointBlock, same_key
from mldiag_run_registry.metrics.errors import (
    InvalidBucketCount,
    InvalidGroupBy,
    InvalidRunList,
    InvalidStepRange,
)
from mldiag_run_registry.metrics.export import concatenate
from mldiag_run_registry.metrics.repository import (
    ROLLUP_LEVELS,
    BucketRow,
    MetricsRepository,
    SeriesRow,
)
from mldiag_schemas.runs import RunMetricsSummary
from mldiag_schemas.telemetry import (
    CompareMetricsResponse,
    DownsampledSeries,
    DownsampleMetricResponse,
    GroupBy,
    LatestMetricsResponse,
    LatestValue,
    ListMetricsResponse,
    MetricBucket,
    MetricPointsReceived,
    MetricSummary,
)

log = structlog.get_logger(__name__)

DEFAULT_POINTS_PAGE_SIZE = 10_000
MAX_POINTS_PAGE_SIZE = 100_000
MAX_BUCKETS = 10_000
MAX_COMPARED_RUNS = 20
EXPORT_BLOCK_POINTS = 65_536
"""Points an export reads and writes at a time: memory stays bounded whatever the series'
length, and numpy's per-call costs vanish beside the block's."""
GROUPINGS: tuple[GroupBy, ...] = ("series", "host", "none")

POINTS_DROPPED = Counter(
    "mldiag_metric_points_dropped_total",
    "Points not stored because their metric reached its per-run series bound.",
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Plan:
    """How to read N buckets: output bucket width and the rollup level (None: raw)."""

    width: int
    level: int | None

    @property
    def source(self) -> str:
        """`raw` or `rollup:<steps per rollup bucket>`."""
        return "raw" if self.level is None else f"rollup:{1 << self.level}"


@dataclass(frozen=True)
class StepRange:
    """The steps a downsampled read covers, both ends inclusive (None: open)."""

    start: int | None = None
    end: int | None = None

    def clip(self, first: int, last: int) -> tuple[int, int] | None:
        """This range cut to ``first`` … ``last`` (the steps recorded); None when empty."""
        low = first if self.start is None else max(first, self.start)
        high = last if self.end is None else min(last, self.end)
        return (low, high) if low <= high else None


@dataclass(frozen=True)
class _Downsampled:
    plan: Plan
    window: tuple[int, int] | None
    lines: list[DownsampledSeries]

    @property
    def start_step(self) -> int | None:
        return None if self.window is None else self.window[0]

    @property
    def end_step(self) -> int | None:
        return None if self.window is None else self.window[1]


@dataclass(frozen=True)
class PointsPage:
    """A page of one metric's points as columns, with the series they belong to."""

    metric: str
    block: PointBlock
    series: dict[int, SeriesRow]
    """Every series of the metric, by id (the identity each point is written with)."""
    next_page_token: str


@dataclass(frozen=True)
class PointsExport:
    """A whole metric (every series, over a step range) as blocks read one at a time."""

    metric: str
    series: dict[int, SeriesRow]
    blocks: AsyncIterator[PointBlock]
    """Blocks in (step, series id, time) order; nothing is read before the first is asked."""


def plan_buckets(first_step: int, last_step: int, buckets: int) -> Plan:
    """The width (aligned to step 0) giving at most ``buckets`` buckets over the range."""
    span = last_step - first_step + 1
    wanted = -(-span // buckets)  # ceil
    level = None
    for k in ROLLUP_LEVELS:
        if 1 << k <= wanted:
            level = k
    unit = 1 if level is None else 1 << level
    width = -(-wanted // unit) * unit
    while last_step // width - first_step // width + 1 > buckets:
        width += unit
    # Read the coarsest level that still divides the width: fewer rows, same buckets.
    for k in ROLLUP_LEVELS:
        if level is not None and k > level and width % (1 << k) == 0:
            level = k
    return Plan(width, level)


def _time(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


SUMMARY_FIELDS = {
    "step_time": "avg_step_time",
    "mfu": "avg_mfu",
    "throughput": "avg_throughput",
    "latency": "avg_latency",
}
"""The official SDK's well-known metric names → the run's output-only averages."""


class MetricsService:
    """A run's metric series."""

    def __init__(
        self,
        repository: MetricsRepository,
        runs: RunLookup,
        summaries: SummaryWriter,
        finder: RunFinder | None = None,
    ) -> None:
        self._repository = repository
        self._runs = runs
        self._summaries = summaries
        self._finder = finder
        # run id → project: a run never changes project, so each is looked up once per
        # process (through the runs slice: this slice never reads the runs' tables)
        self._projects: dict[str, str] = {}

    async def _projects_of(self, run_ids: Iterable[str]) -> dict[str, str]:
        """The project of each known run (a run not found, or no finder: left out, so its
        points go to the project '' that every read searches too)."""
        if self._finder is not None:
            for run_id in set(run_ids) - self._projects.keys():
                found = await self._finder.find_run(run_id)
                if found is not None:
                    self._projects[run_id] = found[0]
        return self._projects

    async def store(self, messages: Sequence[MetricPointsReceived]) -> int:
        """Store points from the bus (idempotent per message); return how many were new.

        When they include a summary metric (``step_time``, ``mfu``, ``throughput``,
        ``latency``), the run's output-only averages are recomputed from the rollups.
        """
        projects = await self._projects_of(message.run_id for message in messages)
        result = await self._repository.store_messages(messages, projects)
        touched = sorted(
            {
                message.run_id
                for message in messages
                if any(series.name in SUMMARY_FIELDS for series in message.series)
            }
        )
        if touched and result.messages:
            await self._refresh_summaries(touched)
        if result.dropped_points:
            POINTS_DROPPED.inc(result.dropped_points)
            log.warning(
                "metrics.points.dropped",
                points=result.dropped_points,
                reason="series bound per metric reached",
            )
        return result.points

    async def _refresh_summaries(self, run_ids: Sequence[str]) -> None:
        means = await self._repository.means(run_ids, list(SUMMARY_FIELDS))
        for run_id in run_ids:
            summary = RunMetricsSummary.model_validate(
                {
                    field: means[run_id, metric]
                    for metric, field in SUMMARY_FIELDS.items()
                    if (run_id, metric) in means
                }
            )
            await self._summaries.set_metrics_summary(run_id, summary)

    async def list_metrics(self, project: str, location: str, run_id: str) -> ListMetricsResponse:
        """The metrics a run recorded."""
        # the run's check and the read overlap: one round trip of waiting, not two
        _, rows = await asyncio.gather(
            self._runs.get_run(project, location, run_id), self._repository.list_metrics(run_id)
        )
        return ListMetricsResponse(
            metrics=[MetricSummary(name=n, point_count=c, last_step=s) for n, c, s in rows]
        )

    async def latest(self, project: str, location: str, run_id: str) -> LatestMetricsResponse:
        """The latest value of every series of every metric of the run (one index read)."""
        await self._runs.get_run(project, location, run_id)
        rows = await self._repository.list_series([run_id], None)
        return LatestMetricsResponse(
            values=[
                LatestValue(
                    name=row.metric,
                    host=row.host,
                    process_index=row.process_index,
                    labels=row.labels,
                    step=row.last_step or 0,
                    value=row.last_value if row.last_value is not None else float("nan"),
                    time=_time(row.last_time_us or 0),
                    point_count=row.point_count,
                )
                for row in rows
            ]
        )

    async def read_series(
        self,
        project: str,
        location: str,
        run_id: str,
        metric: str,
        requested_size: int | None,
        page_token: str,
    ) -> PointsPage:
        """A page of one metric's points (every series), in step order, as columns: the
        handler writes its JSON from them without an object per point."""
        _, series = await asyncio.gather(
            self._runs.get_run(project, location, run_id), self._series(run_id, metric)
        )
        size = page_size(requested_size, DEFAULT_POINTS_PAGE_SIZE, MAX_POINTS_PAGE_SIZE)
        after = None
        if page_token:
            fields = decode_token(page_token)
            after = (
                token_int(fields.get("s")),
                token_int(fields.get("i")),
                token_int(fields.get("t")),
            )
        limit = size + 1
        while True:
            block = await self._repository.read_points(project, list(series), limit, after)
            if len(block) <= size:
                return PointsPage(metric, block, series, "")
            end = _page_end(block, size, whole=len(block) < limit)
            if end is not None:
                break
            limit *= 2  # more than a page of points equal in (step, series, time)
        if end == len(block):  # that group ends the metric
            return PointsPage(metric, block, series, "")
        block = _head(block, end)
        token = encode_token(
            {
                "s": int(block.steps[-1]),
                "i": int(block.series_ids[-1]),
                "t": int(block.times_us[-1]),
            }
        )
        return PointsPage(metric, block, series, token)

    async def export(
        self,
        project: str,
        location: str,
        run_id: str,
        metric: str,
        steps: StepRange | None = None,
    ) -> PointsExport:
        """Every point of one metric (all its series; over ``steps`` when given), read
        block by block as the caller consumes them. The run and the range are checked here,
        before anything is streamed, so a mistake still gets its 4xx."""
        await self._runs.get_run(project, location, run_id)
        steps = steps or StepRange()
        _check_steps(steps)
        series = await self._series(run_id, metric)
        scan = self._repository.scan_points(project, list(series), steps.start, steps.end)
        return PointsExport(metric, series, _coalesced(scan, EXPORT_BLOCK_POINTS))

    async def _series(self, run_id: str, metric: str) -> dict[int, SeriesRow]:
        rows = await self._repository.list_series([run_id], metric)
        return {row.series_id: row for row in rows}

    async def downsample(
        self,
        project: str,
        location: str,
        run_id: str,
        metric: str,
        buckets: int,
        group_by: str,
        steps: StepRange | None = None,
        with_times: bool = False,
    ) -> DownsampleMetricResponse:
        """One metric of a run in at most ``buckets`` step buckets per line (over ``steps``
        only, when given; with each bucket's ``lastTime`` when ``with_times``)."""
        await self._runs.get_run(project, location, run_id)
        read = await self._downsample(
            project, [run_id], metric, buckets, group_by, steps or StepRange(), with_times
        )
        return DownsampleMetricResponse(
            metric=metric,
            bucket_width=read.plan.width,
            source=read.plan.source,
            group_by=_grouping(group_by),
            start_step=read.start_step,
            end_step=read.end_step,
            series=read.lines,
        )

    async def compare(
        self,
        project: str,
        location: str,
        run_ids: Sequence[str],
        metric: str,
        buckets: int,
        group_by: str,
        steps: StepRange | None = None,
        with_times: bool = False,
    ) -> CompareMetricsResponse:
        """One metric of several runs on shared step buckets (one line per run by default)."""
        unique = list(dict.fromkeys(run_ids))
        if not unique or len(unique) > MAX_COMPARED_RUNS:
            raise InvalidRunList(f"name 1 to {MAX_COMPARED_RUNS} runs, comma-separated")
        for run_id in unique:
            await self._runs.get_run(project, location, run_id)
        read = await self._downsample(
            project, unique, metric, buckets, group_by, steps or StepRange(), with_times
        )
        return CompareMetricsResponse(
            metric=metric,
            bucket_width=read.plan.width,
            source=read.plan.source,
            group_by=_grouping(group_by),
            start_step=read.start_step,
            end_step=read.end_step,
            series=read.lines,
        )

    async def _downsample(
        self,
        project: str,
        run_ids: list[str],
        metric: str,
        buckets: int,
        group_by: str,
        steps: StepRange,
        with_times: bool,
    ) -> _Downsampled:
        grouping = _grouping(group_by)
        if not 1 <= buckets <= MAX_BUCKETS:
            raise InvalidBucketCount(f"buckets must be between 1 and {MAX_BUCKETS}")
        _check_steps(steps)
        series = await self._repository.list_series(run_ids, metric)
        heads: list[SeriesRow] = []
        groups: dict[int, int] = {}
        index: dict[tuple[object, ...], int] = {}
        for row in series:
            key: tuple[object, ...] = (row.run_id,)
            if grouping == "host":
                key = (row.run_id, row.host)
            elif grouping == "series":
                key = (row.series_id,)
            if key not in index:
                index[key] = len(heads)
                heads.append(row)
            groups[row.series_id] = index[key]
        # The plan covers the requested range cut to the steps recorded, so zooming in gives
        # finer buckets and a read stays between N and 4N rollup rows whatever the zoom.
        window = steps.clip(
            min((row.first_step or 0 for row in series), default=0),
            max((row.last_step or 0 for row in series), default=-1),
        )
        per_group: list[list[MetricBucket]] = [[] for _ in heads]
        plan = Plan(1, None)
        if window is not None:
            first, last = window
            plan = plan_buckets(first, last, buckets)
            aggregates = await self._repository.read_buckets(
                project, groups, plan.width, plan.level, first // plan.width, last // plan.width
            )
            # Buckets carry their last point's time; only rollup rows stored before they kept
            # it (NULL) are looked up in the chunks, a one-off for old data.
            times: dict[tuple[int, int], int] = {}
            missing = [
                (row.last_series_id, row.last_step)
                for row in aggregates
                if row.last_time_us is None
            ]
            if with_times and missing:
                times = await self._repository.point_times(project, missing)
            for aggregate in aggregates:
                micros: int | None = None
                if with_times:
                    micros = aggregate.last_time_us
                    if micros is None:
                        micros = times.get((aggregate.last_series_id, aggregate.last_step))
                per_group[aggregate.group].append(
                    _bucket(aggregate, plan.width, None if micros is None else _time(micros))
                )
        lines = [
            DownsampledSeries(
                run_id=head.run_id,
                host=head.host if grouping != "none" else None,
                process_index=head.process_index if grouping == "series" else None,
                labels=head.labels if grouping == "series" else None,
                buckets=per_group[number],
            )
            for number, head in enumerate(heads)
        ]
        return _Downsampled(plan, window, lines)


def _check_steps(steps: StepRange) -> None:
    if (steps.start is not None and steps.start < 0) or (steps.end is not None and steps.end < 0):
        raise InvalidStepRange("startStep and endStep must not be negative")
    if steps.start is not None and steps.end is not None and steps.start > steps.end:
        raise InvalidStepRange("startStep must not be greater than endStep")


async def _coalesced(blocks: AsyncIterator[PointBlock], points: int) -> AsyncIterator[PointBlock]:
    """Blocks merged until they hold at least ``points`` (the last may hold fewer)."""
    held: list[PointBlock] = []
    count = 0
    async for block in blocks:
        held.append(block)
        count += len(block)
        if count >= points:
            yield concatenate(held)
            held, count = [], 0
    if count:
        yield concatenate(held)


def _page_end(block: PointBlock, size: int, *, whole: bool) -> int | None:
    """How many of ``block``'s points a page of ``size`` returns: a page never ends inside
    a group of points equal in (step, series id, time) — the keyset token could not tell the
    rest of the group from what was read, and they would be skipped. Such a group longer
    than a page is returned whole; None when it may go on past ``block`` (not ``whole``)."""
    end = size
    while end > 0 and same_key(block, end - 1, end):
        end -= 1
    if end > 0:
        return end
    end = 1
    while end < len(block) and same_key(block, 0, end):
        end += 1
    return end if end < len(block) or whole else None


def _head(block: PointBlock, count: int) -> PointBlock:
    """The first ``count`` points of a block (views, no copy)."""
    return PointBlock(
        block.steps[:count], block.series_ids[:count], block.times_us[:count], block.values[:count]
    )


def _grouping(group_by: str) -> GroupBy:
    for grouping in GROUPINGS:
        if grouping == group_by:
            return grouping
    raise InvalidGroupBy(f"groupBy must be one of {', '.join(GROUPINGS)}")


def _bucket(row: BucketRow, width: int, last_time: datetime | None) -> MetricBucket:
    finite = row.count - row.nan_count
    return MetricBucket(
        start_step=row.bucket * width,
        end_step=row.bucket * width + width - 1,
        first_step=row.first_step,
        last_step=row.last_step,
        count=row.count,
        nan_count=row.nan_count,
        min=row.min,
        max=row.max,
        mean=row.sum / finite if finite and row.sum is not None else None,
        last=row.last_value,
        last_time=last_time,
    )
