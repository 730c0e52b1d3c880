"""``logs:write`` against a real NATS server: 202 only once JetStream has the batch, a retried
batch stored once, bad lines refused by index with a stable code."""

import json
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from conftest import ApiTokens
from ingestion.otlp.otlp_messages import log_record, logs_export
from mldiag_ingestion.service import MAX_LOG_MESSAGE_BYTES
from mldiag_platform.auth import new_secret, open_token_directory, secret_hash
from mldiag_platform.bus import connect_bus
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.auth import Role, TokenGrant
from mldiag_schemas.bus import LOGS_RECEIVED
from mldiag_schemas.logs import (
    MAX_LOG_LINE_CHARS,
    MAX_LOG_LINES_PER_REQUEST,
    LogLinesReceived,
    LogSeverity,
    LogStream,
)
from support import read_messages

pytestmark = pytest.mark.connected

WRITE = "/v1/machineLearningRuns/run-1/logs:write"
LONG_WRITE = "/v1/projects/default/locations/local/machineLearningRuns/run-1/logs:write"
NOW = datetime.now(UTC).isoformat()


def _line(text: str = "hello", **fields: object) -> dict[str, object]:
    return {"time": NOW, "text": text, **fields}


async def _stored(settings: NatsSettings) -> list[LogLinesReceived]:
    return await read_messages(settings, LOGS_RECEIVED, LogLinesReceived)


