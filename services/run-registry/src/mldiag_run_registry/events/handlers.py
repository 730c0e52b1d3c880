"""HTTP routes of workload events (``monitoredEvents``) and analyses, and the consumers that
record them."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.http import ContractResponse
from mldiag_platform.resources import ParentDep, checked_id, id_path, route
from mldiag_run_registry.events.service import EventsService
from mldiag_run_registry.live.service import LiveFeed
from mldiag_run_registry.resources import RunIdPath
from mldiag_schemas import bus
from mldiag_schemas.analyses import AnalysisCompleted, ListAnalysesResponse
from mldiag_schemas.auth import Permission
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import (
    ListEventsResponse,
    WorkloadEvent,
    WorkloadEventOpened,
    WorkloadEventResolved,
    WorkloadEventUpdated,
)
from mldiag_schemas.sharing import RunUpdateKind

router = APIRouter()


def _service(request: Request) -> EventsService:
    service: EventsService = request.app.state.events
    return service


ServiceDep = Annotated[EventsService, Depends(_service)]
FilterQuery = Annotated[str, Query(alias="filter")]
PageSizeQuery = Annotated[int | None, Query(alias="pageSize")]
PageTokenQuery = Annotated[str, Query(alias="pageToken")]


def _event_id(event_id: Annotated[str, id_path("The event id (a UUID).")]) -> str:
    return checked_id(event_id, "event_id")


EventIdPath = Annotated[str, Depends(_event_id)]


@route(router, "GET", "/monitoredEvents", Permission.RUNS_GET, response=ListEventsResponse)
async def list_parent_events(
    parent: ParentDep,
    service: ServiceDep,
    filter_text: FilterQuery = "",
    page_size: PageSizeQuery = None,
    page_token: PageTokenQuery = "",
) -> Response:
    """The events of every live run under the parent, newest first."""
    page = await service.list_events(
        parent.project,
        parent.location,
        filter_text=filter_text,
        requested_size=page_size,
        page_token=page_token,
    )
    return ContractResponse(page)


async def list_events(
    run_id: RunIdPath,
    parent: ParentDep,
    service: ServiceDep,
    filter_text: FilterQuery = "",
    page_size: PageSizeQuery = None,
    page_token: PageTokenQuery = "",
) -> Response:
    """The events of a run, newest first."""
    page = await service.list_events(
        parent.project,
        parent.location,
        run_id,
        filter_text=filter_text,
        requested_size=page_size,
        page_token=page_token,
    )
    return ContractResponse(page)


# `/events` is the route's first name, kept as an alias.
for _path in (
    "/machineLearningRuns/{run_id}/monitoredEvents",
    "/machineLearningRuns/{run_id}/events",
):
    route(router, "GET", _path, Permission.RUNS_GET, response=ListEventsResponse)(list_events)


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}/monitoredEvents/{event_id}",
    Permission.RUNS_GET,
    response=WorkloadEvent,
)
async def get_event(
    run_id: RunIdPath, event_id: EventIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """One event of a run (404 ``event_not_found``)."""
    event = await service.get_event(parent.project, parent.location, run_id, event_id)
    return ContractResponse(event)


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}/analyses",
    Permission.RUNS_GET,
    response=ListAnalysesResponse,
)
async def list_analyses(
    run_id: RunIdPath, parent: ParentDep, service: ServiceDep, event: str | None = None
) -> Response:
    """The analyses of a run's events (``?event=<id>``: of one event)."""
    analyses = await service.list_analyses(parent.project, parent.location, run_id)
    if event is not None:
        analyses = [analysis for analysis in analyses if str(analysis.event_id) == event]
    return ContractResponse(ListAnalysesResponse(analyses=analyses))


EVENTS_CONSUMER = ConsumerSpec(
    stream=bus.EVENTS,
    subject=bus.WORKLOAD_EVENTS + ".*.*",
    durable=bus.REGISTRY_EVENTS_DURABLE,
    message_type=Envelope,
)
"""Every event-life message: opened, updated and resolved (the handler keeps the highest
revision of each event)."""

ANALYSES_CONSUMER = ConsumerSpec(
    stream=bus.ANALYSES,
    subject=bus.ANALYSIS_COMPLETED + ".*",
    durable=bus.REGISTRY_ANALYSES_DURABLE,
    message_type=AnalysisCompleted,
)

_EVENT_CHANGES = (WorkloadEventOpened, WorkloadEventUpdated, WorkloadEventResolved)


class EventsBusHandler:
    """Records events and analyses as they are published."""

    def __init__(self, service: EventsService, live: LiveFeed) -> None:
        self._service = service
        self._live = live

    async def on_events(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Record event revisions (other message types on these subjects are ignored)."""
        events = [
            delivery.message.event
            for delivery in deliveries
            if isinstance(delivery.message, _EVENT_CHANGES)
        ]
        if events:
            await self._service.store_events(events)
            await self._live.announce([event.run_id for event in events], RunUpdateKind.EVENTS)

    async def on_analyses(self, deliveries: list[Delivery[AnalysisCompleted]]) -> None:
        """Record analyses."""
        analyses = [d.message.analysis for d in deliveries]
        await self._service.store_analyses(analyses)
        await self._live.announce([a.run_id for a in analyses], RunUpdateKind.ANALYSES)
