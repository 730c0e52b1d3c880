"""Heartbeats through ingestion against a real NATS server: 204 once JetStream has them."""

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.auth import Role
from mldiag_schemas.bus import HEARTBEAT_RECEIVED
from mldiag_schemas.telemetry import RunHeartbeat
from support import read_messages

pytestmark = pytest.mark.connected

BEAT = "/v1/machineLearningRuns/run-1:heartbeat"


async def _beats(settings: NatsSettings) -> list[RunHeartbeat]:
    return await read_messages(settings, HEARTBEAT_RECEIVED, RunHeartbeat)


async def test_a_heartbeat_is_in_the_stream_when_answered_and_a_retry_is_not_doubled(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    sent = datetime.now(UTC).replace(microsecond=0)
    body = {
        "host": "node-0",
        "processIndex": 1,
        "pid": 4242,
        "step": 17,
        "intervalSeconds": 10,
        "time": sent.isoformat(),
    }
    for _ in range(2):  # the client retried
        response = await api.post(BEAT, json=body)
        assert response.status_code == 204, response.text
    [beat] = await _beats(nats_settings)
    assert (beat.run_id, beat.host, beat.process_index, beat.pid, beat.step) == (
        "run-1",
        "node-0",
        1,
        4242,
        17,
    )
    assert beat.occurred_at == sent and beat.interval_seconds == 10


async def test_a_heartbeat_carries_its_fingerprint_onto_the_bus(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    fingerprint = {f"key_{index}": "v" * 500 for index in range(64)}  # the contract's most
    response = await api.post(BEAT, json={"intervalSeconds": 5, "fingerprint": fingerprint})
    assert response.status_code == 204, response.text
    [beat] = await _beats(nats_settings)
    assert beat.fingerprint == fingerprint
    too_many = {**fingerprint, "one_more": "v"}
    refused = await api.post(BEAT, json={"intervalSeconds": 5, "fingerprint": too_many})
    assert refused.json()["error"]["code"] == "invalid_heartbeat"


async def test_a_heartbeat_without_time_or_step_is_stamped_on_receipt(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    before = datetime.now(UTC)
    assert (await api.post(BEAT, json={"intervalSeconds": 5})).status_code == 204
    [beat] = await _beats(nats_settings)
    assert beat.step is None and beat.occurred_at >= before


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "invalid_heartbeat"),
        (b'{"intervalSeconds": 0}', "invalid_heartbeat"),
        (b'{"intervalSeconds": 5, "step": -1}', "invalid_heartbeat"),
        (b'{"host": "h"}', "invalid_heartbeat"),  # no interval
        # what the store cannot hold: pid and process index are PostgreSQL integers, steps
        # bigints, text never holds NUL, and a time must survive conversion to UTC
        (b'{"intervalSeconds": 5, "pid": 2147483648}', "invalid_heartbeat"),
        (b'{"intervalSeconds": 5, "pid": -1}', "invalid_heartbeat"),
        (b'{"intervalSeconds": 5, "processIndex": 2147483648}', "invalid_heartbeat"),
        (b'{"intervalSeconds": 5, "step": 9223372036854775808}', "invalid_heartbeat"),
        (b'{"intervalSeconds": 5, "host": "a\\u0000"}', "invalid_heartbeat"),
        (b'{"intervalSeconds": 5, "fingerprint": {"k": "\\u0000"}}', "invalid_heartbeat"),
        (b'{"intervalSeconds": 5, "time": "0001-01-01T00:00:00+14:00"}', "invalid_heartbeat"),
        (b'{"intervalSeconds": 5, "time": "9999-12-31T23:59:59-14:00"}', "invalid_heartbeat"),
        (b'{"intervalSeconds": NaN}', "invalid_heartbeat"),
        (b'{"intervalSeconds": 5, "pid": 1e400}', "invalid_heartbeat"),
        (b'{"fingerprint": ' + b"[" * 30_000 + b"]" * 30_000 + b"}", "invalid_heartbeat"),
    ],
)
async def test_bad_heartbeats_are_refused(
    api: httpx.AsyncClient, nats_settings: NatsSettings, body: bytes, code: str
) -> None:
    response = await api.post(BEAT, content=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == code
    assert await _beats(nats_settings) == []


async def test_a_heartbeat_from_the_future_or_for_no_run_is_refused(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    future = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    late = await api.post(BEAT, json={"intervalSeconds": 5, "time": future})
    assert late.json()["error"]["code"] == "timestamp_in_future"
    bad_run = await api.post(
        "/v1/machineLearningRuns/Not_A_Run:heartbeat", json={"intervalSeconds": 5}
    )
    assert bad_run.json()["error"]["code"] == "invalid_run_id"
    assert await _beats(nats_settings) == []


async def test_a_viewer_may_not_send_heartbeats(
    api: httpx.AsyncClient, api_tokens: ApiTokens
) -> None:
    response = await api.post(
        BEAT, json={"intervalSeconds": 5}, headers=api_tokens.headers(Role.VIEWER)
    )
    assert response.status_code == 403
