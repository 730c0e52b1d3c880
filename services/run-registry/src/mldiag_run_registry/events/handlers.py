"""HTTP routes of a run's events and analyses, and the consumers that record them."""

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.http import ContractResponse
from mldiag_run_registry.events.service import EventsService
from mldiag_run_registry.resources import ParentDep, route
from mldiag_schemas import bus
from mldiag_schemas.analyses import AnalysisCompleted, ListAnalysesResponse
from mldiag_schemas.auth import Permission
from mldiag_schemas.events import ListEventsResponse, WorkloadEventOpened

router = APIRouter()


def _service(request: Request) -> EventsService:
    service: EventsService = request.app.state.events
    return service


ServiceDep = Annotated[EventsService, Depends(_service)]


@route(router, "GET", "/machineLearningRuns/{run_id}/events", Permission.RUNS_GET)
async def list_events(run_id: str, parent: ParentDep, service: ServiceDep) -> Response:
    """The workload events of a run."""
    events = await service.list_events(parent.project, parent.location, run_id)
    return ContractResponse(ListEventsResponse(events=events))


@route(router, "GET", "/machineLearningRuns/{run_id}/analyses", Permission.RUNS_GET)
async def list_analyses(run_id: str, parent: ParentDep, service: ServiceDep) -> Response:
    """The analyses of a run's events."""
    analyses = await service.list_analyses(parent.project, parent.location, run_id)
    return ContractResponse(ListAnalysesResponse(analyses=analyses))


EVENTS_CONSUMER = ConsumerSpec(
    stream=bus.EVENTS,
    subject=bus.WORKLOAD_EVENT_OPENED + ".*",
    durable=bus.REGISTRY_EVENTS_DURABLE,
    message_type=WorkloadEventOpened,
)

ANALYSES_CONSUMER = ConsumerSpec(
    stream=bus.ANALYSES,
    subject=bus.ANALYSIS_COMPLETED + ".*",
    durable=bus.REGISTRY_ANALYSES_DURABLE,
    message_type=AnalysisCompleted,
)


class EventsBusHandler:
    """Records events and analyses as they are published."""

    def __init__(self, service: EventsService) -> None:
        self._service = service

    async def on_events(self, deliveries: list[Delivery[WorkloadEventOpened]]) -> None:
        """Record workload events."""
        await self._service.store_events([delivery.message.event for delivery in deliveries])

    async def on_analyses(self, deliveries: list[Delivery[AnalysisCompleted]]) -> None:
        """Record analyses."""
        await self._service.store_analyses([d.message.analysis for d in deliveries])
