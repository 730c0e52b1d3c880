"""Ingestion's own counters on /metrics (the Ingest dashboard's points/s and rejects)."""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY

from mldiag_ingestion.service import IngestionService
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.telemetry import MetricSeries, WriteMetricsRequest

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _Recorder:
    async def publish_many(self, messages: Sequence[Envelope]) -> None:
        pass


def _points(outcome: str) -> float:
    return REGISTRY.get_sample_value("mldiag_ingest_points_total", {"outcome": outcome}) or 0.0


async def test_accepted_and_rejected_points_are_counted_as_the_answer_counts_them() -> None:
    before = _points("accepted"), _points("rejected")
    request = WriteMetricsRequest(
        series=[
            MetricSeries(
                name="loss",
                steps=[1, 2, 3],
                values=[1.0, 1.0, 1.0],
                times=[NOW, NOW, NOW + timedelta(days=2)],
            )
        ]
    )
    answer = await IngestionService(_Recorder(), 100).write_metrics("run-1", request, NOW)
    assert (answer.accepted_points, answer.rejected_points) == (2, 1)
    after = _points("accepted"), _points("rejected")
    assert (after[0] - before[0], after[1] - before[1]) == (2, 1)
