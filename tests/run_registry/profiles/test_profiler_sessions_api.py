"""Profiler sessions and targets over HTTP and the bus: reports merge by host (in any order,
repeats change nothing), lists page and filter, targets upsert, changes are announced
(real NATS and PostgreSQL)."""

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.auth import Role
from mldiag_schemas.profiling import (
    ProfilerSessionChanged,
    ProfilerSessionPhase,
    ProfilerSessionReport,
    ProfilerSessionReported,
)
from run_registry.profiles.helpers import STORAGE_ROOT, XPROF_URL, new_run, register
from support import read_messages, wait_until

pytestmark = pytest.mark.connected

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RUNS = "/v1/machineLearningRuns"


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


async def _report(
    api: httpx.AsyncClient, run_id: str, session_id: str, host: str, phase: str, **fields: Any
) -> httpx.Response:
    body = {"sessionId": session_id, "host": host, "phase": phase, **fields}
    return await api.post(f"{RUNS}/{run_id}/profilerSessions:report", json=body)


async def _changes(settings: NatsSettings, session_id: str) -> list[ProfilerSessionChanged]:
    messages = await read_messages(settings, bus.PROFILER_SESSION_CHANGED, ProfilerSessionChanged)
    return [m for m in messages if m.session.session_id == session_id]


