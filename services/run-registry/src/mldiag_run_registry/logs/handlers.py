"""HTTP route of a run's log lines, and the consumer that stores them from the bus."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.http import ContractResponse
from mldiag_platform.resources import ParentDep, route
from mldiag_run_registry.logs.service import LogsService, parse_query
from mldiag_run_registry.resources import RunIdPath
from mldiag_schemas import bus
from mldiag_schemas.auth import Permission
from mldiag_schemas.logs import ListLogsResponse, LogLinesReceived

router = APIRouter()


def _service(request: Request) -> LogsService:
    service: LogsService = request.app.state.logs
    return service


ServiceDep = Annotated[LogsService, Depends(_service)]


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}/logs",
    Permission.RUNS_GET,
    response=ListLogsResponse,
)
async def list_logs(
    run_id: RunIdPath,
    parent: ParentDep,
    service: ServiceDep,
    grep: str = "",
    since: str = "",
    until: str = "",
    host: str | None = None,
    stream: str = "",
    min_severity: Annotated[str, Query(alias="minSeverity")] = "",
    page_size: Annotated[int | None, Query(alias="pageSize")] = None,
    page_token: Annotated[str, Query(alias="pageToken")] = "",
) -> Response:
    """A run's log lines, oldest first: ``grep`` (a regular expression), ``since`` /
    ``until`` (RFC 3339, or a duration before now like ``10m``), ``host``, ``stream``,
    ``minSeverity``; ``pageToken`` is a cursor that stays set at the end while lines can
    still come."""
    query = parse_query(
        grep=grep,
        since=since,
        until=until,
        host=host,
        stream=stream,
        min_severity=min_severity,
    )
    page = await service.list_logs(
        parent.project, parent.location, run_id, query, page_size, page_token
    )
    return ContractResponse(page)


LOGS_CONSUMER = ConsumerSpec(
    stream=bus.TELEMETRY,
    subject=bus.LOGS_RECEIVED + ".*",
    durable=bus.REGISTRY_LOGS_DURABLE,
    message_type=LogLinesReceived,
    batch_size=50,
)
"""Log batches from ingestion (up to 10,000 lines each), stored 50 to a statement."""


class LogsBusHandler:
    """Stores each pulled batch of log messages in one statement (acked after it commits)."""

    def __init__(self, service: LogsService) -> None:
        self._service = service

    async def on_logs(self, deliveries: list[Delivery[LogLinesReceived]]) -> None:
        """Store a batch."""
        await self._service.store([delivery.message for delivery in deliveries])
