"""ingestion's HTTP API against a real NATS server: 202 only once JetStream has the points."""

import gzip
import json
import uuid
from collections.abc import AsyncIterator

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


async def test_a_rejected_request_leaves_earlier_writes_alone(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    good = {
        "series": [
            {
                "name": "loss",
                "steps": [1, 2],
                "values": [1.0, 2.0],
                "processIndex": 1,
                "labels": {"device": "1"},
            }
        ]
    }
    assert (await api.post(WRITE, json=good)).status_code == 202
    bad = {
        "series": [
            *good["series"],
            {"name": "loss", "steps": [3], "values": [1.0], "times": ["2099-01-01T00:00:00Z"]},
        ]
    }
    assert (await api.post(WRITE, json=bad)).json()["error"]["code"] == "timestamp_in_future"
    [message] = await _stored(nats_settings)
    assert [(p.step, p.process_index, p.labels) for p in message.points] == [
        (1, 1, {"device": "1"}),
        (2, 1, {"device": "1"}),
    ]
