"""The SDK against the real ingestion and run-registry (real NATS and PostgreSQL).

Both apps run under uvicorn on real ports in threads of their own, because the SDK's sender
thread speaks plain HTTP to them.
"""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

import mldiag
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import HEARTBEAT_RECEIVED, SIGNAL_RECEIVED
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.telemetry import RunHeartbeat, SignalKind, WorkloadSignalReported
from support import read_messages

pytestmark = pytest.mark.connected

E = TypeVar("E", bound=Envelope)


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {os.environ['MLDIAG_TOKEN']}"}


def read_series(api_url: str, run_id: str, metric: str) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{api_url}/v1/machineLearningRuns/{run_id}/metrics/{metric}", headers=_auth()
    )
    if response.status_code != 200:
        return []
    points: list[dict[str, Any]] = response.json()["points"]
    return points


def test_points_logged_through_the_sdk_read_back_from_the_api(
    platform_urls: tuple[str, str], tmp_path: Path
) -> None:
    api_url, ingestion_url = platform_urls
    run = mldiag.init(
        name="connected",
        run_set="sdk-tests",
        configs={"lr": 3e-4, "layers": 12},
        workload_id=f"connected-{tmp_path.name}",
        api_url=api_url,
        ingestion_url=ingestion_url,
        spool_dir=tmp_path,
        handle_exit=False,
        batch_points=100,
        flush_interval=0.05,
    )
    for step in range(500):
        run.log({"loss": 1.0 / (step + 1), "learning_rate": 3e-4})
    assert run.flush(timeout=20) is True

    deadline = time.monotonic() + 20
    points: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        points = read_series(api_url, run.run_id, "loss")
        if len(points) == 500:
            break
        time.sleep(0.1)
    assert [point["step"] for point in points] == list(range(500))
    assert points[9]["value"] == pytest.approx(0.1)
    assert {point["host"] for point in points} == {run.host}

    assert run.finish() is True
    described = httpx.get(f"{api_url}/v1/machineLearningRuns/{run.run_id}", headers=_auth()).json()
    assert described["displayName"] == "connected"
    assert described["runSet"] == "sdk-tests"
    assert described["configs"]["userConfigs"] == {"lr": 3e-4, "layers": 12}
    software, hardware = (described["configs"][f"{s}Configs"] for s in ("software", "hardware"))
    assert software["python_version"] and isinstance(software["packages"]["count"], int)
    assert isinstance(hardware["cpu_count"], int) and isinstance(hardware["memory_bytes"], int)
    assert described["runPhase"] == "COMPLETED"

    again = mldiag.init(  # a restart attaches to the same run (409 on create)
        name="connected",
        workload_id=f"connected-{tmp_path.name}",
        api_url=api_url,
        ingestion_url=ingestion_url,
        spool_dir=tmp_path,
        handle_exit=False,
        flush_interval=0.05,
    )
    assert again.run_id == run.run_id
    again.log({"loss": 0.0}, step=500)
    assert again.finish() is True
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(points) < 501:
        points = read_series(api_url, run.run_id, "loss")
        time.sleep(0.1)
    assert len(points) == 501
    described = httpx.get(f"{api_url}/v1/machineLearningRuns/{run.run_id}", headers=_auth()).json()
    assert described["runPhase"] == "COMPLETED"


