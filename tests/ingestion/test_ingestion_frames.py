"""Metrics writes sent as binary columnar frames, against a real NATS server: accepted,
stored bit-exact, and refused exactly as the same write in JSON is."""

import gzip
import json
import math
import struct
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_ingestion.app import create_app
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import METRICS_RECEIVED, TELEMETRY, Namespace
from mldiag_schemas.columnar import CONTENT_TYPE, encode_frame
from mldiag_schemas.telemetry import MAX_POINTS_PER_MESSAGE, MetricPointsReceived, to_unix_micros
from support import read_messages, read_stream, serving

pytestmark = pytest.mark.connected

WRITE = "/v1/machineLearningRuns/run-1/metrics:write"
FRAME = {"Content-Type": CONTENT_TYPE}
NOW = datetime.now(UTC)
NOW_US = to_unix_micros(NOW)
FUTURE_US = to_unix_micros(NOW + timedelta(days=2))


@pytest.fixture
async def api(
    nats_settings: NatsSettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    settings = IngestionSettings(
        nats=nats_settings,
        max_points_per_request=20_000,
        otlp_grpc_port=0,
        otlp_http_port=0,
    )
    async with serving(create_app(settings), api_tokens.headers()) as client:
        yield client


Series = dict[str, Any]
"""A series as JSON would send it, with ``timesUs`` (µs) instead of ``times``."""


def _frame(series: Sequence[Series], **header: Any) -> bytes:
    metas = [
        {key: value for key, value in s.items() if key not in ("steps", "values", "timesUs")}
        for s in series
    ]
    columns = [(s["steps"], s["values"], s.get("timesUs")) for s in series]
    return encode_frame({**header, "series": metas}, columns)


def _json(series: Sequence[Series], **header: Any) -> bytes:
    def as_json(s: Series) -> Series:
        out = {key: value for key, value in s.items() if key != "timesUs"}
        if "timesUs" in s:
            out["times"] = [
                (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)).isoformat()
                for us in s["timesUs"]
            ]
        return out

    return json.dumps({**header, "series": [as_json(s) for s in series]}).encode()


async def _stored(settings: NatsSettings) -> list[MetricPointsReceived]:
    return await read_messages(settings, METRICS_RECEIVED, MetricPointsReceived)


def _bits(values: Sequence[float]) -> list[bytes]:
    return [struct.pack("<d", value) for value in values]


