"""Ingestion's domain logic: limits, chunking and idempotent message ids."""

import math
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from mldiag_ingestion.errors import (
    InvalidBatch,
    InvalidRunId,
    TimestampInFuture,
    TooManyLabelValues,
    TooManyPoints,
)
from mldiag_ingestion.service import IngestionService, refuse_if_nothing_accepted
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.telemetry import (
    MAX_POINTS_PER_MESSAGE,
    MetricPointsReceived,
    MetricSeries,
    SignalKind,
    SignalRequest,
    WorkloadSignalReported,
    WriteMetricsRequest,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _Recorder:
    def __init__(self) -> None:
        self.published: list[Envelope] = []

    async def publish_many(self, messages: Sequence[Envelope]) -> None:
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


async def test_series_keep_host_process_and_labels_and_are_sliced_across_chunks() -> None:
    recorder = _Recorder()
    size = MAX_POINTS_PER_MESSAGE
    request = WriteMetricsRequest(
        series=[
            MetricSeries(
                name="loss",
                steps=list(range(size - 2)),
                values=[1.0] * (size - 2),
                host="h1",
                process_index=3,
                labels={"device": "3"},
            ),
            MetricSeries(
                name="grad_norm",
                steps=list(range(5)),
                values=[2.0] * 5,
                times=[NOW - timedelta(seconds=5 - i) for i in range(5)],
            ),
        ]
    )
    await IngestionService(recorder, 100_000).write_metrics("run-1", request, NOW)
    chunks = [m for m in recorder.published if isinstance(m, MetricPointsReceived)]
    assert [c.point_count() for c in chunks] == [size, 3]
    first, second = chunks
    assert [(s.name, len(s.steps)) for s in first.series] == [("loss", size - 2), ("grad_norm", 2)]
    assert (first.series[0].process_index, first.series[0].labels) == (3, {"device": "3"})
    assert second.series[0].steps == [2, 3, 4]
    assert [p.time for p in second.points] == [NOW - timedelta(seconds=3 - i) for i in range(3)]


async def test_a_point_far_in_the_future_is_refused_by_its_index_and_the_rest_stored() -> None:
    recorder = _Recorder()
    request = WriteMetricsRequest(
        series=[
            MetricSeries(
                name="loss",
                steps=[1, 2],
                values=[1.0, 1.0],
                times=[NOW, NOW + timedelta(days=1, seconds=1)],
            )
        ]
    )
    result = await IngestionService(recorder, 100).write_metrics("run-1", request, NOW)
    assert (result.accepted_points, result.rejected_points) == (1, 1)
    [rejection] = result.rejected
    assert (rejection.series_index, rejection.point_indexes, rejection.code) == (
        0,
        [1],
        "timestamp_in_future",
    )
    [message] = recorder.published
    assert isinstance(message, MetricPointsReceived)
    assert [p.step for p in message.points] == [1]
    ok = WriteMetricsRequest(
        series=[
            MetricSeries(name="loss", steps=[1], values=[1.0], times=[NOW + timedelta(hours=23)])
        ]
    )
    await IngestionService(recorder, 100).write_metrics("run-1", ok, NOW)
    assert len(recorder.published) == 2


async def test_only_out_of_range_points_are_refused_each_for_its_first_reason() -> None:
    recorder = _Recorder()
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    far = datetime.fromisoformat("0001-01-01T00:00:00+14:00")  # year 0 once in UTC
    request = WriteMetricsRequest(
        series=[
            MetricSeries(
                name="loss",
                steps=[0, 2**63, 2, -1, 4, 5, 2**63 - 1],
                values=[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                times=[NOW, far, NOW, NOW, far, epoch - timedelta(microseconds=1), epoch],
            )
        ]
    )
    result = await IngestionService(recorder, 100).write_metrics("run-1", request, NOW)
    assert result.accepted_points == 3
    assert result.rejected_points == 4
    assert [(r.code, r.point_indexes, r.rejected_points) for r in result.rejected] == [
        ("step_out_of_range", [1, 3], 2),
        ("time_out_of_range", [4, 5], 2),
    ]
    [message] = recorder.published
    assert isinstance(message, MetricPointsReceived)
    assert [(p.step, p.value) for p in message.points] == [(0, 0.0), (2, 2.0), (2**63 - 1, 6.0)]
    assert [p.time for p in message.points] == [NOW, NOW, epoch]


async def test_series_left_out_while_parsing_are_listed_by_their_index_as_sent() -> None:
    recorder = _Recorder()
    request = WriteMetricsRequest.parse_keeping_good_series(
        {
            "series": [
                {"name": "bad name", "steps": [1], "values": [1.0]},
                {"name": "loss", "steps": [1, 2**63], "values": [1.0, 2.0]},
                {"name": "acc", "steps": [1], "values": [1.0], "host": "h\x00"},
            ]
        }
    )
    result = await IngestionService(recorder, 100).write_metrics("run-1", request, NOW)
    assert result.accepted_points == 1
    assert [(r.series_index, r.name, r.code, r.point_indexes) for r in result.rejected] == [
        (0, "bad name", "invalid_metric_name", None),
        (1, "loss", "step_out_of_range", [1]),
        (2, "acc", "invalid_series", None),
    ]


async def test_a_write_with_nothing_good_publishes_nothing_and_names_every_refusal() -> None:
    recorder = _Recorder()
    request = WriteMetricsRequest(
        series=[MetricSeries(name="loss", steps=[2**64], values=[1.0], times=[NOW])]
    )
    result = await IngestionService(recorder, 100).write_metrics("run-1", request, NOW)
    assert recorder.published == []
    with pytest.raises(InvalidBatch, match="steps must lie within") as raised:
        refuse_if_nothing_accepted(result)
    assert raised.value.details[0]["pointIndexes"] == [0]
    future = WriteMetricsRequest(
        series=[MetricSeries(name="loss", steps=[1], values=[1.0], times=[NOW + timedelta(days=2)])]
    )
    result = await IngestionService(recorder, 100).write_metrics("run-1", future, NOW)
    with pytest.raises(TimestampInFuture):
        refuse_if_nothing_accepted(result)
    refuse_if_nothing_accepted(  # an empty write is no mistake
        await IngestionService(recorder, 100).write_metrics(
            "run-1", WriteMetricsRequest(series=[]), NOW
        )
    )


async def test_too_many_label_sets_for_one_metric_is_refused() -> None:
    recorder = _Recorder()
    request = WriteMetricsRequest(
        series=[
            MetricSeries(name="loss", steps=[1], values=[1.0], labels={"device": str(device)})
            for device in range(3)
        ]
    )
    with pytest.raises(TooManyLabelValues):
        await IngestionService(recorder, 100, max_label_sets_per_metric=2).write_metrics(
            "run-1", request, NOW
        )
    assert recorder.published == []
    # the same label set twice is one series
    again = WriteMetricsRequest(
        series=[
            MetricSeries(name="loss", steps=[i], values=[1.0], labels={"d": "0"}) for i in range(3)
        ]
    )
    await IngestionService(recorder, 100, max_label_sets_per_metric=1).write_metrics(
        "run-1", again, NOW
    )
    assert len(recorder.published) == 1


async def test_a_signal_id_derives_from_the_process_kind_and_time() -> None:
    recorder = _Recorder()
    service = IngestionService(recorder, 100)
    sent = SignalRequest(kind=SignalKind.SIGTERM, host="h", pid=7, time=NOW - timedelta(seconds=1))
    first = await service.report_signal("run-1", sent, NOW)
    retried = await service.report_signal("run-1", sent, NOW + timedelta(seconds=5))
    assert first.event_id == retried.event_id  # JetStream drops the retry
    assert first.occurred_at == NOW - timedelta(seconds=1)
    assert retried.received_at == NOW + timedelta(seconds=5)
    other_ids = {
        (await service.report_signal("run-1", changed, NOW)).event_id
        for changed in (
            sent.model_copy(update={"kind": SignalKind.PREEMPTION_NOTICE}),
            sent.model_copy(update={"pid": 8}),
            sent.model_copy(update={"process_index": 1}),
            sent.model_copy(update={"time": NOW}),
        )
    }
    assert len(other_ids) == 4 and first.event_id not in other_ids
    assert (await service.report_signal("run-2", sent, NOW)).event_id != first.event_id
    assert all(isinstance(message, WorkloadSignalReported) for message in recorder.published)


async def test_a_signal_without_time_happened_on_receipt_and_a_naive_one_is_utc() -> None:
    service = IngestionService(_Recorder(), 100)
    untimed = await service.report_signal("run-1", SignalRequest(kind=SignalKind.EXCEPTION), NOW)
    assert untimed.occurred_at == NOW and untimed.signal.time is None
    naive = SignalRequest(kind=SignalKind.EXCEPTION, time=NOW.replace(tzinfo=None))
    reported = await service.report_signal("run-1", naive, NOW)
    assert reported.occurred_at == NOW == reported.signal.time
