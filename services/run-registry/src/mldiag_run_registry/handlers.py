"""run-registry's HTTP routes and bus consumers: the only module that knows about either.

Every run route is served twice: under its full resource name
(``/v1/projects/{project}/locations/{location}/machineLearningRuns/...``) and under the
short ``/v1/machineLearningRuns/...`` form, which means the default project and location.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.http import ContractResponse, read_body
from mldiag_run_registry.service import RegistryService
from mldiag_schemas import bus
from mldiag_schemas.analyses import AnalysisCompleted, ListAnalysesResponse
from mldiag_schemas.events import ListEventsResponse, WorkloadEventOpened
from mldiag_schemas.ids import DEFAULT_LOCATION, DEFAULT_PROJECT
from mldiag_schemas.runs import CreateRunRequest
from mldiag_schemas.telemetry import MetricPointsReceived

router = APIRouter()

_PARENTS = ("/v1/projects/{project}/locations/{location}", "/v1")


@dataclass(frozen=True)
class Parent:
    """The project and location a request addresses."""

    project: str
    location: str


def _parent(request: Request) -> Parent:
    params = request.path_params
    return Parent(params.get("project", DEFAULT_PROJECT), params.get("location", DEFAULT_LOCATION))


def _service(request: Request) -> RegistryService:
    service: RegistryService = request.app.state.service
    return service


ParentDep = Annotated[Parent, Depends(_parent)]
ServiceDep = Annotated[RegistryService, Depends(_service)]


def _route(method: str, path: str, status_code: int = 200) -> Callable[[Any], Any]:
    """Register a handler under both the full and the short parent."""

    def register(func: Any) -> Any:
        for parent in _PARENTS:
            router.add_api_route(parent + path, func, methods=[method], status_code=status_code)
        return func

    return register


@_route("POST", "/machineLearningRuns", status_code=201)
async def create_run(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """Create a run."""
    body = await read_body(request, CreateRunRequest)
    run = await service.create_run(parent.project, parent.location, body)
    return ContractResponse(run, status_code=201)


@_route("GET", "/machineLearningRuns")
async def list_runs(
    parent: ParentDep,
    service: ServiceDep,
    page_size: Annotated[int | None, Query(alias="pageSize")] = None,
    page_token: Annotated[str, Query(alias="pageToken")] = "",
) -> Response:
    """List runs, newest first."""
    page = await service.list_runs(parent.project, parent.location, page_size, page_token)
    return ContractResponse(page)


@_route("GET", "/machineLearningRuns/{run_id}")
async def get_run(run_id: str, parent: ParentDep, service: ServiceDep) -> Response:
    """Get one run."""
    return ContractResponse(await service.get_run(parent.project, parent.location, run_id))


@_route("GET", "/machineLearningRuns/{run_id}/metrics")
async def list_metrics(run_id: str, parent: ParentDep, service: ServiceDep) -> Response:
    """The metrics a run recorded."""
    return ContractResponse(await service.list_metrics(parent.project, parent.location, run_id))


@_route("GET", "/machineLearningRuns/{run_id}/metrics/{metric}")
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


@_route("GET", "/machineLearningRuns/{run_id}/events")
async def list_events(run_id: str, parent: ParentDep, service: ServiceDep) -> Response:
    """The workload events of a run."""
    events = await service.list_events(parent.project, parent.location, run_id)
    return ContractResponse(ListEventsResponse(events=events))


@_route("GET", "/machineLearningRuns/{run_id}/analyses")
async def list_analyses(run_id: str, parent: ParentDep, service: ServiceDep) -> Response:
    """The analyses of a run's events."""
    analyses = await service.list_analyses(parent.project, parent.location, run_id)
    return ContractResponse(ListAnalysesResponse(analyses=analyses))


def metrics_consumer(batch_size: int) -> ConsumerSpec[MetricPointsReceived]:
    """Metric points from ingestion, stored in batches."""
    return ConsumerSpec(
        stream=bus.TELEMETRY,
        subject=bus.METRICS_RECEIVED + ".*",
        durable=bus.REGISTRY_METRICS_DURABLE,
        message_type=MetricPointsReceived,
        batch_size=batch_size,
    )


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


class BusHandlers:
    """The registry's batch handlers, bound to its service."""

    def __init__(self, service: RegistryService) -> None:
        self._service = service

    async def on_metrics(self, deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        """Store a batch of metric messages in one transaction."""
        await self._service.store_metrics([delivery.message for delivery in deliveries])

    async def on_events(self, deliveries: list[Delivery[WorkloadEventOpened]]) -> None:
        """Record workload events."""
        await self._service.store_events([delivery.message.event for delivery in deliveries])

    async def on_analyses(self, deliveries: list[Delivery[AnalysisCompleted]]) -> None:
        """Record analyses."""
        await self._service.store_analyses([delivery.message.analysis for delivery in deliveries])
