"""Ingestion's domain logic: limits, chunking and idempotent message ids."""

import math
import uuid
from datetime import UTC, datetime

import pytest

from mldiag_ingestion.errors import InvalidRunId, TooManyPoints
from mldiag_ingestion.service import IngestionService
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.telemetry import (
    MAX_POINTS_PER_MESSAGE,
    MetricPointsReceived,
    MetricSeries,
    WriteMetricsRequest,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _Recorder:
    def __init__(self) -> None:
        self.published: list[Envelope] = []

    async def publish_many(self, messages: list[Envelope]) -> None:
        self.published.extend(messages)


def _request(points: int, batch_id: uuid.UUID | None = None) -> WriteMetricsRequest:
    return WriteMetricsRequest(
        batch_id=batch_id,
        series=[MetricSeries(name="loss", steps=list(range(points)), values=[0.5] * points)],
    )


async def test_points_are_chunked_under_the_message_limit() -> None:
    recorder = _Recorder()
    total = MAX_POINTS_PER_MESSAGE * 2 + 7
    response = await IngestionService(recorder, 100_000).write_metrics(
        "run-1", _request(total), NOW
    )
    assert response.accepted_points == total
    chunks = [m for m in recorder.published if isinstance(m, MetricPointsReceived)]
    assert [len(c.points) for c in chunks] == [MAX_POINTS_PER_MESSAGE, MAX_POINTS_PER_MESSAGE, 7]
    assert [c.chunk for c in chunks] == [0, 1, 2]
    steps = [p.step for c in chunks for p in c.points]
    assert steps == list(range(total))


async def test_a_retried_batch_gets_the_same_message_ids() -> None:
    batch_id = uuid.uuid4()
    first, second = _Recorder(), _Recorder()
    await IngestionService(first, 100).write_metrics("run-1", _request(3, batch_id), NOW)
    await IngestionService(second, 100).write_metrics("run-1", _request(3, batch_id), NOW)
    assert [m.event_id for m in first.published] == [m.event_id for m in second.published]


async def test_points_without_times_are_stamped_on_receipt_and_nan_is_kept() -> None:
    recorder = _Recorder()
    request = WriteMetricsRequest(
        series=[MetricSeries(name="loss", steps=[1, 2], values=[math.nan, math.inf], host="h1")]
    )
    await IngestionService(recorder, 100).write_metrics("run-1", request, NOW)
    [message] = recorder.published
    assert isinstance(message, MetricPointsReceived)
    assert [p.time for p in message.points] == [NOW, NOW]
    assert math.isnan(message.points[0].value)
    assert message.points[1].value == math.inf
    assert message.points[0].host == "h1"


async def test_too_many_points_is_a_clear_error() -> None:
    with pytest.raises(TooManyPoints, match="limit is 10"):
        await IngestionService(_Recorder(), 10).write_metrics("run-1", _request(11), NOW)


async def test_invalid_run_id_is_refused_before_publishing() -> None:
    recorder = _Recorder()
    with pytest.raises(InvalidRunId):
        await IngestionService(recorder, 10).write_metrics("Not.Valid", _request(1), NOW)
    assert recorder.published == []