async def test_accepted_lines_are_already_in_the_stream_in_order(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    batch = str(uuid.uuid4())
    lines = [
        _line("started", stream="SYSTEM", host="h1", pid=7),
        _line("Traceback (most recent call last):", stream="STDERR", processIndex=1),
        _line("loss 0.5", severity="INFO"),
    ]
    response = await api.post(LONG_WRITE, json={"batchId": batch, "lines": lines})
    assert response.status_code == 202, response.text
    assert response.json() == {"accepted": 3}
    [message] = await _stored(nats_settings)  # no waiting: 202 means stored
    assert (message.run_id, str(message.event_id)) == ("run-1", batch)
    assert [line.text for line in message.lines] == [
        "started",
        "Traceback (most recent call last):",
        "loss 0.5",
    ]
    first, second, third = message.lines
    assert (first.stream, first.host, first.pid) == (LogStream.SYSTEM, "h1", 7)
    assert (second.stream, second.severity, second.process_index) == (
        LogStream.STDERR,
        LogSeverity.DEFAULT,
        1,
    )
    assert third.severity == LogSeverity.INFO


async def test_a_retried_batch_is_stored_once(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    body = {"batchId": str(uuid.uuid4()), "lines": [_line()]}
    assert (await api.post(WRITE, json=body)).status_code == 202
    assert (await api.post(WRITE, json=body)).status_code == 202
    assert len(await _stored(nats_settings)) == 1


async def test_without_a_batch_id_each_request_is_its_own_batch_and_naive_times_are_utc(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    body = {"lines": [{"time": "2026-12-05T01:00:00", "text": "naive"}]}
    assert (await api.post(WRITE, json=body)).status_code == 202
    assert (await api.post(WRITE, json=body)).status_code == 202
    messages = await _stored(nats_settings)
    assert len({message.event_id for message in messages}) == 2
    assert messages[0].lines[0].time == datetime(2026, 12, 5, 1, tzinfo=UTC)


async def test_an_empty_batch_is_accepted_and_publishes_nothing(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    response = await api.post(WRITE, json={"lines": []})
    assert (response.status_code, response.json()) == (202, {"accepted": 0})
    assert await _stored(nats_settings) == []


async def test_a_batch_too_large_for_one_message_is_published_in_chunks_once(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    # 4,000 lines of 1,000 characters: 4 MB of text, under the request limit of 4 MiB
    # but several times a NATS message.
    lines = [_line(f"{index:06d} " + "x" * 993) for index in range(4000)]
    body = {"batchId": str(uuid.uuid4()), "lines": lines}
    assert (await api.post(WRITE, json=body)).status_code == 202
    assert (await api.post(WRITE, json=body)).status_code == 202  # retried: same chunk ids
    messages = await _stored(nats_settings)
    assert len(messages) > 1
    assert all(len(message.model_dump_json()) <= MAX_LOG_MESSAGE_BYTES for message in messages)
    texts = [line.text[:6] for message in messages for line in message.lines]
    assert texts == [f"{index:06d}" for index in range(4000)]


async def _run_token(settings: NatsSettings, run_id: str) -> dict[str, str]:
    """Headers with a token held to ``run_id``, as ``mldiag run`` hands each replica."""
    secret = new_secret()
    async with (
        connect_bus(settings, "test-run-token") as bus,
        open_token_directory(bus) as directory,
    ):
        grant = TokenGrant(token_id=f"replica-{uuid.uuid4()}", role=Role.EDITOR, run_id=run_id)
        await directory.grant(secret_hash(secret), grant)
    return {"Authorization": f"Bearer {secret}"}


async def test_a_token_held_to_one_run_writes_that_run_only(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    scoped = await _run_token(nats_settings, "run-1")
    body = {"lines": [_line()]}
    assert (await api.post(WRITE, json=body, headers=scoped)).status_code == 202
    other = "/v1/machineLearningRuns/run-2/logs:write"
    refused = await api.post(other, json=body, headers=scoped)
    assert refused.status_code == 403, refused.text
    assert [message.run_id for message in await _stored(nats_settings)] == ["run-1"]


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "message"),
    [
        (WRITE, b"{", 400, "invalid_logs", "WriteLogsRequest"),
        (WRITE, b"{}", 400, "invalid_logs", "lines"),
        (
            WRITE,
            json.dumps({"lines": [_line(), _line("x" * (MAX_LOG_LINE_CHARS + 1))]}).encode(),
            400,
            "invalid_logs",
            "line 1 (text)",
        ),
        (
            WRITE,
            json.dumps({"lines": [_line(), _line(), _line("a\x00b")]}).encode(),
            400,
            "invalid_logs",
            "line 2: the text or host holds a NUL",
        ),
        (
            WRITE,
            json.dumps({"lines": [{"text": "no time"}]}).encode(),
            400,
            "invalid_logs",
            "line 0",
        ),
        (
            WRITE,
            json.dumps({"lines": [_line(stream="STDWHAT")]}).encode(),
            400,
            "invalid_logs",
            "line 0 (stream)",
        ),
        (
            WRITE,
            json.dumps({"lines": [_line(pid=-1)]}).encode(),
            400,
            "invalid_logs",
            "line 0 (pid)",
        ),
        (
            WRITE,
            json.dumps({"lines": [_line(), _line(pid=2**63)]}).encode(),
            400,
            "invalid_logs",
            "line 1: pid",
        ),
        (
            WRITE,
            json.dumps({"lines": [_line(host="a\x00b")]}).encode(),
            400,
            "invalid_logs",
            "line 0: the text or host holds a NUL",
        ),
        (
            WRITE,
            json.dumps({"lines": [_line(time="0001-01-01T00:00:00+14:00")]}).encode(),
            400,
            "invalid_logs",
            "line 0: the time has no UTC",
        ),
        (
            WRITE,
            json.dumps({"lines": [_line("")] * (MAX_LOG_LINES_PER_REQUEST + 1)}).encode(),
            413,
            "too_many_log_lines",
            "split it",
        ),
        (
            WRITE,
            json.dumps({"lines": [_line("é" * 16_000)] * 140}).encode(),
            413,
            "too_many_log_lines",
            "bytes of text",
        ),
        (
            "/v1/machineLearningRuns/BAD.ID/logs:write",
            json.dumps({"lines": [_line()]}).encode(),
            400,
            "invalid_run_id",
            "run id",
        ),
    ],
)
async def test_bad_input_gets_a_stable_code_and_publishes_nothing(
    api: httpx.AsyncClient,
    nats_settings: NatsSettings,
    path: str,
    body: bytes,
    status: int,
    code: str,
    message: str,
) -> None:
    response = await api.post(path, content=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert message in error["message"], error["message"]
    assert await _stored(nats_settings) == []


async def test_a_viewer_may_not_write_logs(
    api: httpx.AsyncClient, nats_settings: NatsSettings, api_tokens: ApiTokens
) -> None:
    viewer = api_tokens.headers(Role.VIEWER)
    refused = await api.post(WRITE, json={"lines": [_line()]}, headers=viewer)
    assert refused.status_code == 403
    assert await _stored(nats_settings) == []


async def test_logs_write_and_the_otlp_logs_door_ask_for_the_same_permission(
    api: httpx.AsyncClient, nats_settings: NatsSettings, api_tokens: ApiTokens
) -> None:
    # Log lines are telemetry on either door: writeMetrics, which a run's own token holds.
    otlp_lines = logs_export(log_record("from otlp"), **{"mldiag.run_id": "run-1"})
    otlp_body = otlp_lines.SerializeToString()
    protobuf = {"Content-Type": "application/x-protobuf"}
    scoped = await _run_token(nats_settings, "run-1")
    viewer = {"Authorization": f"Bearer {api_tokens.viewer}"}
    for headers, status in ((scoped, (202, 200)), (viewer, (403, 403))):
        direct = await api.post(WRITE, json={"lines": [_line("direct")]}, headers=headers)
        otlp = await api.post("/v1/logs", content=otlp_body, headers={**protobuf, **headers})
        assert (direct.status_code, otlp.status_code) == status, (direct.text, otlp.text)
    for refused in (direct, otlp):
        assert "machineLearningRuns.writeMetrics" in refused.json()["error"]["message"]
    texts = [line.text for message in await _stored(nats_settings) for line in message.lines]
    assert sorted(texts) == ["direct", "from otlp"]
