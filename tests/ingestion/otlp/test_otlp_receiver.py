"""The OTLP receiver against a real NATS server: exports over gRPC and HTTP/protobuf are in
JetStream when the answer comes, with their run, steps and labels."""

import gzip
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TypeVar

import grpc
import httpx
import pytest
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from conftest import ApiTokens
from ingestion.otlp.otlp_messages import (
    T0,
    export,
    gauge,
    log_record,
    logs_export,
    number,
    sdk_configs_export,
    sdk_export,
)
from mldiag_ingestion.app import create_app
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import CONFIGS_RECEIVED, LOGS_RECEIVED, METRICS_RECEIVED
from mldiag_schemas.logs import LogLinesReceived, LogSeverity, LogStream
from mldiag_schemas.runs import RunConfigsReported
from mldiag_schemas.telemetry import MetricPointsReceived
from support import read_messages, serving

pytestmark = pytest.mark.connected

RUN = "3f6c1a52-0b7e-4d4e-9a51-6f1f0c6a2b11"
EXPORT = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
EXPORT_LOGS = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
AnswerT = TypeVar("AnswerT", bound=Message)
PROTOBUF = {"Content-Type": "application/x-protobuf"}


@dataclass
class Receiver:
    http: httpx.AsyncClient
    grpc: grpc.aio.Channel
    token: str
    otlp_http_url: str
    """The OTLP/HTTP port of its own (4318 by default)."""

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    async def _call(self, method: str, request: Message, answer: type[AnswerT]) -> AnswerT:
        call = self.grpc.unary_unary(
            method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=answer.FromString,
        )
        response: AnswerT = await call(request, timeout=10, metadata=self.metadata())
        return response

    async def export(self, request: ExportMetricsServiceRequest) -> ExportMetricsServiceResponse:
        return await self._call(EXPORT, request, ExportMetricsServiceResponse)

    async def export_logs(self, request: ExportLogsServiceRequest) -> ExportLogsServiceResponse:
        return await self._call(EXPORT_LOGS, request, ExportLogsServiceResponse)


@pytest.fixture
async def receiver(nats_settings: NatsSettings, api_tokens: ApiTokens) -> AsyncIterator[Receiver]:
    settings = IngestionSettings(
        nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0, max_request_bytes=64 * 1024
    )
    app = create_app(settings)
    async with serving(app, api_tokens.headers()) as client:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{app.state.otlp_grpc_port}")
        try:
            otlp_http_url = f"http://127.0.0.1:{app.state.otlp_http_port}"
            yield Receiver(client, channel, api_tokens.editor, otlp_http_url)
        finally:
            await channel.close()


async def _points(settings: NatsSettings) -> list[tuple[str, str, int, float, dict[str, str]]]:
    messages = await read_messages(settings, METRICS_RECEIVED, MetricPointsReceived)
    return sorted((m.run_id, p.name, p.step, p.value, p.labels) for m in messages for p in m.points)


async def test_a_grpc_export_is_stored_before_the_answer(
    receiver: Receiver, nats_settings: NatsSettings
) -> None:
    response = await receiver.export(sdk_export(RUN, 3, loss=0.5, lr=0.1))
    assert not response.HasField("partial_success")
    labels = {"unit": "1", "location": "us-central1"}
    assert await _points(nats_settings) == [
        (RUN, "loss", 3, 0.5, labels),
        (RUN, "lr", 3, 0.1, labels),
    ]
    [message] = await read_messages(nats_settings, METRICS_RECEIVED, MetricPointsReceived)
    assert {p.time.timestamp() for p in message.points} == {T0 / 1e9}


async def test_an_unchanged_gauge_exported_again_is_stored_once(
    receiver: Receiver, nats_settings: NatsSettings
) -> None:
    await receiver.export(sdk_export(RUN, 1, T0, loss=1.0))
    await receiver.export(sdk_export(RUN, 1, T0 + 10**9, loss=1.0))  # the next collection
    await receiver.export(sdk_export(RUN, 2, T0 + 2 * 10**9, loss=0.5))
    assert [(step, value) for _, _, step, value, _ in await _points(nats_settings)] == [
        (1, 1.0),
        (2, 0.5),
    ]


