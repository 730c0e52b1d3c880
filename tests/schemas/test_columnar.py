"""The binary columnar frame: the codec itself, and bus messages written and read as frames."""

import json
import math
import struct
import uuid
from array import array
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mldiag_schemas.columnar import (
    CONTENT_TYPE,
    MAGIC,
    FrameError,
    decode_frame,
    encode_frame,
    int64s_within,
    is_frame,
    read_layout,
)
from mldiag_schemas.messages import content_type_of, encode_message, parse_message
from mldiag_schemas.telemetry import (
    MAX_STEP,
    MAX_TIME_US,
    MetricColumns,
    MetricPointsReceived,
    RunHeartbeat,
)

NOW = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)
SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308]


def _bits(values: Iterable[float]) -> list[int]:
    return list(array("q", array("d", values).tobytes()))


def _message(*series: MetricColumns) -> MetricPointsReceived:
    return MetricPointsReceived(
        occurred_at=NOW, run_id="run-1", batch_id=uuid.uuid4(), chunk=3, series=list(series)
    )


# -- the codec ----------------------------------------------------------------------------


def test_a_frame_round_trips_with_special_values_bit_exact() -> None:
    negative_nan = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000001))[0]
    values = [*SPECIAL, negative_nan]
    frame = encode_frame(
        {"batchId": "b", "series": [{"name": "loss"}]},
        [(list(range(len(values))), values, [10] * len(values))],
    )
    assert is_frame(frame)
    header, columns = decode_frame(frame)
    assert header == {"batchId": "b", "series": [{"name": "loss", "count": 8, "times": True}]}
    assert columns[0].steps == array("q", range(8))
    assert _bits(columns[0].values) == _bits(values)
    assert columns[0].times == array("q", [10] * 8)


def test_empty_series_and_absent_times() -> None:
    frame = encode_frame(
        {"series": [{"name": "a"}, {"name": "b", "labels": {"k": "v"}}]},
        [([], [], None), ([7], [1.5], None)],
    )
    header, columns = decode_frame(frame)
    assert [meta["count"] for meta in header["series"]] == [0, 1]
    assert [meta["times"] for meta in header["series"]] == [False, False]
    assert len(columns[0].steps) == 0
    assert columns[0].times is None
    assert list(columns[1].steps) == [7]
    assert list(columns[1].values) == [1.5]


def test_arrays_and_buffers_go_in_as_they_are() -> None:
    steps, values = array("q", [1, 2, 3]), array("d", [0.5, 1.5, 2.5])
    frame = encode_frame({"series": [{"name": "a"}]}, [(steps, values, memoryview(steps))])
    _, columns = decode_frame(frame)
    assert columns[0].steps == steps
    assert columns[0].values == values
    assert columns[0].times == steps


def test_columns_of_different_lengths_are_refused_when_encoding() -> None:
    with pytest.raises(FrameError, match="differ in length"):
        encode_frame({"series": [{"name": "a"}]}, [([1, 2], [1.0], None)])
    with pytest.raises(FrameError, match="int64"):
        encode_frame({"series": [{"name": "a"}]}, [([2**63], [1.0], None)])


@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20),
            st.booleans(),
        ),
        max_size=5,
    )
)
@settings(max_examples=50)
def test_any_columns_round_trip(series: list[tuple[list[int], bool]]) -> None:
    columns = [
        (steps, [float(step) for step in steps], steps if with_times else None)
        for steps, with_times in series
    ]
    metas = [{"name": f"m{index}"} for index in range(len(series))]
    _, decoded = decode_frame(encode_frame({"series": metas}, columns))
    for (steps, values, times), got in zip(columns, decoded, strict=True):
        assert list(got.steps) == steps
        assert list(got.values) == values
        assert (None if got.times is None else list(got.times)) == times


@given(
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=30),
    st.sampled_from([0, 1, 255, 256, 2**56 - 1, 2**56, MAX_TIME_US, 2**62, MAX_STEP]),
)
@settings(max_examples=300)
def test_the_fast_range_check_agrees_with_brute_force(items: list[int], high: int) -> None:
    near = [high, high + 1, -1, 0, high - 1] if high < MAX_STEP else [high, -1, 0]
    for column in (items, [*items, *near[:2]], near):
        expected = all(0 <= item <= high for item in column)
        assert int64s_within(array("q", column), high) is expected


def _frame() -> bytes:
    return encode_frame({"series": [{"name": "a"}]}, [([1, 2], [1.0, 2.0], [3, 4])])


@pytest.mark.parametrize(
    ("mangle", "match"),
    [
        (lambda frame: frame[:5], "at least"),
        (lambda frame: b"MLDX" + frame[4:], "does not start with MLDC"),
        (lambda frame: frame[:4] + b"\x02" + frame[5:], "version 2"),
        (lambda frame: frame[:-1], "truncated"),
        (lambda frame: frame + b"\x00", "trailing bytes"),
        (lambda frame: frame[:5] + struct.pack("<I", 10**6) + frame[9:], "truncated frame"),
    ],
)
def test_broken_framing_is_a_clear_error(mangle: object, match: str) -> None:
    with pytest.raises(FrameError, match=match):
        read_layout(mangle(_frame()))  # type: ignore[operator]


def _with_header(header: object, body: bytes = b"") -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return MAGIC + b"\x01" + struct.pack("<I", len(text)) + text + body