async def test_reports_merge_by_host_and_each_change_is_announced(
    profiles_api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    api = profiles_api
    run = await new_run(api, "traced")
    assert run["artifacts"]["gcsPath"] == STORAGE_ROOT  # created without one

    first = await _report(api, "traced", "s1", "h0", "ACTIVE", startTime=_at(0), updateTime=_at(0))
    assert first.status_code == 200, first.text
    session = first.json()
    assert session["name"] == (
        "projects/default/locations/local/machineLearningRuns/traced/profilerSessions/s1"
    )
    assert session["kind"] == "PROGRAMMATIC" and session["phase"] == "ACTIVE"
    assert session["storageFolderUri"] == f"{STORAGE_ROOT}/traced/plugins/profile/s1"
    assert session["dashboardUri"] == f"{XPROF_URL}/xprof/open?run=traced&session=s1"

    await _report(api, "traced", "s1", "h1", "ACTIVE", updateTime=_at(1), durationSeconds=2.0)
    h0_done = {
        "endTime": _at(4),
        "fileUri": f"{STORAGE_ROOT}/traced/plugins/profile/s1/h0.xplane.pb",
        "sizeBytes": 1234,
        "updateTime": _at(4),
    }
    done = await _report(api, "traced", "s1", "h0", "SUCCEEDED", **h0_done)
    assert done.json()["phase"] == "ACTIVE"  # h1 still tracing
    # a late ACTIVE of h0 (older) and a repeat change nothing
    stale = await _report(api, "traced", "s1", "h0", "ACTIVE", updateTime=_at(2))
    repeat = await _report(api, "traced", "s1", "h0", "SUCCEEDED", **h0_done)
    assert stale.json() == repeat.json()
    h0 = stale.json()["hosts"][0]
    assert (h0["host"], h0["phase"], h0["sizeBytes"], h0["startTime"]) == (
        "h0",
        "SUCCEEDED",
        1234,
        _at(0).replace("+00:00", "Z"),
    )

    last = await _report(api, "traced", "s1", "h1", "SUCCEEDED", endTime=_at(5), updateTime=_at(5))
    final = last.json()
    assert final["phase"] == "SUCCEEDED"
    assert [h["phase"] for h in final["hosts"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert final["endTime"] == _at(5).replace("+00:00", "Z")
    assert final["durationSeconds"] == 2.0

    fetched = await api.get(f"/v1/{final['name']}")  # the full resource name works too
    assert fetched.status_code == 200 and fetched.json() == final

    async def announced() -> list[ProfilerSessionChanged]:
        return await _changes(nats_settings, "s1")

    # four merges changed the session; the stale one and the repeat did not
    changes = await wait_until(announced, accept=lambda found: len(found) >= 4)
    assert len(changes) == 4
    assert changes[-1].session.phase is ProfilerSessionPhase.SUCCEEDED
    assert changes[-1].session.dashboard_uri.startswith(XPROF_URL)


async def test_a_failed_host_fails_the_session_and_prewarmed_sticks(
    profiles_api: httpx.AsyncClient,
) -> None:
    api = profiles_api
    await new_run(api, "failing", artifacts={"gcsPath": "gs://bucket/runs"})
    await _report(api, "failing", "s", "h0", "SUCCEEDED", updateTime=_at(1), prewarmed=True)
    await _report(api, "failing", "s", "h1", "FAILED", updateTime=_at(2), error="oom")
    session = (await _report(api, "failing", "s", "h0", "SUCCEEDED", updateTime=_at(3))).json()
    assert session["phase"] == "FAILED"
    assert session["prewarmed"] is True
    assert session["hosts"][1]["error"] == "oom"
    # the run's own artifacts root names the folder
    assert session["storageFolderUri"] == "gs://bucket/runs/failing/plugins/profile/s"


async def test_unknown_runs_and_sessions_are_404_and_bad_bodies_400(
    profiles_api: httpx.AsyncClient, api_tokens: ApiTokens
) -> None:
    api = profiles_api
    missing = await _report(api, "nowhere", "s", "h0", "ACTIVE")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "run_not_found")
    await new_run(api, "known")
    unknown = await api.get(f"{RUNS}/known/profilerSessions/nope")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "session_not_found")
    listing = await api.get(f"{RUNS}/nowhere/profilerSessions")
    assert listing.status_code == 404
    bad = await _report(api, "known", "../etc", "h0", "ACTIVE")
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_argument")
    forbidden = await api.post(
        f"{RUNS}/known/profilerSessions:report",
        json={"sessionId": "s", "host": "h0", "phase": "ACTIVE"},
        headers=api_tokens.headers(Role.VIEWER),
    )
    assert forbidden.status_code == 403
    readable = await api.get(
        f"{RUNS}/known/profilerSessions", headers=api_tokens.headers(Role.VIEWER)
    )
    assert readable.status_code == 200


async def test_sessions_list_newest_first_with_pages_and_filters(
    profiles_api: httpx.AsyncClient,
) -> None:
    api = profiles_api
    await new_run(api, "many")
    for i in range(5):
        kind = "SNAPSHOT" if i % 2 else "PROGRAMMATIC"
        phase = "FAILED" if i == 4 else "SUCCEEDED"
        await _report(api, "many", f"s{i}", "h0", phase, kind=kind, updateTime=_at(i * 10))
    url = f"{RUNS}/many/profilerSessions"
    everything = (await api.get(url)).json()
    assert [s["sessionId"] for s in everything["profilerSessions"]] == [
        "s4",
        "s3",
        "s2",
        "s1",
        "s0",
    ]
    assert everything["nextPageToken"] == ""

    paged: list[str] = []
    token = ""
    while True:
        page = (await api.get(url, params={"pageSize": 2, "pageToken": token})).json()
        paged.extend(s["sessionId"] for s in page["profilerSessions"])
        token = page["nextPageToken"]
        if not token:
            break
    assert paged == ["s4", "s3", "s2", "s1", "s0"]

    snapshots = (await api.get(url, params={"filter": "kind = snapshot"})).json()
    assert [s["sessionId"] for s in snapshots["profilerSessions"]] == ["s3", "s1"]
    assert all(s["autoCaptured"] for s in snapshots["profilerSessions"])
    failed = (await api.get(url, params={"filter": "phase = FAILED"})).json()
    assert [s["sessionId"] for s in failed["profilerSessions"]] == ["s4"]
    since = (await api.get(url, params={"filter": f'createTime >= "{_at(30)}"'})).json()
    assert [s["sessionId"] for s in since["profilerSessions"]] == ["s4", "s3"]

    bad_filter = await api.get(url, params={"filter": "colour = red"})
    assert (bad_filter.status_code, bad_filter.json()["error"]["code"]) == (400, "invalid_filter")
    first = (await api.get(url, params={"pageSize": 2})).json()["nextPageToken"]
    other_query = await api.get(url, params={"pageToken": first, "filter": "phase = FAILED"})
    assert other_query.json()["error"]["code"] == "invalid_page_token"


async def test_targets_upsert_by_host_and_process_index(profiles_api: httpx.AsyncClient) -> None:
    api = profiles_api
    await new_run(api, "targets")
    first = await register(api, "targets", "h1", 0, 9012)
    assert first["targetId"] == "h1-0"
    assert first["name"] == (
        "projects/default/locations/local/machineLearningRuns/targets/profilerTargets/h1-0"
    )
    await register(api, "targets", "h0", 1)
    await register(api, "targets", "h0", 0)
    again = await register(api, "targets", "h1", 0, 9999)  # the process restarted
    assert again["address"] == "h1:9999"
    assert again["registerTime"] == first["registerTime"]
    assert again["updateTime"] >= first["updateTime"]

    listing = (await api.get(f"{RUNS}/targets/profilerTargets")).json()["profilerTargets"]
    assert [(t["targetId"], t["address"]) for t in listing] == [
        ("h0-0", "h0:9012"),
        ("h0-1", "h0:9012"),
        ("h1-0", "h1:9999"),
    ]
    bad = await api.post(
        f"{RUNS}/targets/profilerTargets", json={"host": "h0", "address": "no port"}
    )
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_argument")
    missing = await api.post(
        f"{RUNS}/nowhere/profilerTargets", json={"host": "h0", "address": "h0:1"}
    )
    assert missing.status_code == 404


async def test_provisioner_reports_on_the_bus_merge_like_http_ones(
    profiles_api: httpx.AsyncClient, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    api = profiles_api
    await new_run(api, "bussed")
    orphan = ProfilerSessionReported(
        run_id="no-such-run",
        report=ProfilerSessionReport(session_id="x", host="h0", phase=ProfilerSessionPhase.ACTIVE),
    )
    report = ProfilerSessionReported(
        run_id="bussed",
        report=ProfilerSessionReport(
            session_id="from-bus", host="h0", phase=ProfilerSessionPhase.SUCCEEDED
        ),
    )
    await publisher.publish(orphan)  # logged and acked: it does not block the next
    await publisher.publish(report)

    async def status() -> int:
        return (await api.get(f"{RUNS}/bussed/profilerSessions/from-bus")).status_code

    await wait_until(status, accept=lambda code: code == 200)
    session = (await api.get(f"{RUNS}/bussed/profilerSessions/from-bus")).json()
    # no time in the report: the message's time stands for it
    assert session["updateTime"] == report.occurred_at.isoformat().replace("+00:00", "Z")
    assert session["phase"] == "SUCCEEDED"

    # a redelivery (past JetStream's duplicate window: a new message id) changes nothing
    await publisher.publish_raw(
        publisher.subject_for(report), report.model_dump_json().encode(), "replayed-report"
    )
    marker = ProfilerSessionReported(
        run_id="bussed",
        report=ProfilerSessionReport(
            session_id="marker", host="h0", phase=ProfilerSessionPhase.ACTIVE
        ),
    )
    await publisher.publish(marker)

    async def marker_status() -> int:
        return (await api.get(f"{RUNS}/bussed/profilerSessions/marker")).status_code

    await wait_until(marker_status, accept=lambda code: code == 200)
    assert (await api.get(f"{RUNS}/bussed/profilerSessions/from-bus")).json() == session
    assert len(await _changes(nats_settings, "from-bus")) == 1


async def test_a_deleted_runs_sessions_and_targets_are_gone(
    profiles_api: httpx.AsyncClient,
) -> None:
    api = profiles_api
    await new_run(api, "doomed")
    await register(api, "doomed", "h0")
    await _report(api, "doomed", "s", "h0", "SUCCEEDED")
    assert (await api.delete(f"{RUNS}/doomed")).status_code == 200
    for path in ("profilerSessions", "profilerSessions/s", "profilerTargets"):
        response = await api.get(f"{RUNS}/doomed/{path}")
        assert (response.status_code, response.json()["error"]["code"]) == (404, "run_not_found")


async def test_a_report_from_a_clock_far_ahead_is_refused(profiles_api: httpx.AsyncClient) -> None:
    # The newest report wins per host: one stamped next year would pin the host until then.
    await new_run(profiles_api, "skewed")
    ahead = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    refused = await _report(profiles_api, "skewed", "s1", "h0", "ACTIVE", updateTime=ahead)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "timestamp_in_future"
    missing = await profiles_api.get(f"{RUNS}/skewed/profilerSessions/s1")
    assert missing.status_code == 404
