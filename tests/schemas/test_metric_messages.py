"""MetricPointsReceived v2 (columnar) and the upcaster that keeps v1 messages readable."""

import json
import math
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mldiag_schemas.messages import parse_message
from mldiag_schemas.telemetry import (
    MAX_STEP,
    MAX_TIME,
    MIN_TIME,
    IngestMetrics,
    MetricColumns,
    MetricPointsReceived,
    MetricSeries,
    RunHeartbeat,
    WorkloadSignalReported,
    WriteMetricsRequest,
    from_unix_micros,
    time_problem,
    to_unix_micros,
)

NOW = datetime(2026, 1, 1, 12, 30, 0, 123456, tzinfo=UTC)
_OFFSETS = [timezone(timedelta(hours=hours)) for hours in (-14, -1, 1, 14)]


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


# --- what the store can hold (a bus message can never carry more) ---------------------------

_INT64 = st.integers(min_value=-(2**64), max_value=2**64)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(_INT64, max_size=20))
def test_columns_take_exactly_the_steps_a_bigint_holds(steps: list[int]) -> None:
    columns = {"name": "loss", "steps": steps, "values": [0.0] * len(steps)}
    if all(0 <= step <= MAX_STEP for step in steps):
        assert MetricColumns.model_validate(columns).steps == steps
    else:
        with pytest.raises(ValidationError, match="step_out_of_range"):
            MetricColumns.model_validate(columns)


@settings(max_examples=300, deadline=None)
@given(when=st.datetimes(timezones=st.sampled_from([None, UTC, *_OFFSETS])))
def test_a_time_is_storable_exactly_when_it_converts_to_utc_between_1970_and_9999(
    when: datetime,
) -> None:
    try:  # brute force: convert, as asyncpg and the consumers do
        utc = when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)
        storable = MIN_TIME <= utc <= MAX_TIME
    except OverflowError:
        storable = False
    assert (time_problem(when) is None) == storable


@pytest.mark.parametrize(
    "fields",
    [
        {"host": "h\x00"},
        {"labels": {"k": "v\x00"}},
        {"labels": {"k\n": "v"}},  # `$` alone would let a trailing newline pass
        {"name": "loss\n"},
        {"processIndex": 2**31},
        {"timesUnixUs": [-1]},
        {"timesUnixUs": [to_unix_micros(MAX_TIME) + 1]},
    ],
)
def test_a_bus_message_cannot_carry_what_the_store_refuses(fields: dict[str, object]) -> None:
    columns = {"name": "loss", "steps": [1], "values": [1.0], **fields}
    with pytest.raises(ValidationError):
        MetricColumns.model_validate(columns)


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        (RunHeartbeat, {"pid": 2**31}),
        (RunHeartbeat, {"step": 2**63}),
        (RunHeartbeat, {"host": "\x00"}),
        (RunHeartbeat, {"occurredAt": "0001-01-01T00:00:00+14:00"}),
        (RunHeartbeat, {"fingerprint": {"python": "3.12\x00"}}),
        (WorkloadSignalReported, {"occurredAt": "1969-12-31T23:59:59Z"}),
    ],
)
def test_heartbeats_and_signals_cannot_carry_what_the_store_refuses(
    message: type[RunHeartbeat | WorkloadSignalReported], fields: dict[str, object]
) -> None:
    base: dict[str, object] = {"runId": "run-1", "receivedAt": NOW.isoformat()}
    if message is RunHeartbeat:
        base["intervalSeconds"] = 5
    else:
        base["signal"] = {"kind": "SIGTERM"}
    message.model_validate({**base})  # the base itself is fine
    with pytest.raises(ValidationError):
        message.model_validate({**base, **fields})


def test_a_v1_message_without_points_is_a_validation_error_not_a_key_error() -> None:
    v1 = {"type": "telemetry.metrics.received", "schemaVersion": 1, "runId": "run-1"}
    with pytest.raises(ValidationError):
        parse_message(json.dumps(v1).encode())


@settings(max_examples=100, deadline=None)
@given(bad=st.lists(st.booleans(), max_size=12))
def test_a_write_keeps_every_good_series_and_names_every_bad_one(bad: list[bool]) -> None:
    series = [
        {"name": "bad name" if is_bad else f"m{index}", "steps": [index], "values": [1.0]}
        for index, is_bad in enumerate(bad)
    ]
    write = WriteMetricsRequest.parse_keeping_good_series(json.dumps({"series": series}).encode())
    assert [s.name for s in write.series] == [f"m{i}" for i, b in enumerate(bad) if not b]
    assert write.series_indexes() == [i for i, b in enumerate(bad) if not b]
    assert [r.series_index for r in write.refused_series] == [i for i, b in enumerate(bad) if b]
    assert {r.code for r in write.refused_series} <= {"invalid_metric_name"}


@pytest.mark.parametrize("interval", [math.inf, math.nan, 0.0, 3600.5])
def test_a_heartbeat_on_the_bus_has_a_finite_interval(interval: float) -> None:
    with pytest.raises(ValidationError):
        RunHeartbeat(run_id="run-1", interval_seconds=interval, received_at=NOW)


def test_an_ingest_command_keeps_its_good_series_and_a_storable_time() -> None:
    command = {
        "type": "telemetry.metrics.ingest",
        "runId": "run-1",
        "request": {
            "series": [
                {"name": "loss", "steps": [1], "values": [1.0], "host": "h\x00"},
                {"name": "loss", "steps": [1], "values": [1.0]},
            ]
        },
    }
    parsed = IngestMetrics.model_validate_json(json.dumps(command))
    assert [s.host for s in parsed.request.series] == [""]
    assert [(r.series_index, r.code) for r in parsed.request.refused_series] == [
        (0, "invalid_series")
    ]
    with pytest.raises(ValidationError, match="time_out_of_range"):
        IngestMetrics.model_validate({**command, "occurredAt": "1960-01-01T00:00:00Z"})
