"""``mldiag agent`` against the real run-registry and ingestion (real NATS and PostgreSQL):
the agent runs as its own process and finds a workload process by its environment.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mldiag.process_tree import ProcessMeter, RunProcesses, process_tree
from sdk.cli.conftest import Platform

AGENT_TIMEOUT = 60


@pytest.fixture
def workload() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A sleeping process (with a child of its own) whose environment names a run."""
    run_id = f"agent-{uuid.uuid4().hex[:12]}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time;"
            " subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            " time.sleep(60)",
        ],
        env={**os.environ, "MLDIAG_RUN_ID": run_id},
    )
    try:
        deadline = time.monotonic() + 10
        while len(process_tree(process.pid)) < 2:  # its child is up too
            assert time.monotonic() < deadline
            time.sleep(0.05)
        yield run_id, process
    finally:
        for member in reversed(process_tree(process.pid)):
            member.kill()
        process.wait(10)


def test_processes_are_found_by_the_run_in_their_environment(
    workload: tuple[str, subprocess.Popen[bytes]],
) -> None:
    run_id, process = workload
    found = RunProcesses().scan()
    assert sorted(member.pid for member in found[run_id]) == sorted(
        member.pid for member in process_tree(process.pid)
    )
    meter = ProcessMeter()
    first = meter.measure(found[run_id])
    assert ("process_cpu_utilization", "") not in first  # one reading is no measurement
    assert first["process_count", ""] == 2
    assert first["process_memory_rss_bytes", ""] > 0
    time.sleep(0.1)
    assert meter.measure(found[run_id])["process_cpu_utilization", ""] >= 0


def _environment(platform: Platform, tmp_path: Path) -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("MLDIAG_") or key == "MLDIAG_HOME"
    }
    environment.update(
        MLDIAG_INGESTION_URL=platform.ingestion_url,
        MLDIAG_TOKEN=platform.tokens.admin,
        MLDIAG_SPOOL_DIR=str(tmp_path / "spool"),
    )
    return environment


def _agent(*args: str) -> list[str]:
    return [sys.executable, "-m", "mldiag.cli", "agent", *args]


def _create_run(platform: Platform, run_id: str) -> None:
    response = httpx.post(
        f"{platform.api_url}/v1/machineLearningRuns",
        json={"runId": run_id, "displayName": "watched by the agent"},
        headers=platform.tokens.headers(),
        timeout=10,
    )
    assert response.status_code < 300, response.text


def _points(platform: Platform, run_id: str, metric: str) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{platform.api_url}/v1/machineLearningRuns/{run_id}/metrics/{metric}",
        headers=platform.tokens.headers(),
        timeout=10,
    )
    if response.status_code != 200:
        return []
    points: list[dict[str, Any]] = response.json()["points"]
    return points


def _wait_for_points(platform: Platform, run_id: str, metric: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while not (points := _points(platform, run_id, metric)):
        assert time.monotonic() < deadline, f"no {metric} points"
        time.sleep(0.1)
    return points


@pytest.mark.connected
def test_agent_once_writes_the_workloads_metrics_into_its_run(
    platform_apps: Platform, tmp_path: Path, workload: tuple[str, subprocess.Popen[bytes]]
) -> None:
    run_id, _ = workload
    _create_run(platform_apps, run_id)

    done = subprocess.run(  # noqa: PLW1510  # the status is asserted
        _agent("--once"),
        env=_environment(platform_apps, tmp_path),
        capture_output=True,
        timeout=AGENT_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr.decode()

    [count] = _wait_for_points(platform_apps, run_id, "process_count")
    assert count["value"] == 2
    assert (count["host"], count.get("processIndex")) == (socket.gethostname(), None)
    [rss] = _wait_for_points(platform_apps, run_id, "process_memory_rss_bytes")
    assert rss["value"] > 1_000_000
    assert _wait_for_points(platform_apps, run_id, "process_cpu_utilization")
    assert _wait_for_points(platform_apps, run_id, "process_thread_count")
    assert _wait_for_points(platform_apps, run_id, "host_memory_used_bytes")
    assert _wait_for_points(platform_apps, run_id, "host_cpu_utilization")

    run = httpx.get(
        f"{platform_apps.api_url}/v1/machineLearningRuns/{run_id}",
        headers=platform_apps.tokens.headers(),
        timeout=10,
    ).json()
    assert run["runPhase"] == "ACTIVE"  # the agent never changes a run


@pytest.mark.connected
def test_agent_creates_no_run(
    platform_apps: Platform, tmp_path: Path, workload: tuple[str, subprocess.Popen[bytes]]
) -> None:
    run_id, _ = workload  # never created
    done = subprocess.run(  # noqa: PLW1510  # the status is asserted
        _agent("--once"),
        env=_environment(platform_apps, tmp_path),
        capture_output=True,
        timeout=AGENT_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr.decode()
    response = httpx.get(
        f"{platform_apps.api_url}/v1/machineLearningRuns/{run_id}",
        headers=platform_apps.tokens.headers(),
        timeout=10,
    )
    assert response.status_code == 404


@pytest.mark.connected
def test_agent_samples_every_interval_and_stops_cleanly_on_sigterm(
    platform_apps: Platform, tmp_path: Path, workload: tuple[str, subprocess.Popen[bytes]]
) -> None:
    run_id, _ = workload
    _create_run(platform_apps, run_id)
    agent = subprocess.Popen(
        _agent("--interval", "0.2"),
        env=_environment(platform_apps, tmp_path),
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while len(_points(platform_apps, run_id, "process_count")) < 3:
            assert agent.poll() is None, agent.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.1)
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=AGENT_TIMEOUT)
    finally:
        agent.kill()
    assert agent.returncode == 0, stderr.decode()
