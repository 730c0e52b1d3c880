"""HTTP routes of metric series, and the consumer that stores points from the bus."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.http import ContractResponse
from mldiag_platform.resources import ParentDep, route
from mldiag_run_registry.live.service import LiveFeed
from mldiag_run_registry.metrics.service import MetricsService, StepRange
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
    return ContractResponse(page)


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
