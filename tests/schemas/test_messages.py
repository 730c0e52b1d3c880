"""Bus messages: wire format, discriminated parsing, upcasting."""

import math
import uuid
from datetime import UTC, datetime

import pytest

from mldiag_schemas.bus import ALL_STREAMS, Namespace, stream_of
from mldiag_schemas.envelope import upcast, upcaster
from mldiag_schemas.ids import is_run_id
from mldiag_schemas.messages import parse_message
from mldiag_schemas.telemetry import MetricPoint, MetricPointsReceived, MetricSeries

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _points(*values: float) -> MetricPointsReceived:
    return MetricPointsReceived(
        run_id="run-1",
        batch_id=uuid.uuid4(),
        chunk=0,
        points=[
            MetricPoint(name="loss", step=step, value=value, time=NOW)
            for step, value in enumerate(values)
        ],
    )


def test_non_finite_values_survive_the_wire() -> None:
    message = _points(1.5, math.nan, math.inf, -math.inf)
    raw = message.model_dump_json().encode()
    assert b"NaN" in raw and b"-Infinity" in raw
    parsed = parse_message(raw)
    assert isinstance(parsed, MetricPointsReceived)
    values = [point.value for point in parsed.points]
    assert values[0] == 1.5
    assert math.isnan(values[1])
    assert values[2:] == [math.inf, -math.inf]


def test_wire_names_are_camel_case() -> None:
    raw = _points(1.0).model_dump_json()
    assert '"eventId"' in raw and '"runId"' in raw and '"schemaVersion":2' in raw


def test_parse_rejects_unknown_types_and_garbage() -> None:
    with pytest.raises(ValueError):
        parse_message(b'{"type": "nope.nope.nope"}')
    with pytest.raises(ValueError):
        parse_message(b"not json")
    with pytest.raises(ValueError):
        parse_message(b"[1, 2]")


def test_upcasters_lift_old_versions_step_by_step() -> None:
    @upcaster("test.thing.happened", 1)
    def rename(data: dict[str, object]) -> dict[str, object]:
        data["newName"] = data.pop("oldName")
        return data

    @upcaster("test.thing.happened", 2)
    def add_default(data: dict[str, object]) -> dict[str, object]:
        return {**data, "extra": 0}

    old = {"type": "test.thing.happened", "schemaVersion": 1, "oldName": "x"}
    lifted = upcast(old, {"test.thing.happened": 3})
    assert lifted == {"type": "test.thing.happened", "schemaVersion": 3, "newName": "x", "extra": 0}


def test_missing_upcaster_is_an_error() -> None:
    with pytest.raises(ValueError, match="no upcaster"):
        upcast({"type": "test.other", "schemaVersion": 1}, {"test.other": 2})


def test_series_columns_must_align() -> None:
    with pytest.raises(ValueError, match="same length"):
        MetricSeries(name="loss", steps=[1, 2], values=[1.0])
    with pytest.raises(ValueError, match="non-negative"):
        MetricSeries(name="loss", steps=[-1], values=[1.0])


def test_namespace_applies_to_subjects_streams_and_durables() -> None:
    ns = Namespace("acme")
    assert (
        ns.subject("telemetry.metrics.received", "run-1") == "acme.telemetry.metrics.received.run-1"
    )
    assert ns.stream(stream_of("telemetry.metrics.received")) == "ACME_TELEMETRY"
    assert ns.base_subject("acme.events.workload.opened.r") == "events.workload.opened.r"
    assert ns.durable("run-registry-metrics") == "acme-run-registry-metrics"
    subjects = [s for spec in ALL_STREAMS for s in ns.stream_subjects(spec)]
    assert len(subjects) == len(set(subjects))


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("run-1", True),
        ("a", True),
        ("Run", False),
        ("a.b", False),
        ("-a", False),
        ("a" * 64, False),
    ],
)
def test_run_ids_are_subject_safe(value: str, valid: bool) -> None:
    assert is_run_id(value) is valid