@pytest.mark.parametrize(
    ("header", "match"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 100_000, "not JSON"),
        ([], "JSON object"),
        ({}, "no `series` list"),
        ({"series": [1]}, "not an object"),
        ({"series": [{"name": "a"}]}, "`count`"),
        ({"series": [{"count": -1}]}, "`count`"),
        ({"series": [{"count": 1.0}]}, "`count`"),
        ({"series": [{"count": 0, "times": "yes"}]}, "`times`"),
        ({"series": [{"count": 1}]}, "truncated"),
    ],
)
def test_a_bad_header_is_a_clear_error(header: object, match: str) -> None:
    with pytest.raises(FrameError, match=match):
        read_layout(_with_header(header))


# -- bus messages as frames ---------------------------------------------------------------


def test_metric_messages_travel_as_frames_and_parse_into_arrays() -> None:
    sent = _message(
        MetricColumns(
            name="loss",
            host="h1",
            process_index=2,
            labels={"device": "3"},
            steps=[0, 1, MAX_STEP],
            values=[math.nan, -0.0, math.inf],
            times_unix_us=[0, 5, MAX_TIME_US],
        ),
        MetricColumns(name="lr", steps=[], values=[]),
        MetricColumns(name="acc", steps=[4], values=[0.5]),
    )
    raw = encode_message(sent)
    assert raw.startswith(MAGIC)
    assert content_type_of(sent) == CONTENT_TYPE
    got = parse_message(raw)
    assert isinstance(got, MetricPointsReceived)
    assert got.model_dump(exclude={"series"}) == sent.model_dump(exclude={"series"})
    loss, lr, acc = got.series
    columns: Any = loss.steps, loss.values  # typed lists; arrays when read from a frame
    assert all(isinstance(column, array) for column in columns)
    assert (loss.name, loss.host, loss.process_index, loss.labels) == (
        "loss",
        "h1",
        2,
        {"device": "3"},
    )
    assert list(loss.steps) == [0, 1, MAX_STEP]
    assert _bits(loss.values) == _bits([math.nan, -0.0, math.inf])
    assert list(loss.times_unix_us or []) == [0, 5, MAX_TIME_US]
    assert (len(lr.steps), lr.times_unix_us) == (0, None)
    assert (list(acc.steps), list(acc.values), acc.times_unix_us) == ([4], [0.5], None)
    # array-backed messages still dump as the JSON contract, and that JSON parses too
    again = parse_message(got.model_dump_json().encode())
    assert isinstance(again, MetricPointsReceived)
    assert again.series[2] == MetricColumns(name="acc", steps=[4], values=[0.5])
    assert got.point_count() == 4
    assert [point.step for point in got.points] == [0, 1, MAX_STEP, 4]


def test_other_messages_stay_json() -> None:
    heartbeat = RunHeartbeat(
        run_id="run-1", host="h", process_index=0, pid=1, interval_seconds=10.0, received_at=NOW
    )
    raw = encode_message(heartbeat)
    assert raw.startswith(b"{")
    assert content_type_of(heartbeat) == "application/json"
    assert parse_message(raw) == heartbeat


def _metric_frame(header_changes: dict[str, object], columns: list[tuple]) -> bytes:  # type: ignore[type-arg]
    raw = encode_message(_message(MetricColumns(name="loss", steps=[1], values=[1.0])))
    header = read_layout(raw).header
    metas = [
        {key: value for key, value in header["series"][0].items() if key not in ("count", "times")}
    ] * len(columns)
    return encode_frame({**header, **header_changes, "series": metas}, columns)


def test_unknown_header_fields_are_ignored() -> None:
    raw = encode_message(_message(MetricColumns(name="loss", steps=[1], values=[1.0])))
    header = read_layout(raw).header
    header["fromTheFuture"] = {"x": 1}
    metas = [{**header["series"][0], "newSeriesField": True}]
    metas[0].pop("count")
    metas[0].pop("times")
    got = parse_message(encode_frame({**header, "series": metas}, [([1], [1.0], None)]))
    assert isinstance(got, MetricPointsReceived)
    assert list(got.series[0].steps) == [1]


@pytest.mark.parametrize(
    ("changes", "columns", "match"),
    [
        ({}, [([-1], [1.0], None)], "steps must lie within"),
        ({}, [([1], [1.0], [-1])], "times must lie within"),
        ({}, [([1], [1.0], [MAX_TIME_US + 1])], "times must lie within"),
        ({"type": "telemetry.heartbeat.received"}, [([1], [1.0], None)], None),
        ({"runId": "Not A Run"}, [([1], [1.0], None)], None),
        ({"chunk": -1}, [([1], [1.0], None)], None),
    ],
)
def test_nothing_out_of_range_gets_past_a_reader(
    changes: dict[str, object],
    columns: list[tuple[Any, ...]],
    match: str | None,
) -> None:
    with pytest.raises(ValueError, match=match):
        parse_message(_metric_frame(changes, columns))


def test_a_frame_with_a_bad_series_name_is_refused() -> None:
    raw = encode_message(_message(MetricColumns(name="loss", steps=[1], values=[1.0])))
    header = read_layout(raw).header
    meta = {"name": "bad name!"}
    with pytest.raises(ValueError, match="name"):
        parse_message(encode_frame({**header, "series": [meta]}, [([1], [1.0], None)]))


def test_a_truncated_metric_frame_is_poison() -> None:
    raw = encode_message(_message(MetricColumns(name="loss", steps=[1, 2], values=[1.0, 2.0])))
    with pytest.raises(ValueError, match="truncated"):
        parse_message(raw[:-3])
