"""MetricPointsReceived v2 (columnar) and the upcaster that keeps v1 messages readable."""

import json
import math
import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from mldiag_schemas.messages import parse_message
from mldiag_schemas.telemetry import (
    MetricColumns,
    MetricPointsReceived,
    MetricSeries,
    from_unix_micros,
    to_unix_micros,
)

NOW = datetime(2026, 1, 1, 12, 30, 0, 123456, tzinfo=UTC)


def test_a_v1_message_from_a_stream_parses_into_columns() -> None:
    v1 = {
        "eventId": str(uuid.uuid4()),
        "type": "telemetry.metrics.received",
        "schemaVersion": 1,
        "occurredAt": NOW.isoformat(),
        "runId": "run-1",
        "batchId": str(uuid.uuid4()),
        "chunk": 0,
        "points": [
            {"name": "loss", "step": 1, "value": 0.5, "time": NOW.isoformat(), "host": "h1"},
            {"name": "acc", "step": 1, "value": 0.1, "time": NOW.isoformat()},
            {"name": "loss", "step": 2, "value": math.nan, "time": NOW.isoformat(), "host": "h1"},
        ],
    }
    message = parse_message(json.dumps(v1).encode())
    assert isinstance(message, MetricPointsReceived)
    assert message.schema_version == 2
    assert [(s.name, s.host, s.steps) for s in message.series] == [
        ("loss", "h1", [1, 2]),
        ("acc", "", [1]),
    ]
    assert math.isnan(message.series[0].values[1])
    assert [p.time for p in message.points] == [NOW, NOW, NOW]


def test_v2_round_trips_and_missing_times_mean_receipt() -> None:
    message = MetricPointsReceived(
        run_id="run-1",
        batch_id=uuid.uuid4(),
        chunk=0,
        occurred_at=NOW,
        series=[MetricColumns(name="loss", steps=[1, 2], values=[math.inf, -math.inf])],
    )
    parsed = parse_message(message.model_dump_json().encode())
    assert isinstance(parsed, MetricPointsReceived)
    assert [(p.step, p.value, p.time) for p in parsed.points] == [
        (1, math.inf, NOW),
        (2, -math.inf, NOW),
    ]
    assert from_unix_micros(to_unix_micros(NOW)) == NOW


def test_columns_must_align_and_labels_are_bounded() -> None:
    with pytest.raises(ValidationError):
        MetricColumns(name="loss", steps=[1], values=[1.0, 2.0])
    with pytest.raises(ValidationError, match="at most 8 labels"):
        MetricSeries(name="loss", steps=[], values=[], labels={f"k{i}": "v" for i in range(9)})
    with pytest.raises(ValidationError, match="label key"):
        MetricSeries(name="loss", steps=[], values=[], labels={"no spaces": "v"})
    assert MetricSeries(name="loss", steps=[], values=[], labels={"device": "0"}).labels
