"""Profile captures: ``:capture`` and the analyzer's requests become a pending operation, an
ACTIVE session and a ``CaptureProfile`` command; the provisioner's reports and its
``ProfileCaptureFinished`` finish them; every refusal has its code (real NATS and
PostgreSQL)."""

import asyncio
import re
import uuid
from typing import Any

import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.profiling import (
    CaptureProfile,
    CaptureTarget,
    ProfileCaptureFinished,
    ProfileCaptureRequested,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerSessionReport,
    ProfilerSessionReported,
    TracerLevels,
)
from run_registry.profiles.helpers import STORAGE_ROOT, new_run, register
from support import read_messages, wait_until

pytestmark = pytest.mark.connected

RUNS = "/v1/machineLearningRuns"
OPERATIONS = "/v1/operations"


async def _capture(api: httpx.AsyncClient, run_id: str, **body: Any) -> httpx.Response:
    return await api.post(f"{RUNS}/{run_id}/profilerSessions:capture", json=body)


async def _commands(settings: NatsSettings, run_id: str) -> list[CaptureProfile]:
    messages = await read_messages(settings, bus.CAPTURE_PROFILE, CaptureProfile)
    return [m for m in messages if m.run_id == run_id]


async def _operations_of(api: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    listing = await api.get(
        OPERATIONS, params={"filter": f'metadata.target:"machineLearningRuns/{run_id}/"'}
    )
    operations: list[dict[str, Any]] = listing.json()["operations"]
    return operations


def _error(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def test_capture_starts_a_pending_operation_and_commands_the_provisioner(
    profiles_api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    api = profiles_api
    await new_run(api, "cap")
    await register(api, "cap", "h0")
    h1 = await register(api, "cap", "h1", port=9100)

    response = await _capture(
        api,
        "cap",
        durationSeconds=3,
        targets=["h1"],
        tracerLevels={"hostTracerLevel": 3, "pythonTracerLevel": 1},
    )
    assert response.status_code == 200, response.text
    operation = response.json()
    assert operation["done"] is False and operation["response"] is None
    assert operation["metadata"]["verb"] == "capture"
    target = operation["metadata"]["target"]
    session_id = target.rsplit("/", 1)[-1]
    assert target == (
        f"projects/default/locations/local/machineLearningRuns/cap/profilerSessions/{session_id}"
    )
    assert re.fullmatch(r"ondemand-\d{8}-\d{6}-[0-9a-f]{4}", session_id)

    session = (await api.get(f"/v1/{target}")).json()
    assert session["kind"] == "ON_DEMAND" and session["phase"] == "ACTIVE"
    assert [(h["host"], h["phase"]) for h in session["hosts"]] == [("h1", "ACTIVE")]
    assert session["operation"] == operation["name"]
    assert session["storageFolderUri"] == f"{STORAGE_ROOT}/cap/plugins/profile/{session_id}"
    assert session["durationSeconds"] == 3.0
    assert session["tracerLevels"]["hostTracerLevel"] == 3
    stored = (await api.get(f"/v1/{operation['name']}")).json()
    assert stored == operation

    async def commands() -> list[CaptureProfile]:
        return await _commands(nats_settings, "cap")

    [command] = await wait_until(commands)
    assert command.session_id == session_id
    assert command.kind is ProfilerSessionKind.ON_DEMAND
    assert command.operation == operation["name"]
    assert command.targets == [CaptureTarget(host="h1", address=h1["address"])]
    assert command.duration_seconds == 3.0
    assert command.tracer_levels == TracerLevels(host_tracer_level=3, python_tracer_level=1)

    # no targets named: every registered one; a target id names one process
    everything = (await _capture(api, "cap", sessionId="all")).json()
    assert everything["metadata"]["target"].endswith("/profilerSessions/all")
    by_id = (await _capture(api, "cap", sessionId="one", targets=["h0-0"])).json()
    assert by_id["done"] is False
    found = await wait_until(commands, accept=lambda found: len(found) == 3)
    by_session = {c.session_id: sorted(t.host for t in c.targets) for c in found}
    assert by_session["all"] == ["h0", "h1"] and by_session["one"] == ["h0"]


async def test_every_refused_capture_has_its_code_and_starts_nothing(
    profiles_api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    api = profiles_api
    assert _error(await _capture(api, "nowhere")) == (404, "run_not_found")
    await new_run(api, "refused")
    none = await _capture(api, "refused")
    assert _error(none) == (409, "no_profiler_targets")
    assert "mldiag.init(profiler_port=" in none.json()["error"]["message"]

    await register(api, "refused", "h0")
    await register(api, "refused", "h1")
    unknown = await _capture(api, "refused", targets=["h0", "h9"])
    assert _error(unknown) == (400, "unknown_target")
    assert "'h9'" in unknown.json()["error"]["message"]
    assert "h0, h1" in unknown.json()["error"]["message"]  # the known ones are named

    assert (await _capture(api, "refused", sessionId="taken", targets=["h0"])).status_code == 200
    assert _error(await _capture(api, "refused", sessionId="taken")) == (409, "session_exists")
    bad = await _capture(api, "refused", durationSeconds=0)
    assert _error(bad) == (400, "invalid_argument")

    # the workload traces itself on h1: no capture there, one elsewhere is fine
    tracing = await api.post(
        f"{RUNS}/refused/profilerSessions:report",
        json={"sessionId": "prog", "host": "h1", "phase": "ACTIVE"},
    )
    assert tracing.status_code == 200
    busy = await _capture(api, "refused", targets=["h1"])
    assert _error(busy) == (409, "programmatic_trace_active")
    assert "'h1'" in busy.json()["error"]["message"]
    assert "'prog'" in busy.json()["error"]["message"]
    assert _error(await _capture(api, "refused")) == (409, "programmatic_trace_active")
    assert (await _capture(api, "refused", targets=["h0"])).status_code == 200
    await api.post(
        f"{RUNS}/refused/profilerSessions:report",
        json={"sessionId": "prog", "host": "h1", "phase": "SUCCEEDED"},
    )
    assert (await _capture(api, "refused", targets=["h1"])).status_code == 200

    async def commands() -> list[CaptureProfile]:
        return await _commands(nats_settings, "refused")

    await wait_until(commands, accept=lambda found: len(found) >= 3)
    await asyncio.sleep(0.2)
    assert len(await commands()) == 3  # only the three accepted captures
    assert len(await _operations_of(api, "refused")) == 3


async def test_a_finished_capture_completes_its_operation_and_wait_returns(
    profiles_api: httpx.AsyncClient, publisher: Publisher
) -> None:
    api = profiles_api
    await new_run(api, "finish")
    await register(api, "finish", "h0")
    operation = (await _capture(api, "finish", sessionId="done-1")).json()
    operation_id = operation["name"].rsplit("/", 1)[-1]

    waiting = asyncio.create_task(
        api.post(f"{OPERATIONS}/{operation_id}:wait", json={"timeout": "20s"})
    )
    await asyncio.sleep(0.3)
    assert not waiting.done()  # a pending capture is really waited on

    file_uri = f"{STORAGE_ROOT}/finish/plugins/profile/done-1/h0.xplane.pb"
    await publisher.publish(
        ProfilerSessionReported(
            run_id="finish",
            report=ProfilerSessionReport(
                session_id="done-1",
                kind=ProfilerSessionKind.ON_DEMAND,
                host="h0",
                phase=ProfilerSessionPhase.SUCCEEDED,
                file_uri=file_uri,
                size_bytes=99,
                operation=operation["name"],
            ),
        )
    )
    finished = ProfileCaptureFinished(
        run_id="finish", session_id="done-1", operation=operation["name"]
    )
    await publisher.publish(finished)
    waited = (await asyncio.wait_for(waiting, 20)).json()
    assert waited["done"] is True and waited["error"] is None
    assert waited["metadata"]["endTime"]
    response = waited["response"]
    assert response["sessionId"] == "done-1" and response["phase"] == "SUCCEEDED"
    assert response["hosts"][0]["fileUri"] == file_uri
    assert response["dashboardUri"].endswith("?run=finish&session=done-1")

    # finishing again (a redelivery, or a late failure) changes nothing
    late = ProfileCaptureFinished(
        run_id="finish",
        session_id="done-1",
        operation=operation["name"],
        error_code="capture_failed",
        missing_hosts=["h0"],
    )
    await publisher.publish(late)
    await publisher.publish_raw(
        publisher.subject_for(finished), finished.model_dump_json().encode(), "again"
    )
    marker = await _capture(api, "finish", sessionId="marker")
    marker_id = marker.json()["name"].rsplit("/", 1)[-1]
    await publisher.publish(
        ProfileCaptureFinished(
            run_id="finish", session_id="marker", operation=marker.json()["name"]
        )
    )
    await api.post(f"{OPERATIONS}/{marker_id}:wait", json={"timeout": "20s"})
    assert (await api.get(f"{OPERATIONS}/{operation_id}")).json() == waited
    session = (await api.get(f"{RUNS}/finish/profilerSessions/done-1")).json()
    assert session["phase"] == "SUCCEEDED"


async def test_a_failed_capture_fails_its_operation_and_its_missing_hosts(
    profiles_api: httpx.AsyncClient, publisher: Publisher
) -> None:
    api = profiles_api
    await new_run(api, "partial")
    await register(api, "partial", "h0")
    await register(api, "partial", "h1")
    operation = (await _capture(api, "partial", sessionId="p1")).json()
    await publisher.publish(
        ProfilerSessionReported(
            run_id="partial",
            report=ProfilerSessionReport(
                session_id="p1", host="h0", phase=ProfilerSessionPhase.SUCCEEDED, file_uri="f"
            ),
        )
    )
    await publisher.publish(
        ProfileCaptureFinished(
            run_id="partial",
            session_id="p1",
            operation=operation["name"],
            error_code="targets_missing",
            error_message="h1 produced no file",
            missing_hosts=["h1"],
        )
    )
    operation_id = operation["name"].rsplit("/", 1)[-1]
    waited = (await api.post(f"{OPERATIONS}/{operation_id}:wait", json={"timeout": "20s"})).json()
    assert waited["done"] is True and waited["response"] is None
    assert waited["error"] == {"code": "targets_missing", "message": "h1 produced no file"}
    session = (await api.get(f"{RUNS}/partial/profilerSessions/p1")).json()
    assert session["phase"] == "FAILED" and session["endTime"]
    hosts = {h["host"]: h for h in session["hosts"]}
    assert hosts["h0"]["phase"] == "SUCCEEDED"
    assert hosts["h1"]["phase"] == "FAILED"
    assert "no profile from this host" in hosts["h1"]["error"]


async def test_an_analyzer_request_becomes_a_snapshot_capture_once(
    profiles_api: httpx.AsyncClient, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    api = profiles_api
    await new_run(api, "snap")
    await register(api, "snap", "h0")
    await register(api, "snap", "h1")
    event_id = uuid.uuid4()
    request = ProfileCaptureRequested(
        run_id="snap", workload_event_id=event_id, hosts=["h1", "elsewhere"], reason="slow"
    )
    await publisher.publish(request)

    async def commands() -> list[CaptureProfile]:
        return await _commands(nats_settings, "snap")

    [command] = await wait_until(commands)
    assert command.kind is ProfilerSessionKind.SNAPSHOT
    assert command.workload_event_id == event_id
    assert [t.host for t in command.targets] == ["h1"]  # an unknown host is skipped
    assert re.fullmatch(r"snapshot-[0-9a-f]{8}", command.session_id)
    session = (await api.get(f"{RUNS}/snap/profilerSessions/{command.session_id}")).json()
    assert session["kind"] == "SNAPSHOT" and session["autoCaptured"] is True
    assert session["monitoredEvents"] == [str(event_id)]
    assert session["operation"] == command.operation

    # a redelivery past JetStream's duplicate window does nothing twice
    await publisher.publish_raw(
        publisher.subject_for(request), request.model_dump_json().encode(), "redelivered"
    )
    await new_run(api, "bare")  # no targets: a failed operation, no session
    await publisher.publish(ProfileCaptureRequested(run_id="bare", workload_event_id=event_id))

    async def bare_operations() -> list[dict[str, Any]]:
        return await _operations_of(api, "bare")

    [refused] = await wait_until(bare_operations)
    assert refused["done"] is True and refused["error"]["code"] == "no_profiler_targets"
    listing = (await api.get(f"{RUNS}/bare/profilerSessions")).json()
    assert listing["profilerSessions"] == []

    assert len(await commands()) == 1
    [pending] = await _operations_of(api, "snap")
    assert pending["done"] is False and pending["name"] == command.operation
    sessions = (await api.get(f"{RUNS}/snap/profilerSessions")).json()["profilerSessions"]
    assert [s["sessionId"] for s in sessions] == [command.session_id]


async def test_an_analyzer_request_during_a_programmatic_trace_is_refused(
    profiles_api: httpx.AsyncClient, publisher: Publisher
) -> None:
    api = profiles_api
    await new_run(api, "busy")
    await register(api, "busy", "h0")
    await api.post(
        f"{RUNS}/busy/profilerSessions:report",
        json={"sessionId": "prog", "host": "h0", "phase": "ACTIVE"},
    )
    await publisher.publish(ProfileCaptureRequested(run_id="busy"))

    async def operations() -> list[dict[str, Any]]:
        return await _operations_of(api, "busy")

    [refused] = await wait_until(operations)
    assert refused["done"] is True
    assert refused["error"]["code"] == "programmatic_trace_active"
    assert refused["metadata"]["verb"] == "capture"
