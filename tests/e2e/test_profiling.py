"""Profiling through the whole platform, with real JAX workloads (CPU) using the SDK.

run-registry, ingestion and xprof-provisioner are served for real (uvicorn threads, real NATS
and PostgreSQL, real XProf processes); every workload is a real process per simulated host.
Proves: a programmatic trace lands in storage and is listed; an on-demand capture of a
running two-host workload lands with both host files; a dead target fails clearly; a capture
during a programmatic trace is refused; an analyzer's capture request makes a SNAPSHOT
session linked to its event; the session is pre-warmed; XProf serves it through the proxy,
which refuses what the UI does not need. The storage is ``file://``, then ``gs://`` against
an emulator.
"""

import asyncio
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.bus import connect_bus
from mldiag_platform.settings import DatabaseSettings, NatsSettings, StorageSettings
from mldiag_platform.storage import open_store
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas.profiling import ProfileCaptureRequested
from mldiag_xprof_provisioner.app import create_app as create_provisioner
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from support import free_port, served_in_thread

pytestmark = pytest.mark.e2e

JOB = Path(__file__).with_name("profiled_job.py")


class Platform:
    """The served platform, its storage, and the workloads started against it."""

    def __init__(
        self, api: str, xprof: str, env: dict[str, str], token: str, storage_url: str
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        self.api = httpx.Client(base_url=api, headers=headers, timeout=30)
        self.xprof = httpx.Client(base_url=xprof, headers=headers, timeout=60)
        self.env = env
        self.token = token
        self.storage_url = storage_url
        self.nats: NatsSettings | None = None
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(
        self, mode: str, run_id: str, hosts: int = 1, **env: str
    ) -> list[subprocess.Popen[bytes]]:
        started = []
        for index in range(hosts):
            child_env = {
                **os.environ,
                **self.env,
                "MLDIAG_RUN_ID": run_id,
                "MLDIAG_HOST": f"host-{index}",
                "MLDIAG_PROCESS_INDEX": str(index),
                **env,
            }
            process = subprocess.Popen(
                [sys.executable, str(JOB), mode],
                env=child_env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            started.append(process)
        self.processes += started
        return started

    def sessions(self, run_id: str) -> list[dict[str, Any]]:
        response = self.api.get(f"/v1/machineLearningRuns/{run_id}/profilerSessions")
        if response.status_code == 404:
            return []  # the run is not created yet
        response.raise_for_status()
        sessions: list[dict[str, Any]] = response.json().get("profilerSessions", [])
        return sessions

    def session(self, run_id: str, session_id: str) -> dict[str, Any]:
        response = self.api.get(f"/v1/machineLearningRuns/{run_id}/profilerSessions/{session_id}")
        response.raise_for_status()
        session: dict[str, Any] = response.json()
        return session

    def wait_targets(self, run_id: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            response = self.api.get(f"/v1/machineLearningRuns/{run_id}/profilerTargets")
            if response.status_code == 200:
                targets: list[dict[str, Any]] = response.json().get("profilerTargets", [])
                if len(targets) >= count:
                    return targets
            self._check_alive()
            time.sleep(0.2)
        raise AssertionError(f"{run_id}: fewer than {count} profiler targets in {timeout} s")

    def wait_session(
        self, run_id: str, predicate: Any, timeout: float = 90, what: str = "session"
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for session in self.sessions(run_id):
                if predicate(session):
                    return session
            time.sleep(0.2)
        raise AssertionError(f"{run_id}: no {what} within {timeout} s: {self.sessions(run_id)}")

    def capture(self, run_id: str, **body: Any) -> httpx.Response:
        return self.api.post(
            f"/v1/machineLearningRuns/{run_id}/profilerSessions:capture", json=body
        )

    def wait_operation(self, operation: dict[str, Any], timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not operation["done"]:
            assert time.monotonic() < deadline, f"operation not done: {operation}"
            response = self.api.post(f"/v1/{operation['name']}:wait", json={"timeout": "30s"})
            response.raise_for_status()
            operation = response.json()
        return operation

    def stored(self, run_id: str, session_id: str) -> list[str]:
        keys = asyncio.run(open_store(self.storage_url).list(f"{run_id}/plugins/profile/"))
        prefix = f"{run_id}/plugins/profile/{session_id}/"
        return sorted(key[len(prefix) :] for key in keys if key.startswith(prefix))

    def _check_alive(self) -> None:
        for process in self.processes:
            if process.poll() not in (None, 0):
                stderr = process.stderr.read().decode() if process.stderr else ""
                raise AssertionError(f"a workload failed ({process.returncode}):\n{stderr}")


def _serve(storage_url: str, nats_url: str, database_url: str, tmp: Path) -> Iterator[Platform]:
    tag = uuid.uuid4().hex[:8]
    nats = NatsSettings(url=nats_url, namespace=f"prof{tag}")
    database = DatabaseSettings(url=database_url, pool_min_size=1, pool_max_size=4)
    storage = StorageSettings(url=storage_url)
    token = "mldiag_" + secrets.token_urlsafe(32)
    first_port = free_port()
    provisioner = create_provisioner(
        XProfProvisionerSettings(
            nats=nats,
            storage=storage,
            work_dir=tmp / "xprof",
            first_instance_port=min(first_port, 65000),
            instance_port_count=20,
            idle_timeout_seconds=120,
        )
    )
    with served_in_thread(provisioner) as xprof_url:
        registry = create_registry(
            RunRegistrySettings(
                nats=nats,
                database=database,
                db_schema=f"p_{tag}",
                bootstrap_admin_token=token,
                storage=storage,
                xprof_url=xprof_url,
            )
        )
        ingestion = create_ingestion(
            IngestionSettings(nats=nats, otlp_grpc_port=0, otlp_http_port=0)
        )
        with served_in_thread(registry) as api, served_in_thread(ingestion) as ingestion_url:
            platform = Platform(
                api,
                xprof_url,
                {
                    "MLDIAG_API_URL": api,
                    "MLDIAG_INGESTION_URL": ingestion_url,
                    "MLDIAG_TOKEN": token,
                    "MLDIAG_HEARTBEAT_INTERVAL": "0",
                    "MLDIAG_SPOOL_DIR": "",
                    "MLDIAG_PROFILER_ADVERTISE_HOST": "127.0.0.1",
                    "JAX_PLATFORMS": "cpu",
                },
                token,
                storage_url,
            )
            platform.nats = nats
            try:
                yield platform
            finally:
                for process in platform.processes:
                    if process.poll() is None:
                        process.kill()
                        process.wait(10)


@pytest.fixture(scope="module")
def platform(
    nats_url: str, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    """The platform on ``file://`` storage, for the whole module."""
    tmp = tmp_path_factory.mktemp("profiling")
    yield from _serve(f"file://{tmp / 'storage'}", nats_url, database_url, tmp)


def _run_id(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def _finished(process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    process.wait(timeout)
    stderr = process.stderr.read().decode() if process.stderr else ""
    assert process.returncode == 0, stderr


def test_a_programmatic_trace_lands_in_storage_and_is_listed(platform: Platform) -> None:
    run_id = _run_id("programmatic")
    [job] = platform.start("programmatic", run_id, SESSION_ID="train-steps")
    _finished(job)
    session = platform.wait_session(
        run_id, lambda s: s["phase"] == "SUCCEEDED", what="SUCCEEDED session"
    )
    assert session["sessionId"] == "train-steps"
    assert session["kind"] == "PROGRAMMATIC"
    [host] = session["hosts"]
    assert host["host"] == "host-0"
    assert host["sizeBytes"] > 0
    assert host["fileUri"].endswith(f"/{run_id}/plugins/profile/train-steps/host-0.xplane.pb")
    assert "host-0.xplane.pb" in platform.stored(run_id, "train-steps")
    assert session["dashboardUri"].startswith(platform.xprof.base_url.__str__().rstrip("/"))


def test_an_on_demand_capture_of_two_hosts_lands_with_both_files(
    platform: Platform, tmp_path: Path
) -> None:
    run_id = _run_id("ondemand")
    stop = tmp_path / "stop"
    jobs = platform.start("serve", run_id, hosts=2, STOP_FILE=str(stop))
    try:
        targets = platform.wait_targets(run_id, 2)
        assert sorted(t["host"] for t in targets) == ["host-0", "host-1"]
        response = platform.capture(run_id, durationSeconds=1.0)
        assert response.status_code == 200, response.text
        operation = response.json()
        assert operation["done"] is False
        operation = platform.wait_operation(operation)
    finally:
        stop.touch()
    assert operation.get("error") is None, operation
    session = operation["response"]
    assert session["kind"] == "ON_DEMAND"
    assert [h["host"] for h in session["hosts"]] == ["host-0", "host-1"]
    assert all(h["phase"] == "SUCCEEDED" and h["sizeBytes"] > 0 for h in session["hosts"])
    files = platform.stored(run_id, session["sessionId"])
    assert {"host-0.xplane.pb", "host-1.xplane.pb"} <= set(files)
    for job in jobs:
        _finished(job)


def test_a_capture_against_a_dead_target_fails_clearly(platform: Platform) -> None:
    run_id = _run_id("dead")
    platform.api.post(
        "/v1/machineLearningRuns", json={"runId": run_id, "displayName": run_id}
    ).raise_for_status()
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    platform.api.post(
        f"/v1/machineLearningRuns/{run_id}/profilerTargets",
        json={"host": "host-0", "address": dead},
    ).raise_for_status()
    response = platform.capture(run_id, durationSeconds=0.5)
    assert response.status_code == 200, response.text
    operation = platform.wait_operation(response.json())
    assert operation["error"]["code"] == "capture_failed"
    assert "host-0" in operation["error"]["message"]
    assert dead in operation["error"]["message"]


def test_a_capture_during_a_programmatic_trace_is_refused(
    platform: Platform, tmp_path: Path
) -> None:
    run_id = _run_id("busy")
    stop = tmp_path / "stop"
    [job] = platform.start("serve_and_trace", run_id, STOP_FILE=str(stop), SESSION_ID="long")
    try:
        platform.wait_targets(run_id, 1)
        platform.wait_session(run_id, lambda s: s["phase"] == "ACTIVE", what="ACTIVE session")
        response = platform.capture(run_id, durationSeconds=0.5)
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert error["code"] == "programmatic_trace_active"
        assert "long" in error["message"]
    finally:
        stop.touch()
    _finished(job)


def test_an_analyzer_request_makes_a_snapshot_linked_to_its_event(
    platform: Platform, tmp_path: Path
) -> None:
    run_id = _run_id("snapshot")
    stop = tmp_path / "stop"
    [job] = platform.start("serve", run_id, STOP_FILE=str(stop))
    event_id = uuid.uuid4()
    try:
        platform.wait_targets(run_id, 1)

        async def publish() -> None:
            assert platform.nats is not None
            async with connect_bus(platform.nats, "test-analyzer") as bus:
                request = ProfileCaptureRequested(
                    run_id=run_id,
                    workload_event_id=event_id,
                    duration_seconds=0.5,
                    reason="step time regressed",
                )
                await bus.publisher.publish_many([request])

        asyncio.run(publish())
        session = platform.wait_session(
            run_id, lambda s: s["phase"] == "SUCCEEDED", what="SUCCEEDED snapshot"
        )
    finally:
        stop.touch()
    assert session["kind"] == "SNAPSHOT"
    assert session["autoCaptured"] is True
    assert session["monitoredEvents"] == [str(event_id)]
    _finished(job)


def test_xprof_serves_a_prewarmed_session_through_the_proxy(
    platform: Platform, tmp_path: Path
) -> None:
    run_id = _run_id("open")
    [job] = platform.start("programmatic", run_id, SESSION_ID="opened")
    _finished(job)
    session = platform.wait_session(
        run_id, lambda s: s["phase"] == "SUCCEEDED" and s["prewarmed"], what="prewarmed session"
    )
    assert "cache_version.txt" in platform.stored(run_id, "opened")

    # The shareable link: the token as a query parameter becomes a cookie.
    link = httpx.Client(base_url=platform.xprof.base_url, timeout=60, follow_redirects=False)
    opened = link.get(
        "/xprof/open", params={"run": run_id, "session": "opened", "token": platform.token}
    )
    assert opened.status_code == 303, opened.text
    ui = opened.headers["location"]
    assert platform.token not in ui
    page = link.get(ui)
    assert page.status_code == 200
    base = ui.split("?", 1)[0].rstrip("/")
    tools = link.get(f"{base}/run_tools", params={"run": f"{run_id}/opened"})
    assert tools.status_code == 200, tools.text
    assert "trace_viewer@" in tools.json()
    trace = link.get(
        f"{base}/data", params={"run": f"{run_id}/opened", "tag": "trace_viewer@", "host": "host-0"}
    )
    assert trace.status_code == 200, trace.text
    assert len(trace.content) > 1000

    forbidden = link.get(f"{base}/data", params={"session_path": "/etc", "tag": "trace_viewer@"})
    assert forbidden.status_code == 400
    assert forbidden.json()["error"]["code"] == "forbidden_parameter"
    capture = link.get(f"{base}/capture_profile", params={"service_addr": "127.0.0.1:1"})
    assert capture.status_code == 403
    anonymous = httpx.get(f"{platform.xprof.base_url}{base}/runs", timeout=10)
    assert anonymous.status_code == 401
    assert session["dashboardUri"].endswith(f"/xprof/open?run={run_id}&session=opened")


@pytest.fixture
def gcs_platform(
    nats_url: str, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Platform]:
    """The platform on ``gs://`` storage (an emulator), for one test."""
    from gcp_storage_emulator.server import create_server  # noqa: PLC0415

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="mldiag-profiles")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield from _serve("gs://mldiag-profiles/root", nats_url, database_url, tmp_path)
    finally:
        server.stop()


def test_on_gcs_a_programmatic_trace_lands_and_opens(gcs_platform: Platform) -> None:
    run_id = _run_id("gcs")
    [job] = gcs_platform.start("programmatic", run_id, SESSION_ID="on-gcs")
    _finished(job)
    session = gcs_platform.wait_session(
        run_id, lambda s: s["phase"] == "SUCCEEDED", what="SUCCEEDED session"
    )
    [host] = session["hosts"]
    assert host["fileUri"].startswith("gs://mldiag-profiles/root/")
    assert "host-0.xplane.pb" in gcs_platform.stored(run_id, "on-gcs")
    started = gcs_platform.xprof.post("/v1/xprofInstances", json={"runIds": [run_id]})
    assert started.status_code in (200, 201), started.text
    instance = started.json()
    base = instance["url"].split("?", 1)[0].rstrip("/")
    runs = gcs_platform.xprof.get(f"{base}/runs")
    assert runs.status_code == 200, runs.text
    assert f"{run_id}/on-gcs" in runs.json()
