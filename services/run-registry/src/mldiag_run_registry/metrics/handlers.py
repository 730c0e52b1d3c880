"""HTTP routes of metric series, and the consumer that stores points from the bus."""

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.http import ContractResponse
from mldiag_platform.resources import ParentDep, route
from mldiag_run_registry.live.service import LiveFeed
from mldiag_run_registry.metrics import export
from mldiag_run_registry.metrics.blocks import PointBlock
from mldiag_run_registry.metrics.service import (
    MetricsService,
    PointsExport,
    PointsPage,
    StepRange,
)
from mldiag_run_registry.resources import RunIdPath
from mldiag_schemas import bus
from mldiag_schemas.auth import Permission
from mldiag_schemas.sharing import RunUpdateKind
from mldiag_schemas.telemetry import (
    CompareMetricsResponse,
    DownsampleMetricResponse,
    LatestMetricsResponse,
    ListMetricsResponse,
    MetricPointsReceived,
    ReadMetricSeriesResponse,
)

router = APIRouter()


def _service(request: Request) -> MetricsService:
    service: MetricsService = request.app.state.metrics
    return service


ServiceDep = Annotated[MetricsService, Depends(_service)]
GroupByQuery = Annotated[str, Query(alias="groupBy")]
StartStepQuery = Annotated[int | None, Query(alias="startStep")]
EndStepQuery = Annotated[int | None, Query(alias="endStep")]
WithTimesQuery = Annotated[bool, Query(alias="withTimes")]


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}/metrics",
    Permission.RUNS_GET,
    response=ListMetricsResponse,
)
async def list_metrics(run_id: RunIdPath, parent: ParentDep, service: ServiceDep) -> Response:
    """The metrics a run recorded."""
    return ContractResponse(await service.list_metrics(parent.project, parent.location, run_id))


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}/metrics:latest",
    Permission.RUNS_GET,
    response=LatestMetricsResponse,
)
async def latest_values(run_id: RunIdPath, parent: ParentDep, service: ServiceDep) -> Response:
    """The latest value of every series of every metric of a run."""
    return ContractResponse(await service.latest(parent.project, parent.location, run_id))


@route(
    router,
    "GET",
    "/machineLearningRuns:compareMetrics",
    Permission.RUNS_GET,
    response=CompareMetricsResponse,
)
async def compare_metrics(
    parent: ParentDep,
    service: ServiceDep,
    runs: str,
    metric: str,
    buckets: int = 1000,
    group_by: GroupByQuery = "none",
    start_step: StartStepQuery = None,
    end_step: EndStepQuery = None,
    with_times: WithTimesQuery = False,
) -> Response:
    """One metric of several runs (``runs=a,b``) on shared step buckets."""
    run_ids = [run_id for run_id in runs.split(",") if run_id]
    result = await service.compare(
        parent.project,
        parent.location,
        run_ids,
        metric,
        buckets,
        group_by,
        StepRange(start_step, end_step),
        with_times,
    )
    return ContractResponse(result)


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}/metrics/{metric:path}",
    Permission.RUNS_GET,
    response=(ReadMetricSeriesResponse, DownsampleMetricResponse),
)
async def read_series(
    run_id: RunIdPath,
    metric: str,
    parent: ParentDep,
    service: ServiceDep,
    page_size: Annotated[int | None, Query(alias="pageSize")] = None,
    page_token: Annotated[str, Query(alias="pageToken")] = "",
    buckets: int | None = None,
    group_by: GroupByQuery = "series",
    start_step: StartStepQuery = None,
    end_step: EndStepQuery = None,
    with_times: WithTimesQuery = False,
) -> Response:
    """One metric's points in step order, paged; with ``buckets=N``, downsampled (over
    ``startStep`` … ``endStep`` when given)."""
    if buckets is not None:
        result = await service.downsample(
            parent.project,
            parent.location,
            run_id,
            metric,
            buckets,
            group_by,
            StepRange(start_step, end_step),
            with_times,
        )
        return ContractResponse(result)
    page = await service.read_series(
        parent.project, parent.location, run_id, metric, page_size, page_token
    )
    return ContractResponse(_page_json(page))


def _page_json(page: PointsPage) -> bytes:
    """The page as ``ReadMetricSeriesResponse`` JSON, written from its columns."""
    return export.page_json(page.metric, page.block, page.series, page.next_page_token)


_EXPORT_DESCRIPTION = (
    "The whole metric (every series, over `startStep` … `endStep` when given) as CSV"
    " (`format=csv`: a header line, then `step,value,time,host,processIndex,labels`) or JSON"
    " Lines (`format=jsonl`: one point object a line, as in a page). NaN and ±Inf are written"
    " `NaN`, `Infinity`, `-Infinity`; times are RFC 3339 in UTC. Streamed in step order."
)


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}/metrics:export",
    Permission.RUNS_GET,
    responses={
        200: {
            "description": _EXPORT_DESCRIPTION,
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/jsonl": {"schema": {"type": "string"}},
            },
        }
    },
)
async def export_series(
    run_id: RunIdPath,
    parent: ParentDep,
    service: ServiceDep,
    metric: str,
    export_format: Annotated[str, Query(alias="format")] = "csv",
    start_step: StartStepQuery = None,
    end_step: EndStepQuery = None,
) -> Response:
    """One metric's every point as a file (``metric=NAME&format=csv|jsonl``), streamed.

    The metric is a query parameter, so any name (with ``/`` or ``:``) is unambiguous.
    """
    chosen = export.parse_format(export_format)
    points = await service.export(
        parent.project, parent.location, run_id, metric, StepRange(start_step, end_step)
    )
    filename = _filename(run_id, metric, chosen)
    return StreamingResponse(
        _stream(points, chosen),
        media_type=chosen.media_type,
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _filename(run_id: str, metric: str, chosen: export.ExportFormat) -> str:
    """``<run>-<metric>.<format>``, the metric's ``/`` and ``:`` written ``_`` (a file name
    and a quoted header value both stay plain)."""
    return f"{run_id}-{_UNSAFE.sub('_', metric)}.{chosen.value}"


async def _stream(points: PointsExport, chosen: export.ExportFormat) -> AsyncIterator[bytes]:
    """The export's text, a block at a time; each block is written off the event loop (tens
    of milliseconds of numpy for 65,536 points) so other requests keep being answered."""
    if chosen is export.ExportFormat.CSV:
        yield export.CSV_HEADER
    async for block in points.blocks:
        yield await asyncio.to_thread(_lines, chosen, block, points)


def _lines(chosen: export.ExportFormat, block: PointBlock, points: PointsExport) -> bytes:
    return export.lines(chosen, block, points.series)


def metrics_consumer(batch_size: int) -> ConsumerSpec[MetricPointsReceived]:
    """Metric points from ingestion, stored in batches."""
    return ConsumerSpec(
        stream=bus.TELEMETRY,
        subject=bus.METRICS_RECEIVED + ".*",
        durable=bus.REGISTRY_METRICS_DURABLE,
        message_type=MetricPointsReceived,
        batch_size=batch_size,
    )


class MetricsBusHandler:
    """Stores each pulled batch of metric messages in one transaction, then tells live pages."""

    def __init__(self, service: MetricsService, live: LiveFeed) -> None:
        self._service = service
        self._live = live

    async def on_metrics(self, deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        """Store a batch."""
        messages = [delivery.message for delivery in deliveries]
        await self._service.store(messages)
        names: dict[str, set[str]] = {}
        for message in messages:
            names.setdefault(message.run_id, set()).update(s.name for s in message.series)
        await self._live.announce(list(names), RunUpdateKind.METRICS, names)
