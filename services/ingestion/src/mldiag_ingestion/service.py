"""Turning a validated write request into bus messages (no HTTP, no NATS client here)."""

import uuid
from datetime import datetime

from mldiag_ingestion.errors import InvalidRunId, TooManyPoints
from mldiag_platform.bus import MessagePublisher
from mldiag_schemas.ids import derived_id, is_run_id
from mldiag_schemas.telemetry import (
    MAX_POINTS_PER_MESSAGE,
    MetricPoint,
    MetricPointsReceived,
    WriteMetricsRequest,
    WriteMetricsResponse,
)

CHUNK_ID_NAMESPACE = uuid.UUID("a4c1d7a2-6f0e-4a9b-8f43-9f2b8f1c3d10")


class IngestionService:
    """Accepts metric writes: checks limits, chunks them, publishes, waits for the acks."""

    def __init__(self, publisher: MessagePublisher, max_points_per_request: int) -> None:
        self._publisher = publisher
        self._max_points = max_points_per_request

    async def write_metrics(
        self, run_id: str, request: WriteMetricsRequest, received_at: datetime
    ) -> WriteMetricsResponse:
        """Publish the request's points; return only once JetStream has stored them all."""
        if not is_run_id(run_id):
            raise InvalidRunId(
                f"invalid run id {run_id!r}: use lower-case letters, digits and '-' (max 63)"
            )
        count = request.point_count()
        if count > self._max_points:
            raise TooManyPoints(
                f"{count} points in one request; the limit is {self._max_points}: split it"
            )
        batch_id = request.batch_id or uuid.uuid4()
        messages = [
            MetricPointsReceived(
                # Derived ids: a client retrying with the same batch id publishes duplicates
                # that JetStream drops and the registry ignores.
                event_id=derived_id(CHUNK_ID_NAMESPACE, str(batch_id), str(index)),
                occurred_at=received_at,
                run_id=run_id,
                batch_id=batch_id,
                chunk=index,
                points=chunk,
            )
            for index, chunk in enumerate(_chunks(request, received_at))
        ]
        await self._publisher.publish_many(messages)
        return WriteMetricsResponse(batch_id=batch_id, accepted_points=count)


def _chunks(request: WriteMetricsRequest, received_at: datetime) -> list[list[MetricPoint]]:
    points = [
        MetricPoint(
            name=series.name,
            step=step,
            value=value,
            time=series.times[index] if series.times is not None else received_at,
            host=series.host,
        )
        for series in request.series
        for index, (step, value) in enumerate(zip(series.steps, series.values, strict=True))
    ]
    return [
        points[start : start + MAX_POINTS_PER_MESSAGE]
        for start in range(0, len(points), MAX_POINTS_PER_MESSAGE)
    ]