async def test_an_http_protobuf_export_gzip_and_authorization_header(
    receiver: Receiver, nats_settings: NatsSettings
) -> None:
    body = gzip.compress(
        export(gauge("gpu.util", number(88.0, gpu="0")), node_id=RUN).SerializeToString()
    )
    response = await receiver.http.post(
        "/v1/metrics",
        content=body,
        headers={
            **PROTOBUF,
            "Content-Encoding": "gzip",
            "Authorization": f"Bearer {receiver.token}",
        },
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-protobuf"
    answer = ExportMetricsServiceResponse.FromString(response.content)
    assert not answer.HasField("partial_success")
    assert await _points(nats_settings) == [(RUN, "gpu.util", T0 // 10**9, 88.0, {"gpu": "0"})]


async def test_points_without_a_run_are_rejected_the_rest_stored(
    receiver: Receiver, nats_settings: NatsSettings
) -> None:
    request = export(gauge("loss", number(1.0), number(2.0, node_id=RUN)))
    response = await receiver.http.post(
        "/v1/metrics", content=request.SerializeToString(), headers=PROTOBUF
    )
    assert response.status_code == 200
    partial = ExportMetricsServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_data_points == 1
    assert "no run id" in partial.error_message
    assert [(run, value) for run, _, _, value, _ in await _points(nats_settings)] == [(RUN, 2.0)]
    grpc_partial = (await receiver.export(request)).partial_success
    assert grpc_partial.rejected_data_points == 1


async def test_points_the_store_cannot_hold_are_rejected_and_the_rest_stored(
    receiver: Receiver, nats_settings: NatsSettings
) -> None:
    request = export(
        gauge(
            "loss",
            number(1.0, node_id=RUN, rank="0"),
            number(2.0, node_id=RUN, rank="1"),  # its step is past int64
            number(3.0, node_id=RUN, rank="2", device="a\x00"),  # NUL in a label
            number(4.0, 2**64 - 1, node_id=RUN, rank="3"),  # the largest uint64 time
        ),
        gauge(
            "training_step",
            number(5, node_id=RUN, rank="0"),
            number(1e19, node_id=RUN, rank="1"),
            number(5, node_id=RUN, rank="2", device="a\x00"),
            number(5, node_id=RUN, rank="3"),
        ),
    )
    partial = (await receiver.export(request)).partial_success
    assert partial.rejected_data_points == 3
    assert "steps must lie within" in partial.error_message
    assert "NUL" in partial.error_message
    assert "receipt" in partial.error_message
    assert await _points(nats_settings) == [(RUN, "loss", 5, 1.0, {"rank": "0"})]


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (b"\xff\xff not protobuf", PROTOBUF, 400, "invalid_otlp"),
        (b"{}", {"Content-Type": "application/json"}, 400, "invalid_otlp"),
        (b"not gzip", {**PROTOBUF, "Content-Encoding": "gzip"}, 400, "invalid_otlp"),
        (b"\x00" * (64 * 1024 + 1), PROTOBUF, 413, "body_too_large"),
    ],
)
async def test_bad_http_payloads(
    receiver: Receiver, body: bytes, headers: dict[str, str], status: int, code: str
) -> None:
    response = await receiver.http.post("/v1/metrics", content=body, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


async def test_bad_grpc_payloads(receiver: Receiver, nats_settings: NatsSettings) -> None:
    raw = receiver.grpc.unary_unary(EXPORT)
    with pytest.raises(grpc.aio.AioRpcError) as garbage:
        await raw(b"\xff\xff not protobuf", timeout=10, metadata=receiver.metadata())
    assert garbage.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "invalid_otlp" in (garbage.value.details() or "")
    # a rule of the write contract (a metric name) rejects that series, not the export
    response = await receiver.export(export(gauge("bad name!", number(1.0)), node_id=RUN))
    assert response.partial_success.rejected_data_points == 1
    assert await _points(nats_settings) == []


async def test_grpc_exports_need_a_token_that_may_write(
    receiver: Receiver, api_tokens: ApiTokens, nats_settings: NatsSettings
) -> None:
    raw = receiver.grpc.unary_unary(EXPORT)
    body = export(gauge("gpu.util", number(1.0)), node_id=RUN).SerializeToString()
    with pytest.raises(grpc.aio.AioRpcError) as anonymous:
        await raw(body, timeout=10)
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
    viewer = (("authorization", f"Bearer {api_tokens.viewer}"),)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await raw(body, timeout=10, metadata=viewer)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "machineLearningRuns.writeMetrics" in (refused.value.details() or "")
    assert await _points(nats_settings) == []  # nothing refused was stored


async def _configs(settings: NatsSettings) -> list[tuple[str, dict[str, object]]]:
    messages = await read_messages(settings, CONFIGS_RECEIVED, RunConfigsReported)
    return [(m.run_id, m.configs.user_configs) for m in messages]


async def test_the_official_sdk_configs_record_over_grpc(
    receiver: Receiver, nats_settings: NatsSettings
) -> None:
    request = sdk_configs_export(RUN, {"lr": 0.001, "layers": 12})
    response = await receiver.export_logs(request)
    assert not response.HasField("partial_success")
    await receiver.export_logs(request)  # retried by the exporter: published once
    assert await _configs(nats_settings) == [(RUN, {"lr": 0.001, "layers": 12})]


async def test_the_otlp_http_port_takes_metrics_and_logs(
    receiver: Receiver, nats_settings: NatsSettings
) -> None:
    headers = {**PROTOBUF, "Authorization": f"Bearer {receiver.token}"}
    async with httpx.AsyncClient(base_url=receiver.otlp_http_url, headers=headers) as otlp:
        metrics = await otlp.post(
            "/v1/metrics", content=sdk_export(RUN, 1, loss=2.0).SerializeToString()
        )
        assert metrics.status_code == 200, metrics.text
        request = logs_export(
            log_record({"userConfigs": {"lr": 0.1}}, namespace="mlrun_configs", node_id=RUN),
            log_record({"userConfigs": {"lr": 0.1}}, namespace="mlrun_configs"),  # no run
            log_record("an ordinary log line", node_id=RUN),
        )
        logs = await otlp.post("/v1/logs", content=request.SerializeToString())
        assert logs.status_code == 200, logs.text
        partial = ExportLogsServiceResponse.FromString(logs.content).partial_success
        assert partial.rejected_log_records == 1 and "not a valid run id" in partial.error_message
        garbage = await otlp.post("/v1/logs", content=b"\xff\xff not protobuf")
        assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "invalid_otlp"
        assert (await otlp.get("/healthz")).status_code == 200
    assert [(run, name) for run, name, *_ in await _points(nats_settings)] == [(RUN, "loss")]
    assert await _configs(nats_settings) == [(RUN, {"lr": 0.1})]
    assert await _lines(nats_settings) == [(RUN, "an ordinary log line")]


async def _lines(settings: NatsSettings) -> list[tuple[str, str]]:
    messages = await read_messages(settings, LOGS_RECEIVED, LogLinesReceived)
    return [(message.run_id, line.text) for message in messages for line in message.lines]


async def test_log_records_over_grpc_are_lines_of_their_runs_stored_once(
    receiver: Receiver, nats_settings: NatsSettings
) -> None:
    other = "7d0e2b63-1c8f-4e5a-8b62-0a2b1d7b3c22"
    warning = log_record("disk almost full", node_id=other)
    warning.severity_number = 13
    request = logs_export(
        log_record("epoch 1", T0),
        warning,
        log_record("epoch 2", T0 + 1),
        **{"mldiag.run_id": RUN, "host.name": "worker-3"},
    )
    response = await receiver.export_logs(request)
    assert not response.HasField("partial_success")
    await receiver.export_logs(request)  # retried by the exporter: stored once
    messages = await read_messages(nats_settings, LOGS_RECEIVED, LogLinesReceived)
    by_run = {message.run_id: message.lines for message in messages}
    assert len(messages) == 2
    assert [line.text for line in by_run[RUN]] == ["epoch 1", "epoch 2"]
    [line] = by_run[other]
    assert (line.severity, line.stream, line.host) == (
        LogSeverity.WARNING,
        LogStream.OTLP,
        "worker-3",
    )


async def test_logs_exports_need_a_token_that_may_write_telemetry(
    receiver: Receiver, api_tokens: ApiTokens, nats_settings: NatsSettings
) -> None:
    body = sdk_configs_export(RUN, {"lr": 1}).SerializeToString()
    viewer = {**PROTOBUF, "Authorization": f"Bearer {api_tokens.viewer}"}
    async with httpx.AsyncClient(base_url=receiver.otlp_http_url) as otlp:
        assert (await otlp.post("/v1/logs", content=body, headers=PROTOBUF)).status_code == 401
        refused = await otlp.post("/v1/logs", content=body, headers=viewer)
        assert refused.status_code == 403
        assert "machineLearningRuns.writeMetrics" in refused.json()["error"]["message"]
    with pytest.raises(grpc.aio.AioRpcError) as anonymous:
        await receiver.grpc.unary_unary(EXPORT_LOGS)(body, timeout=10)
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert await _configs(nats_settings) == []
