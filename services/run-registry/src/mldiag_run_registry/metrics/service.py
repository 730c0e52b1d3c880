"""Metric series: storing points from the bus and reading them back (no SQL here)."""

from collections.abc import Sequence
from datetime import datetime

from mldiag_run_registry.errors import InvalidPageToken
from mldiag_run_registry.lookup import RunLookup
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_run_registry.paging import decode_token, encode_token, page_size
from mldiag_schemas.telemetry import (
    ListMetricsResponse,
    MetricPointsReceived,
    ReadMetricSeriesResponse,
)

DEFAULT_POINTS_PAGE_SIZE = 10_000
MAX_POINTS_PAGE_SIZE = 100_000


class MetricsService:
    """A run's metric series."""

    def __init__(self, repository: MetricsRepository, runs: RunLookup) -> None:
        self._repository = repository
        self._runs = runs

    async def store(self, messages: Sequence[MetricPointsReceived]) -> int:
        """Store points from the bus (idempotent per message); return how many were new."""
        return await self._repository.store_messages(messages)

    async def list_metrics(self, project: str, location: str, run_id: str) -> ListMetricsResponse:
        """The metrics a run recorded."""
        await self._runs.get_run(project, location, run_id)
        return ListMetricsResponse(metrics=await self._repository.list_metrics(run_id))

    async def read_series(
        self,
        project: str,
        location: str,
        run_id: str,
        metric: str,
        requested_size: int | None,
        page_token: str,
    ) -> ReadMetricSeriesResponse:
        """A page of one metric's points, in step order."""
        await self._runs.get_run(project, location, run_id)
        size = page_size(requested_size, DEFAULT_POINTS_PAGE_SIZE, MAX_POINTS_PAGE_SIZE)
        after = None
        if page_token:
            fields = decode_token(page_token)
            try:
                after = (int(fields["s"]), str(fields["h"]), datetime.fromisoformat(fields["t"]))
            except (KeyError, TypeError, ValueError):
                raise InvalidPageToken("the page token is not valid") from None
        points = await self._repository.read_series(run_id, metric, size + 1, after)
        token = ""
        if len(points) > size:
            points = points[:size]
            last = points[-1]
            token = encode_token({"s": last.step, "h": last.host, "t": last.time.isoformat()})
        return ReadMetricSeriesResponse(metric=metric, points=points, next_page_token=token)
