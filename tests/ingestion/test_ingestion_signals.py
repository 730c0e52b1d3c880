"""Lifecycle signals through ingestion against a real NATS server: 204 once JetStream has
them, one message per signal however often the client retries."""

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.auth import Role
from mldiag_schemas.bus import SIGNAL_RECEIVED
from mldiag_schemas.telemetry import SignalKind, WorkloadSignalReported
from support import read_messages

pytestmark = pytest.mark.connected

REPORT = "/v1/machineLearningRuns/run-1:reportSignal"


async def _signals(settings: NatsSettings) -> list[WorkloadSignalReported]:
    return await read_messages(settings, SIGNAL_RECEIVED, WorkloadSignalReported)


async def test_a_signal_is_in_the_stream_when_answered_and_a_retry_is_not_doubled(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    happened = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=3)
    body = {
        "kind": "EXCEPTION",
        "host": "node-0",
        "processIndex": 2,
        "pid": 4242,
        "step": 17,
        "time": happened.isoformat(),
        "errorType": "jaxlib._jax.XlaRuntimeError",
        "message": "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8.00GiB",
    }
    before = datetime.now(UTC)
    for _ in range(2):  # the client retried
        response = await api.post(REPORT, json=body)
        assert response.status_code == 204, response.text
    [reported] = await _signals(nats_settings)
    signal = reported.signal
    assert (reported.run_id, reported.occurred_at) == ("run-1", happened)
    assert reported.received_at >= before
    assert (signal.kind, signal.host, signal.process_index, signal.pid, signal.step) == (
        SignalKind.EXCEPTION,
        "node-0",
        2,
        4242,
        17,
    )
    assert signal.error_type == "jaxlib._jax.XlaRuntimeError"
    assert signal.message.startswith("RESOURCE_EXHAUSTED")


async def test_signals_differing_in_kind_process_or_time_are_each_kept(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    sent = datetime.now(UTC).replace(microsecond=0)
    base = {"kind": "SIGTERM", "host": "node-0", "pid": 1, "time": sent.isoformat()}
    variants = [
        base,
        {**base, "kind": "PREEMPTION_NOTICE", "reason": "maintenance"},
        {**base, "host": "node-1"},
        {**base, "pid": 2},
        {**base, "time": (sent + timedelta(seconds=1)).isoformat()},
    ]
    for body in variants:
        assert (await api.post(REPORT, json=body)).status_code == 204
    assert len(await _signals(nats_settings)) == len(variants)


async def test_the_long_resource_name_and_a_signal_without_a_time(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    before = datetime.now(UTC)
    response = await api.post(
        "/v1/projects/default/locations/local/machineLearningRuns/run-1:reportSignal",
        json={"kind": "PROCESS_EXITED", "exitCode": 137, "signal": "SIGKILL"},
    )
    assert response.status_code == 204, response.text
    [reported] = await _signals(nats_settings)
    assert reported.occurred_at >= before and reported.signal.time is None
    assert (reported.signal.exit_code, reported.signal.signal) == (137, "SIGKILL")


async def test_a_naive_time_is_taken_as_utc(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    naive = datetime.now(UTC).replace(microsecond=0, tzinfo=None)
    response = await api.post(REPORT, json={"kind": "SIGTERM", "time": naive.isoformat()})
    assert response.status_code == 204, response.text
    [reported] = await _signals(nats_settings)
    assert reported.occurred_at == naive.replace(tzinfo=UTC) == reported.signal.time


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"{}",  # no kind
        b'{"kind": "REBOOTED"}',
        b'{"kind": "SIGTERM", "step": -1}',
        b'{"kind": "SIGTERM", "signal": "' + b"S" * 21 + b'"}',
        b'{"kind": "EXCEPTION", "message": "' + b"m" * 20_001 + b'"}',
        # what the store and the detector cannot hold
        b'{"kind": "SIGTERM", "pid": 2147483648}',
        b'{"kind": "SIGTERM", "step": 9223372036854775808}',
        b'{"kind": "PROCESS_EXITED", "exitCode": 4294967296}',
        b'{"kind": "EXCEPTION", "message": "boom\\u0000"}',
        b'{"kind": "EXCEPTION", "errorType": "\\u0000"}',
        b'{"kind": "SIGTERM", "host": "\\u0000"}',
        b'{"kind": "SIGTERM", "time": "0001-01-01T00:00:00+14:00"}',
    ],
)
async def test_bad_signals_are_refused(
    api: httpx.AsyncClient, nats_settings: NatsSettings, body: bytes
) -> None:
    response = await api.post(REPORT, content=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_signal"
    assert await _signals(nats_settings) == []


async def test_a_signal_from_the_future_or_for_no_run_is_refused(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    future = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    late = await api.post(REPORT, json={"kind": "SIGTERM", "time": future})
    assert late.status_code == 400
    assert late.json()["error"]["code"] == "timestamp_in_future"
    bad_run = await api.post(
        "/v1/machineLearningRuns/Not_A_Run:reportSignal", json={"kind": "SIGTERM"}
    )
    assert bad_run.status_code == 400
    assert bad_run.json()["error"]["code"] == "invalid_run_id"
    assert await _signals(nats_settings) == []


async def test_a_viewer_may_not_report_signals(
    api: httpx.AsyncClient, api_tokens: ApiTokens, nats_settings: NatsSettings
) -> None:
    response = await api.post(
        REPORT, json={"kind": "SIGTERM"}, headers=api_tokens.headers(Role.VIEWER)
    )
    assert response.status_code == 403
    anonymous = await api.post(REPORT, json={"kind": "SIGTERM"}, headers={"Authorization": ""})
    assert anonymous.status_code == 401
    assert await _signals(nats_settings) == []
