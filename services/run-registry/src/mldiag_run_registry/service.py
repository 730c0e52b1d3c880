"""The registry's domain logic: runs, their metric series, events and analyses.

No SQL and no bus client here: the repository owns transactions, the outbox publishes
what they committed.
"""

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import structlog

from mldiag_platform.outbox import Flusher
from mldiag_run_registry.errors import (
    InvalidPageSize,
    InvalidPageToken,
    InvalidRunId,
    RunAlreadyExists,
    RunNotFound,
)
from mldiag_run_registry.repository import RunRepository
from mldiag_schemas.analyses import Analysis
from mldiag_schemas.events import WorkloadEvent
from mldiag_schemas.ids import is_run_id, new_run_id, run_name
from mldiag_schemas.runs import CreateRunRequest, ListRunsResponse, Run, RunCreated, RunState
from mldiag_schemas.telemetry import (
    ListMetricsResponse,
    MetricPointsReceived,
    ReadMetricSeriesResponse,
)

log = structlog.get_logger(__name__)

DEFAULT_PAGE_SIZE = 10
MAX_PAGE_SIZE = 1000
DEFAULT_POINTS_PAGE_SIZE = 10_000
MAX_POINTS_PAGE_SIZE = 100_000


class RegistryService:
    """Runs and what is recorded against them."""

    def __init__(self, repository: RunRepository, outbox: Flusher) -> None:
        self._repository = repository
        self._outbox = outbox

    async def create_run(self, project: str, location: str, request: CreateRunRequest) -> Run:
        """Create a run (ACTIVE) and announce it once committed."""
        now = datetime.now(UTC)
        run_id = request.run_id or new_run_id()
        run = Run(
            name=run_name(project, location, run_id),
            run_id=run_id,
            display_name=request.display_name,
            run_set=request.run_set,
            labels=request.labels,
            state=RunState.ACTIVE,
            create_time=now,
            update_time=now,
        )
        created = await self._repository.insert_run(
            project, location, run, [RunCreated(occurred_at=now, run=run)]
        )
        if not created:
            raise RunAlreadyExists(f"run {run_id!r} already exists")
        await self._outbox.flush()
        log.info("run.created", run_id=run_id, project=project)
        return run

    async def get_run(self, project: str, location: str, run_id: str) -> Run:
        """The run, or :class:`RunNotFound`."""
        _check_run_id(run_id)
        run = await self._repository.get_run(project, location, run_id)
        if run is None:
            raise RunNotFound(f"run {run_name(project, location, run_id)!r} not found")
        return run

    async def list_runs(
        self, project: str, location: str, page_size: int | None, page_token: str
    ) -> ListRunsResponse:
        """A page of runs, newest first."""
        size = _page_size(page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        after = None
        if page_token:
            fields = _decode_token(page_token)
            try:
                after = (datetime.fromisoformat(fields["t"]), str(fields["r"]))
            except (KeyError, TypeError, ValueError):
                raise InvalidPageToken("the page token is not valid") from None
        runs = await self._repository.list_runs(project, location, size + 1, after)
        token = ""
        if len(runs) > size:
            runs = runs[:size]
            token = _encode_token({"t": runs[-1].create_time.isoformat(), "r": runs[-1].run_id})
        return ListRunsResponse(machine_learning_runs=runs, next_page_token=token)

    async def list_metrics(self, project: str, location: str, run_id: str) -> ListMetricsResponse:
        """The metrics a run recorded."""
        await self.get_run(project, location, run_id)
        return ListMetricsResponse(metrics=await self._repository.list_metrics(run_id))

    async def read_series(
        self,
        project: str,
        location: str,
        run_id: str,
        metric: str,
        page_size: int | None,
        page_token: str,
    ) -> ReadMetricSeriesResponse:
        """A page of one metric's points, in step order."""
        await self.get_run(project, location, run_id)
        size = _page_size(page_size, DEFAULT_POINTS_PAGE_SIZE, MAX_POINTS_PAGE_SIZE)
        after = None
        if page_token:
            fields = _decode_token(page_token)
            try:
                after = (int(fields["s"]), str(fields["h"]), datetime.fromisoformat(fields["t"]))
            except (KeyError, TypeError, ValueError):
                raise InvalidPageToken("the page token is not valid") from None
        points = await self._repository.read_series(run_id, metric, size + 1, after)
        token = ""
        if len(points) > size:
            points = points[:size]
            last = points[-1]
            token = _encode_token({"s": last.step, "h": last.host, "t": last.time.isoformat()})
        return ReadMetricSeriesResponse(metric=metric, points=points, next_page_token=token)

    async def store_metrics(self, messages: Sequence[MetricPointsReceived]) -> int:
        """Store points from the bus (idempotent per message); return how many were new."""
        return await self._repository.store_metric_messages(messages)

    async def store_events(self, events: Sequence[WorkloadEvent]) -> int:
        """Record workload events (idempotent)."""
        return await self._repository.store_events(events)

    async def store_analyses(self, analyses: Sequence[Analysis]) -> int:
        """Record analyses (idempotent)."""
        return await self._repository.store_analyses(analyses)

    async def list_events(self, project: str, location: str, run_id: str) -> list[WorkloadEvent]:
        """A run's events, oldest first."""
        await self.get_run(project, location, run_id)
        return await self._repository.list_events(run_id)

    async def list_analyses(self, project: str, location: str, run_id: str) -> list[Analysis]:
        """A run's analyses, oldest first."""
        await self.get_run(project, location, run_id)
        return await self._repository.list_analyses(run_id)


def _check_run_id(run_id: str) -> None:
    if not is_run_id(run_id):
        raise InvalidRunId(
            f"invalid run id {run_id!r}: use lower-case letters, digits and '-' (max 63)"
        )


def _page_size(requested: int | None, default: int, maximum: int) -> int:
    if requested is None or requested == 0:
        return default
    if requested < 0:
        raise InvalidPageSize(f"pageSize must be positive, got {requested}")
    return min(requested, maximum)


def _encode_token(fields: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode()


def _decode_token(token: str) -> dict[str, Any]:
    try:
        fields = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError):
        raise InvalidPageToken("the page token is not valid") from None
    if not isinstance(fields, dict):
        raise InvalidPageToken("the page token is not valid")
    return fields
