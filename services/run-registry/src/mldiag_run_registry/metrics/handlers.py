"""HTTP routes of metric series, and the consumer that stores points from the bus."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.http import ContractResponse
from mldiag_run_registry.metrics.service import MetricsService
from mldiag_run_registry.resources import ParentDep, route
from mldiag_schemas import bus
from mldiag_schemas.telemetry import MetricPointsReceived

router = APIRouter()


def _service(request: Request) -> MetricsService:
    service: MetricsService = request.app.state.metrics
    return service


ServiceDep = Annotated[MetricsService, Depends(_service)]


@route(router, "GET", "/machineLearningRuns/{run_id}/metrics")
async def list_metrics(run_id: str, parent: ParentDep, service: ServiceDep) -> Response:
    """The metrics a run recorded."""
    return ContractResponse(await service.list_metrics(parent.project, parent.location, run_id))


@route(router, "GET", "/machineLearningRuns/{run_id}/metrics/{metric}")
async def read_series(
    run_id: str,
    metric: str,
    parent: ParentDep,
    service: ServiceDep,
    page_size: Annotated[int | None, Query(alias="pageSize")] = None,
    page_token: Annotated[str, Query(alias="pageToken")] = "",
) -> Response:
    """One metric's points, in step order, paged."""
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
    """Stores each pulled batch of metric messages in one transaction."""

    def __init__(self, service: MetricsService) -> None:
        self._service = service

    async def on_metrics(self, deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        """Store a batch."""
        await self._service.store([delivery.message for delivery in deliveries])
