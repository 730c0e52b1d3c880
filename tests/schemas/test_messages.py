"""Bus messages: wire format, discriminated parsing, upcasting."""

import json
import math
import uuid
from datetime import UTC, datetime

import pytest

from mldiag_schemas import envelope
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
    # A step out of range is one bad point, refused by its index at ingestion with the rest
    # of the series kept (tests/ingestion), not a bad request.
    assert MetricSeries(name="loss", steps=[-1, 1], values=[1.0, 2.0]).steps == [-1, 1]


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


# Poison on the bus: whatever the bytes are, parsing raises ValueError, never anything else,
# so the consumer's boundary dead-letters them (a RecursionError or KeyError once escaped it
# and killed the pull loop of every durable that read the message).


def test_json_nested_past_the_parser_s_limit_is_a_value_error() -> None:
    deep = b'{"type": "telemetry.metrics.received", "x": ' + b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(ValueError, match="nests too deep"):
        parse_message(deep + b"}")


def test_an_upcaster_that_fails_is_a_value_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(data: dict[str, object]) -> dict[str, object]:
        return {"points": data["points"]}  # a KeyError on a v1 message without points

    monkeypatch.setitem(envelope._UPCASTERS, ("telemetry.metrics.received", 1), broken)
    v1_without_points = {
        "type": "telemetry.metrics.received",
        "schemaVersion": 1,
        "runId": "run-1",
        "batchId": str(uuid.uuid4()),
        "chunk": 0,
    }
    with pytest.raises(ValueError, match="KeyError"):
        parse_message(json.dumps(v1_without_points).encode())


@pytest.mark.parametrize("raw", [b"", b"[1, 2]", b'"text"', b"\xff\xfe", b"{not json", b"null"])
def test_bytes_that_are_no_message_are_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        parse_message(raw)


# Tolerant readers: a newer publisher's added fields are ignored, so services can be upgraded
# one at a time (HTTP requests stay strict).


def test_a_field_added_by_a_newer_publisher_is_ignored_at_every_depth() -> None:
    message = _points(1.0, 2.0)
    data = json.loads(message.model_dump_json())
    data["addedInV3"] = {"anything": [1, 2]}
    data["series"][0]["unitHint"] = "s"
    parsed = parse_message(json.dumps(data).encode())
    assert parsed == message


def test_an_added_field_does_not_hide_a_real_error() -> None:
    data = json.loads(_points(1.0).model_dump_json())
    data["addedInV3"] = True
    data["runId"] = "Not A Run Id"
    with pytest.raises(ValueError, match="runId"):
        parse_message(json.dumps(data).encode())


def test_http_bodies_stay_strict() -> None:
    data = json.loads(_points(1.0).model_dump_json())
    data["addedInV3"] = True
    with pytest.raises(ValueError, match="addedInV3"):
        MetricPointsReceived.model_validate(data)