def _heartbeats(api_url: str, run_id: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{api_url}/v1/machineLearningRuns/{run_id}/heartbeats", headers=_auth())
    beats: list[dict[str, Any]] = response.json().get("heartbeats", [])
    return beats


def test_a_live_run_beats_with_its_last_step_and_stops_when_finished(
    platform_urls: tuple[str, str], tmp_path: Path
) -> None:
    api_url, ingestion_url = platform_urls
    run = mldiag.init(
        name="beating",
        api_url=api_url,
        ingestion_url=ingestion_url,
        spool_dir=tmp_path,
        handle_exit=False,
        heartbeat_interval=0.2,
    )
    deadline = time.monotonic() + 20
    while not (beats := _heartbeats(api_url, run.run_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    [first] = beats
    assert (first["host"], first["pid"], first["intervalSeconds"]) == (run.host, os.getpid(), 0.2)
    assert first["step"] is None  # nothing logged yet
    run.log({"loss": 1.0}, step=41)
    while _heartbeats(api_url, run.run_id)[0]["step"] != 41 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _heartbeats(api_url, run.run_id)[0]["step"] == 41
    assert run.finish() is True
    time.sleep(0.5)  # in flight beats land
    last = _heartbeats(api_url, run.run_id)[0]["lastSeenTime"]
    time.sleep(0.6)  # three intervals: a live process would have beaten again
    assert _heartbeats(api_url, run.run_id)[0]["lastSeenTime"] == last


def _on_bus(settings: NatsSettings, subject: str, message_type: type[E], count: int = 1) -> list[E]:
    """The messages of one type on the bus, once there are ``count`` of them."""
    deadline = time.monotonic() + 20
    while True:
        found = asyncio.run(read_messages(settings, subject, message_type))
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _run_resource(api_url: str, run_id: str) -> dict[str, Any]:
    described: dict[str, Any] = httpx.get(
        f"{api_url}/v1/machineLearningRuns/{run_id}", headers=_auth()
    ).json()
    return described


def test_signals_and_fingerprinted_heartbeats_reach_the_bus(
    platform_urls: tuple[str, str], nats_settings: NatsSettings, tmp_path: Path
) -> None:
    api_url, ingestion_url = platform_urls
    run = mldiag.init(
        name="signalling",
        api_url=api_url,
        ingestion_url=ingestion_url,
        spool_dir=tmp_path,
        handle_exit=False,
        heartbeat_interval=0.2,
        log_system_metrics=False,
    )
    run.log({"loss": 1.0}, step=12)
    assert run.preemption_notice("maintenance", "TERMINATE_ON_HOST_MAINTENANCE") is True
    assert run.report_signal(SignalKind.PROCESS_EXITED, exit_code=137, signal="SIGKILL") is True
    [notice, exited] = sorted(
        _on_bus(nats_settings, SIGNAL_RECEIVED, WorkloadSignalReported, 2),
        key=lambda message: message.occurred_at,
    )
    assert notice.run_id == run.run_id
    assert (notice.signal.kind, notice.signal.reason, notice.signal.step) == (
        SignalKind.PREEMPTION_NOTICE,
        "maintenance",
        12,
    )
    assert (notice.signal.host, notice.signal.pid) == (run.host, os.getpid())
    assert (exited.signal.exit_code, exited.signal.signal) == (137, "SIGKILL")

    [beat, *_] = _on_bus(nats_settings, HEARTBEAT_RECEIVED, RunHeartbeat)
    assert beat.fingerprint["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert len(beat.fingerprint["packages_sha256"]) == 64
    assert beat.fingerprint["git_commit"]  # the tests run from the repository's checkout
    assert run.finish() is True


CHILD = """
import os, sys, time
import mldiag
run = mldiag.init(
    name="child", run_id=sys.argv[1], api_url=os.environ["API"],
    ingestion_url=os.environ["INGESTION"], spool_dir=os.environ["SPOOL"],
    flush_interval=0.05, heartbeat_interval=0, log_system_metrics=False,
)
run.log({"loss": 1.0}, step=3)
run.flush(timeout=20)
if sys.argv[2] == "raise":
    raise MemoryError("RESOURCE_EXHAUSTED: out of memory allocating 8.00GiB")
open(os.environ["READY"], "w").close()
time.sleep(60)
"""


def _child(
    api_url: str, ingestion_url: str, tmp_path: Path, run_id: str, how: str
) -> subprocess.CompletedProcess[str]:
    ready = tmp_path / f"{run_id}.ready"
    env = {
        **os.environ,
        "API": api_url,
        "INGESTION": ingestion_url,
        "SPOOL": str(tmp_path / "spool"),
        "READY": str(ready),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), run_id, how],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if how == "terminate":
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=60)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def test_a_terminated_and_a_crashed_process_report_why_and_fail_their_runs(
    platform_urls: tuple[str, str], nats_settings: NatsSettings, tmp_path: Path
) -> None:
    api_url, ingestion_url = platform_urls
    terminated = _child(api_url, ingestion_url, tmp_path, "sdk-terminated", "terminate")
    assert terminated.returncode == -signal.SIGTERM, terminated.stderr
    crashed = _child(api_url, ingestion_url, tmp_path, "sdk-crashed", "raise")
    assert crashed.returncode == 1 and "MemoryError" in crashed.stderr

    by_run = {
        message.run_id: message.signal
        for message in _on_bus(nats_settings, SIGNAL_RECEIVED, WorkloadSignalReported, 2)
    }
    assert set(by_run) == {"sdk-terminated", "sdk-crashed"}
    sigterm, exception = by_run["sdk-terminated"], by_run["sdk-crashed"]
    assert (sigterm.kind, sigterm.signal, sigterm.step) == (SignalKind.SIGTERM, "SIGTERM", 3)
    assert (exception.kind, exception.error_type, exception.step) == (
        SignalKind.EXCEPTION,
        "MemoryError",
        3,
    )
    assert exception.message.startswith("RESOURCE_EXHAUSTED")

    failed = _run_resource(api_url, "sdk-terminated")
    assert failed["runPhase"] == "FAILED"
    assert failed["errorDetails"]["code"] == "SIGTERM"
    assert failed["errorDetails"]["message"] == "terminated by signal SIGTERM"
    crashed_run = _run_resource(api_url, "sdk-crashed")
    assert crashed_run["runPhase"] == "FAILED"
    assert crashed_run["errorDetails"]["code"] == "MemoryError"
