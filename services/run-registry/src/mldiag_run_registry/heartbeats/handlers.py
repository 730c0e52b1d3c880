"""HTTP route of a run's heartbeats, and the consumer that records them."""

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.http import ContractResponse
from mldiag_platform.resources import ParentDep, route
from mldiag_run_registry.heartbeats.service import HeartbeatsService
from mldiag_run_registry.resources import RunIdPath
from mldiag_schemas import bus
from mldiag_schemas.auth import Permission
from mldiag_schemas.telemetry import ListHeartbeatsResponse, RunHeartbeat

router = APIRouter()


def _service(request: Request) -> HeartbeatsService:
    service: HeartbeatsService = request.app.state.heartbeats
    return service


ServiceDep = Annotated[HeartbeatsService, Depends(_service)]


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}/heartbeats",
    Permission.RUNS_GET,
    response=ListHeartbeatsResponse,
)
async def list_heartbeats(run_id: RunIdPath, parent: ParentDep, service: ServiceDep) -> Response:
    """The latest heartbeat of every process of the run, with whether it is overdue."""
    now = datetime.now(UTC)
    heartbeats = await service.list_heartbeats(parent.project, parent.location, run_id, now)
    return ContractResponse(ListHeartbeatsResponse(heartbeats=heartbeats))


HEARTBEATS_CONSUMER = ConsumerSpec(
    stream=bus.TELEMETRY,
    subject=bus.HEARTBEAT_RECEIVED + ".*",
    durable=bus.REGISTRY_HEARTBEATS_DURABLE,
    message_type=RunHeartbeat,
    batch_size=200,
)
"""Heartbeats accepted by ingestion."""


class HeartbeatsBusHandler:
    """Records each batch of heartbeats in one statement."""

    def __init__(self, service: HeartbeatsService) -> None:
        self._service = service

    async def on_heartbeats(self, deliveries: list[Delivery[RunHeartbeat]]) -> None:
        """Keep the latest of each process."""
        await self._service.record([delivery.message for delivery in deliveries])