async def test_a_frame_is_stored_bit_exact_as_a_frame(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    values = [0.5, math.nan, math.inf, -math.inf, -0.0]
    series = {
        "name": "loss",
        "host": "h1",
        "processIndex": 2,
        "labels": {"device": "0"},
        "steps": [1, 2, 3, 4, 5],
        "values": values,
        "timesUs": [NOW_US - 5 + i for i in range(5)],
    }
    batch = str(uuid.uuid4())
    response = await api.post(WRITE, content=_frame([series], batchId=batch), headers=FRAME)
    assert response.status_code == 202, response.text
    assert response.json() == {
        "batchId": batch,
        "acceptedPoints": 5,
        "rejectedPoints": 0,
        "rejected": [],
    }
    [raw] = await read_stream(
        nats_settings.url, f"{nats_settings.namespace}.{METRICS_RECEIVED}.*", _stream(nats_settings)
    )
    assert raw.data.startswith(b"MLDC")
    assert raw.headers is not None
    assert raw.headers["Content-Type"] == CONTENT_TYPE
    [message] = await _stored(nats_settings)
    [columns] = message.series
    assert (columns.name, columns.host, columns.process_index, columns.labels) == (
        "loss",
        "h1",
        2,
        {"device": "0"},
    )
    assert list(columns.steps) == [1, 2, 3, 4, 5]
    assert _bits(columns.values) == _bits(values)
    assert list(columns.times_unix_us or []) == series["timesUs"]


def _stream(settings: NatsSettings) -> str:
    return Namespace(settings.namespace).stream(TELEMETRY)


async def test_gzipped_and_unlabelled_frames_are_accepted(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    frame = _frame([{"name": "loss", "steps": [1, 2], "values": [1.0, 2.0]}])
    gzipped = await api.post(
        WRITE, content=gzip.compress(frame), headers={**FRAME, "Content-Encoding": "gzip"}
    )
    assert gzipped.status_code == 202, gzipped.text
    # a client that forgets the content type is known by the frame's magic
    bare = await api.post(WRITE, content=frame, headers={"Content-Type": "application/json"})
    assert bare.status_code == 202, bare.text
    messages = await _stored(nats_settings)
    assert len(messages) == 2
    assert all(m.series[0].times_unix_us is None for m in messages)
    assert all(m.occurred_at.year >= NOW.year for m in messages)


async def test_a_retried_frame_is_stored_once(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    frame = _frame([{"name": "loss", "steps": [1], "values": [1.0]}], batchId=str(uuid.uuid4()))
    assert (await api.post(WRITE, content=frame, headers=FRAME)).status_code == 202
    assert (await api.post(WRITE, content=frame, headers=FRAME)).status_code == 202
    assert len(await _stored(nats_settings)) == 1


async def test_long_series_are_chunked_in_order(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    size = 2 * MAX_POINTS_PER_MESSAGE + 7
    series = [
        {"name": "loss", "steps": list(range(size)), "values": [i / 3 for i in range(size)]},
        {"name": "lr", "steps": [0, 1], "values": [0.1, 0.2], "timesUs": [NOW_US, NOW_US]},
    ]
    response = await api.post(WRITE, content=_frame(series), headers=FRAME)
    assert response.status_code == 202, response.text
    messages = sorted(await _stored(nats_settings), key=lambda m: m.chunk)
    assert [m.point_count() for m in messages] == [MAX_POINTS_PER_MESSAGE] * 2 + [9]
    steps = [step for m in messages for c in m.series if c.name == "loss" for step in c.steps]
    values = [v for m in messages for c in m.series if c.name == "loss" for v in c.values]
    assert steps == list(range(size))
    assert values == [i / 3 for i in range(size)]


MIXED: list[Series] = [
    {"name": "loss", "steps": [1, 2], "values": [1.0, 2.0], "labels": {"device": "1"}},
    {
        "name": "loss",
        "steps": [3, 4, 5],
        "values": [1.0, 2.0, 3.0],
        "timesUs": [NOW_US, FUTURE_US, -1],
    },
    {"name": "acc", "steps": [1], "values": [1.0], "host": "node\x00"},
    {"name": "acc", "steps": [1, 2], "values": [1.0, 2.0], "labels": {"k": "v\x00"}},
    {"name": "bad name!", "steps": [1, 2, 3], "values": [1.0, 2.0, 3.0]},
    {
        "name": "grad",
        "steps": [-1, 7, -3],
        "values": [1.0, 2.0, 3.0],
        "timesUs": [-5, FUTURE_US, NOW_US],
    },
    {"name": "x", "steps": [1], "values": [1.0], "processIndex": -1},
    {"name": "y", "steps": [1], "values": [1.0], "unknownField": 1},
]


async def test_refusals_are_the_json_paths_to_the_letter(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    as_json = await api.post(WRITE, content=_json(MIXED))
    as_frame = await api.post(WRITE, content=_frame(MIXED), headers=FRAME)
    assert as_json.status_code == as_frame.status_code == 202, as_frame.text
    answer = as_frame.json()
    expected = as_json.json()
    del answer["batchId"], expected["batchId"]
    assert answer == expected
    assert (answer["acceptedPoints"], answer["rejectedPoints"]) == (3, 13)
    assert [(r["seriesIndex"], r["code"], r["pointIndexes"]) for r in answer["rejected"]] == [
        (1, "time_out_of_range", [2]),
        (1, "timestamp_in_future", [1]),
        (2, "invalid_series", None),
        (3, "invalid_labels", None),
        (4, "invalid_metric_name", None),
        (5, "step_out_of_range", [0, 2]),
        (5, "timestamp_in_future", [1]),
        (6, "invalid_series", None),
        (7, "invalid_series", None),
    ]
    stored = [[(c.name, list(c.steps)) for c in m.series] for m in await _stored(nats_settings)]
    assert stored == [[("loss", [1, 2]), ("loss", [3])]] * 2


@pytest.mark.parametrize(
    ("series", "code", "field"),
    [
        ({"steps": [-1]}, "invalid_batch", "step_out_of_range"),
        ({"timesUs": [-1]}, "invalid_batch", "time_out_of_range"),
        ({"timesUs": [FUTURE_US]}, "timestamp_in_future", "timestamp_in_future"),
        ({"host": "a\x00b"}, "invalid_batch", "invalid_series"),
        ({"labels": {"k\n": "v"}}, "invalid_labels", "invalid_labels"),
        ({"name": "loss\n"}, "invalid_metric_name", "invalid_metric_name"),
    ],
)
async def test_a_frame_with_nothing_storable_is_a_400_naming_each_refusal(
    api: httpx.AsyncClient,
    nats_settings: NatsSettings,
    series: dict[str, object],
    code: str,
    field: str,
) -> None:
    body = _frame([{"name": "loss", "steps": [1], "values": [1.0], **series}])
    response = await api.post(WRITE, content=body, headers=FRAME)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert [(d["seriesIndex"], d["code"]) for d in error["details"]] == [(0, field)]
    assert await _stored(nats_settings) == []


_GOOD = _frame([{"name": "loss", "steps": [1, 2], "values": [1.0, 2.0]}])


def _raw_frame(header: bytes, body: bytes = b"") -> bytes:
    return b"MLDC\x01" + struct.pack("<I", len(header)) + header + body


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (_GOOD[:-1], FRAME, 400, "invalid_batch"),
        (_GOOD + b"\x00", FRAME, 400, "invalid_batch"),
        (_GOOD[:4] + b"\x07" + _GOOD[5:], FRAME, 400, "invalid_batch"),
        (b"MLDC", FRAME, 400, "invalid_batch"),
        (b"", FRAME, 400, "invalid_batch"),
        (b"{}", FRAME, 400, "invalid_batch"),
        (_raw_frame(b"{nope"), FRAME, 400, "invalid_batch"),
        (_raw_frame(b"[" * 100_000), FRAME, 400, "invalid_batch"),
        (_raw_frame(b'{"series": [{"name": "a", "count": -1}]}'), FRAME, 400, "invalid_batch"),
        (_raw_frame(b'{"series": [], "batchId": "nope"}'), FRAME, 400, "invalid_batch"),
        (_raw_frame(b'{"series": [], "extra": 1}'), FRAME, 400, "invalid_batch"),
        (
            gzip.compress(_GOOD)[:-8] + b"garbage!",
            {**FRAME, "Content-Encoding": "gzip"},
            400,
            "invalid_batch",
        ),
        (
            _frame([{"name": "x", "steps": list(range(20_001)), "values": [0.0] * 20_001}]),
            FRAME,
            413,
            "too_many_points",
        ),
        (
            _frame(
                [
                    {"name": "x", "steps": list(range(15_000)), "values": [0.0] * 15_000},
                    {"name": "bad name!", "steps": list(range(6_000)), "values": [0.0] * 6_000},
                ]
            ),
            FRAME,
            413,
            "too_many_points",
        ),
        (
            _frame(
                [
                    {"name": "loss", "steps": [1], "values": [1.0], "labels": {"d": str(i)}}
                    for i in range(300)
                ]
            ),
            FRAME,
            400,
            "too_many_label_values",
        ),
    ],
)
async def test_bad_frames_get_a_stable_code_and_publish_nothing(
    api: httpx.AsyncClient,
    nats_settings: NatsSettings,
    body: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    response = await api.post(WRITE, content=body, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]
    assert await _stored(nats_settings) == []


async def test_the_openapi_document_describes_the_frame_body(api: httpx.AsyncClient) -> None:
    document = (await api.get("/openapi.json")).json()
    body = document["paths"]["/v1/machineLearningRuns/{run_id}/metrics:write"]["post"][
        "requestBody"
    ]["content"]
    assert set(body) == {"application/json", CONTENT_TYPE}
    assert body[CONTENT_TYPE]["schema"]["format"] == "binary"
