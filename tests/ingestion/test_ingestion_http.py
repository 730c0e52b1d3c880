"""ingestion's HTTP API against a real NATS server: 202 only once JetStream has the points."""

import gzip
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from conftest import ApiTokens
from mldiag_ingestion.app import create_app
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import METRICS_RECEIVED
from mldiag_schemas.telemetry import MetricPointsReceived
from support import read_messages, serving

pytestmark = pytest.mark.connected

WRITE = "/v1/machineLearningRuns/run-1/metrics:write"
LONG_WRITE = "/v1/projects/default/locations/local/machineLearningRuns/run-1/metrics:write"
NOW = datetime.now(UTC).isoformat()
FUTURE = (datetime.now(UTC) + timedelta(days=2)).isoformat()


@pytest.fixture
async def api(
    nats_settings: NatsSettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    settings = IngestionSettings(
        nats=nats_settings,
        max_request_bytes=64 * 1024,
        max_points_per_request=1000,
        otlp_grpc_port=0,
        otlp_http_port=0,
    )
    async with serving(create_app(settings), api_tokens.headers()) as client:
        yield client


@pytest.fixture
async def roomy_api(
    nats_settings: NatsSettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    """Ingestion with its default limits (16 MB, 100,000 points)."""
    settings = IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0)
    async with serving(create_app(settings), api_tokens.headers()) as client:
        yield client


def _series(**fields: object) -> bytes:
    series = {"name": "loss", "steps": [1], "values": [1.0], **fields}
    return json.dumps({"series": [series]}).encode()


async def _stored(settings: NatsSettings) -> list[MetricPointsReceived]:
    return await read_messages(settings, METRICS_RECEIVED, MetricPointsReceived)


async def test_accepted_points_are_already_in_the_stream(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    body = {"series": [{"name": "loss", "steps": [1, 2], "values": [0.5, "NaN"], "host": "h1"}]}
    response = await api.post(WRITE, json=body)
    assert response.status_code == 202, response.text
    assert response.json()["acceptedPoints"] == 2
    [message] = await _stored(nats_settings)  # no waiting: 202 means stored
    assert message.run_id == "run-1"
    assert str(message.batch_id) == response.json()["batchId"]
    assert [p.step for p in message.points] == [1, 2]


async def test_nan_literals_and_gzip_are_accepted(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    raw = b'{"series": [{"name": "loss", "steps": [1, 2], "values": [NaN, -Infinity]}]}'
    response = await api.post(
        WRITE, content=gzip.compress(raw), headers={"Content-Encoding": "gzip"}
    )
    assert response.status_code == 202, response.text


async def test_a_retried_batch_is_stored_once(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    body = {
        "batchId": str(uuid.uuid4()),
        "series": [{"name": "loss", "steps": [1], "values": [1.0]}],
    }
    assert (await api.post(WRITE, json=body)).status_code == 202
    assert (await api.post(WRITE, json=body)).status_code == 202
    assert len(await _stored(nats_settings)) == 1


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "code"),
    [
        (WRITE, b"{", {}, 400, "invalid_batch"),
        (
            WRITE,
            json.dumps({"series": [{"name": "loss", "steps": [1], "values": []}]}).encode(),
            {},
            400,
            "invalid_batch",
        ),
        (
            WRITE,
            json.dumps({"series": [{"name": "bad name!", "steps": [], "values": []}]}).encode(),
            {},
            400,
            "invalid_metric_name",
        ),
        (
            "/v1/machineLearningRuns/BAD.ID/metrics:write",
            b'{"series": []}',
            {},
            400,
            "invalid_run_id",
        ),
        (
            WRITE,
            json.dumps(
                {"series": [{"name": "x", "steps": list(range(1001)), "values": [0.0] * 1001}]}
            ).encode(),
            {},
            413,
            "too_many_points",
        ),
        (WRITE, b" " * (64 * 1024 + 1), {}, 413, "body_too_large"),
        (
            WRITE,
            gzip.compress(b" " * (200 * 1024)),
            {"Content-Encoding": "gzip"},
            413,
            "body_too_large",
        ),
        (WRITE, b"not gzip", {"Content-Encoding": "gzip"}, 400, "invalid_batch"),
        (WRITE, b"{}", {"Content-Encoding": "br"}, 400, "unsupported_encoding"),
        (WRITE, _series(name="x" * 201), {}, 400, "invalid_metric_name"),
        (WRITE, _series(name="1loss"), {}, 400, "invalid_metric_name"),
        (WRITE, _series(labels={f"k{i}": "v" for i in range(9)}), {}, 400, "invalid_labels"),
        (WRITE, _series(labels={"bad key": "v"}), {}, 400, "invalid_labels"),
        (WRITE, _series(labels={"k": "v" * 129}), {}, 400, "invalid_labels"),
        (WRITE, _series(labels={"k": 1}), {}, 400, "invalid_labels"),
        (WRITE, _series(times=["2099-01-01T00:00:00Z"]), {}, 400, "timestamp_in_future"),
        (WRITE, _series(steps=["one"]), {}, 400, "invalid_batch"),
        (WRITE, _series(values=[{"v": 1}]), {}, 400, "invalid_batch"),
        (WRITE, _series(processIndex=-1), {}, 400, "invalid_batch"),
        (
            WRITE,
            json.dumps(
                {
                    "series": [
                        {"name": "loss", "steps": [1], "values": [1.0], "labels": {"d": str(i)}}
                        for i in range(300)
                    ]
                }
            ).encode(),
            {},
            400,
            "too_many_label_values",
        ),
    ],
)
async def test_bad_input_gets_a_stable_code_and_publishes_nothing(
    api: httpx.AsyncClient,
    nats_settings: NatsSettings,
    path: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    response = await api.post(path, content=body, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]
    assert await _stored(nats_settings) == []


async def test_good_series_and_points_are_stored_beside_refused_ones(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    good = {"name": "loss", "steps": [1, 2], "values": [1.0, 2.0], "labels": {"device": "1"}}
    late = {"name": "loss", "steps": [3, 4], "values": [1.0, 2.0], "times": [NOW, FUTURE]}
    bad_host = {"name": "acc", "steps": [1], "values": [1.0], "host": "node\x00"}
    bad_label = {"name": "acc", "steps": [1], "values": [1.0], "labels": {"k": "v\x00"}}
    body = {"series": [good, late, bad_host, bad_label]}
    response = await api.post(WRITE, json=body)
    assert response.status_code == 202, response.text
    answer = response.json()
    assert (answer["acceptedPoints"], answer["rejectedPoints"]) == (3, 3)
    assert [
        (r["seriesIndex"], r["name"], r["pointIndexes"], r["rejectedPoints"], r["code"])
        for r in answer["rejected"]
    ] == [
        (1, "loss", [1], 1, "timestamp_in_future"),
        (2, "acc", None, 1, "invalid_series"),
        (3, "acc", None, 1, "invalid_labels"),
    ]
    assert "NUL" in answer["rejected"][1]["reason"]
    [message] = await _stored(nats_settings)
    assert [(p.step, p.labels) for p in message.points] == [
        (1, {"device": "1"}),
        (2, {"device": "1"}),
        (3, {}),
    ]


async def test_a_thousand_good_points_and_one_bad_step_store_the_thousand(
    roomy_api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    steps = [*range(1000), 2**63]  # the reproduction: one step past PostgreSQL's bigint
    body = {"series": [{"name": "loss", "steps": steps, "values": [0.5] * 1001}]}
    response = await roomy_api.post(LONG_WRITE, content=json.dumps(body))
    assert response.status_code == 202, response.text
    assert response.json()["acceptedPoints"] == 1000
    assert response.json()["rejected"] == [
        {
            "seriesIndex": 0,
            "name": "loss",
            "pointIndexes": [1000],
            "rejectedPoints": 1,
            "code": "step_out_of_range",
            "reason": f"steps must lie within 0 .. {2**63 - 1}",
        }
    ]
    [message] = await _stored(nats_settings)
    assert list(message.series[0].steps) == list(range(1000))


@pytest.mark.parametrize(
    ("series", "code", "field"),
    [
        ({"steps": [2**63]}, "invalid_batch", "step_out_of_range"),
        ({"steps": [-1]}, "invalid_batch", "step_out_of_range"),
        ({"times": ["0001-01-01T00:00:00+14:00"]}, "invalid_batch", "time_out_of_range"),
        ({"times": ["9999-12-31T23:59:59-14:00"]}, "timestamp_in_future", "timestamp_in_future"),
        ({"times": ["1969-12-31T23:59:59Z"]}, "invalid_batch", "time_out_of_range"),
        ({"host": "a\x00b"}, "invalid_batch", "invalid_series"),
        ({"labels": {"k": "\x00"}}, "invalid_labels", "invalid_labels"),
        ({"labels": {"k\n": "v"}}, "invalid_labels", "invalid_labels"),
        ({"name": "loss\n"}, "invalid_metric_name", "invalid_metric_name"),
        ({"processIndex": 2**31}, "invalid_batch", "invalid_series"),
    ],
)
async def test_a_write_with_nothing_storable_is_a_400_naming_each_refusal(
    api: httpx.AsyncClient,
    nats_settings: NatsSettings,
    series: dict[str, object],
    code: str,
    field: str,
) -> None:
    response = await api.post(WRITE, content=_series(**series))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert [(d["seriesIndex"], d["code"]) for d in error["details"]] == [(0, field)]
    assert await _stored(nats_settings) == []


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        (WRITE, b'{"series":' + b"[" * 100_000 + b"]" * 100_000 + b"}", {}),
        (WRITE, b"\x00", {}),
        (WRITE, b'{"series": [], "batchId": "\\u0000"}', {}),
        (WRITE, b'{"series": {"name": "loss"}}', {}),
        (WRITE, b"[]", {}),
        (WRITE, gzip.compress(b'{"series": []}')[:-8] + b"garbage!", {"Content-Encoding": "gzip"}),
        (WRITE, gzip.compress(b'{"series": []}')[:12], {"Content-Encoding": "gzip"}),
        ("/v1/machineLearningRuns/run%001/metrics:write", b'{"series": []}', {}),
        ("/v1/projects/a%00b/locations/local/machineLearningRuns/r/metrics:write", b"{}", {}),
        ("/v1/projects/a..b/locations/local/machineLearningRuns/r/metrics:write", b"{}", {}),
        ("/v1/projects/p/locations/L%0B/machineLearningRuns/r/metrics:write", b"{}", {}),
    ],
)
async def test_malformed_requests_get_a_400_never_a_500(
    roomy_api: httpx.AsyncClient, path: str, body: bytes, headers: dict[str, str]
) -> None:
    response = await roomy_api.post(path, content=body, headers=headers)
    assert response.status_code == 400, response.text
    assert set(response.json()["error"]) == {"code", "message", "details"}
