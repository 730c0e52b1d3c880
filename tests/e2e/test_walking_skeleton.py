"""The whole platform as a user runs it: `mldiag up --detach`, curl-like calls, `mldiag down`.

Everything goes through the one base URL (the edge on the API port): points including a NaN
go in (to ingestion), the points, the event the detector opens and the analyzer's analysis
come back (from the registry), XProf and training answer there too; `mldiag down` leaves no
process behind.
"""

import asyncio
import json
import math
import os
import shutil
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import nats
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

from stacks import free_port_offset, ports_free
from support import world_readable_tempdir

pytestmark = pytest.mark.e2e

MLDIAG = [sys.executable, "-m", "mldiag.cli"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes: it holds no port and runs no code
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


class Stack:
    """A running stack in a temporary home."""

    def __init__(self, home: Path, offset: int) -> None:
        self.home = home
        self.offset = offset
        self.api = f"http://127.0.0.1:{8080 + offset}"
        self.ingestion = f"http://127.0.0.1:{8081 + offset}"

    @property
    def auth(self) -> dict[str, str]:
        """The admin token ``mldiag up`` wrote into the home directory, as a header."""
        token = (self.home / "admin-token").read_text().strip()
        return {"Authorization": f"Bearer {token}"}

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "MLDIAG_HOME": str(self.home), "MLDIAG_PORT_OFFSET": str(self.offset)}
        return subprocess.run(  # fixed argument list
            [*MLDIAG, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def pids(self) -> list[int]:
        state = json.loads((self.home / "state.json").read_text())
        found: list[int] = []

        def walk(node: object) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    if key.replace("_", "").lower().endswith("pid") and isinstance(value, int):
                        found.append(value)
                    else:
                        walk(value)
            elif isinstance(node, list):
                for item in node:
                    walk(item)

        walk(state)
        return found


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    home = world_readable_tempdir("mldiag-e2e-")
    running = Stack(home, free_port_offset())
    started = time.monotonic()
    up = running.cli("up", "--detach")
    elapsed = time.monotonic() - started
    assert up.returncode == 0, f"mldiag up failed:\n{up.stdout}\n{up.stderr}"
    print(f"\nmldiag up --detach: healthy in {elapsed:.1f}s")  # noqa: T201
    try:
        yield running
    finally:
        running.cli("down")
        shutil.rmtree(home, ignore_errors=True)


def _poll(
    url: str, key: str, headers: dict[str, str], timeout: float = 20.0
) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(url, timeout=5, headers=headers)
        response.raise_for_status()
        items: list[dict[str, object]] = response.json()[key]
        if items or time.monotonic() > deadline:
            return items
        time.sleep(0.1)


def test_points_event_and_analysis_come_back_through_the_api(stack: Stack) -> None:
    status = stack.cli("status")
    assert status.returncode == 0, status.stdout + status.stderr
    # the CLI finds the stack's admin token in MLDIAG_HOME without being told
    listed = stack.cli("runs", "list", "--api-url", stack.api)
    assert listed.returncode == 0, listed.stdout + listed.stderr

    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    anonymous = httpx.get(f"{stack.api}/v1/machineLearningRuns", timeout=5)
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthenticated"
    created = httpx.post(
        f"{stack.api}/v1/machineLearningRuns",
        content=json.dumps({"runId": run_id, "displayName": "e2e"}),
        timeout=5,
        headers=stack.auth,
    )
    assert created.status_code == 200, created.text
    assert created.json()["response"]["runId"] == run_id  # a done create operation

    body = b'{"series": [{"name": "loss", "steps": [1, 2, 3, 4], "values": [0.9, 0.7, NaN, 0.5], "host": "host-0"}]}'
    # The one base URL takes the write and hands it to ingestion.
    written = httpx.post(
        f"{stack.api}/v1/machineLearningRuns/{run_id}/metrics:write",
        content=body,
        timeout=5,
        headers=stack.auth,
    )
    assert written.status_code == 202, written.text

    points = _poll(
        f"{stack.api}/v1/machineLearningRuns/{run_id}/metrics/loss", "points", stack.auth
    )
    assert [p["step"] for p in points] == [1, 2, 3, 4]
    assert math.isnan(points[2]["value"])  # type: ignore[arg-type]

    [event] = _poll(f"{stack.api}/v1/machineLearningRuns/{run_id}/events", "events", stack.auth)
    assert event["type"] == "NUMERICAL_INSTABILITY"
    assert event["hosts"] == ["host-0"]
    assert event["evidence"]["firstBadStep"] == 3  # type: ignore[index]

    [analysis] = _poll(
        f"{stack.api}/v1/machineLearningRuns/{run_id}/analyses", "analyses", stack.auth
    )
    assert analysis["eventId"] == event["eventId"]
    reports = {report["analyzer"]: report for report in analysis["reports"]}  # type: ignore[attr-defined]
    assert analysis["analyzerInsightFound"] is True
    assert reports["numerical-instability"]["detectionState"] == "DETECTED"
    assert "0.7 at step 2" in reports["numerical-instability"]["details"]


def test_the_console_is_served_on_the_api_port(stack: Stack) -> None:
    # `make test`, like `make up`, builds the console before the stack starts
    home = httpx.get(f"{stack.api}/", timeout=5)
    assert home.status_code in (307, 308)
    assert home.headers["location"].endswith("/console/")
    page = httpx.get(f"{stack.api}/console/", timeout=5)
    assert page.status_code == 200
    assert "<title>mldiag</title>" in page.text
    assert "not built" not in page.text
    script = httpx.get(f"{stack.api}/console/app.js", timeout=5)
    assert script.status_code == 200
    assert "javascript" in script.headers["content-type"]
    # the page signs in through the caller route with the token `mldiag up` wrote
    caller = httpx.get(f"{stack.api}/v1/caller", timeout=5, headers=stack.auth).json()
    assert caller["role"] == "admin"


def test_the_substrate_is_locked_down(stack: Stack) -> None:
    # Issue 14: NATS took anyone and PostgreSQL trusted every local process.
    nats_url = f"nats://127.0.0.1:{14222 + stack.offset}"
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        asyncio.run(nats.connect(nats_url, allow_reconnect=False, connect_timeout=2))
    with pytest.raises(asyncpg.InvalidPasswordError):
        asyncio.run(asyncpg.connect(f"postgresql://mldiag@127.0.0.1:{15432 + stack.offset}/mldiag"))
    # Every service is connected, each as its own user.
    monitor = f"http://127.0.0.1:{18222 + stack.offset}"
    connections = httpx.get(f"{monitor}/connz?auth=true", timeout=5).json()["connections"]
    users = {connection.get("authorized_user") for connection in connections}
    assert users == {
        "run-registry",
        "ingestion",
        "event-detector",
        "analyzer",
        "xprof-provisioner",
        "training",
        "executor",
        "notifier",
    }
    secrets = stack.home / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    assert {stat.S_IMODE(path.stat().st_mode) for path in secrets.iterdir()} == {0o600}


def test_xprof_instance_starts_and_stops(stack: Stack) -> None:
    # Through the one base URL: the edge sends /v1/xprofInstances and /xprof/ to the provisioner.
    provisioner = stack.api
    # Instances start only for runs with a profile in storage (the file:// root).
    session = stack.home / "storage" / "e2e-profiles" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    (session / "host-0.xplane.pb").write_bytes(b"not much of an xplane")
    started = httpx.post(
        f"{provisioner}/v1/xprofInstances",
        json={"runIds": ["e2e-profiles"]},
        timeout=60,
        headers=stack.auth,
    )
    assert started.status_code == 201, started.text
    instance = started.json()
    assert instance["state"] == "RUNNING"
    # Only through the authenticating proxy: the instance's url is the proxied UI.
    runs = f"{provisioner}{instance['url'].removeprefix(provisioner)}runs"
    assert httpx.get(runs, timeout=10, headers=stack.auth).status_code == 200
    assert httpx.get(runs, timeout=10).status_code == 401
    stopped = httpx.delete(
        f"{provisioner}/v1/xprofInstances/{instance['instanceId']}",
        timeout=30,
        headers=stack.auth,
    )
    assert stopped.json()["state"] == "STOPPED"


def test_down_leaves_no_process_behind() -> None:
    home = world_readable_tempdir("mldiag-e2e-down-")
    stack = Stack(home, free_port_offset())
    try:
        assert stack.cli("up", "--detach").returncode == 0
        pids = stack.pids()
        assert len(pids) >= 11  # supervisor, NATS, PostgreSQL, the edge and seven services
        assert all(_pid_alive(pid) for pid in pids)
        down = stack.cli("down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(_pid_alive(pid) for pid in pids)
        assert ports_free(stack.offset)
        assert stack.cli("status").returncode != 0
    finally:
        stack.cli("down")
        shutil.rmtree(home, ignore_errors=True)


def test_otlp_http_has_its_own_port_and_configs_reach_the_run(stack: Stack) -> None:
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    created = httpx.post(
        f"{stack.api}/v1/machineLearningRuns",
        json={"runId": run_id, "displayName": "otlp"},
        timeout=5,
        headers=stack.auth,
    )
    assert created.status_code == 200, created.text
    record = LogRecord(
        body=AnyValue(
            kvlist_value=KeyValueList(
                values=[
                    KeyValue(
                        key="userConfigs",
                        value=AnyValue(
                            kvlist_value=KeyValueList(
                                values=[KeyValue(key="lr", value=AnyValue(double_value=0.1))]
                            )
                        ),
                    )
                ]
            )
        ),
        attributes=[
            KeyValue(key="namespace", value=AnyValue(string_value="mlrun_configs")),
            KeyValue(key="node_id", value=AnyValue(string_value=run_id)),
        ],
    )
    export = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[record])])]
    )
    answer = httpx.post(
        f"http://127.0.0.1:{4318 + stack.offset}/v1/logs",
        content=export.SerializeToString(),
        headers={**stack.auth, "Content-Type": "application/x-protobuf"},
        timeout=5,
    )
    assert answer.status_code == 200, answer.text

    def user_configs() -> object:
        run = httpx.get(f"{stack.api}/v1/machineLearningRuns/{run_id}", headers=stack.auth)
        return run.json()["configs"]["userConfigs"]

    deadline = time.monotonic() + 20
    while user_configs() != {"lr": 0.1} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert user_configs() == {"lr": 0.1}


def test_a_job_runs_and_its_log_reads_through_the_api_port(stack: Stack) -> None:
    # Submitted, placed on the stack's local executor, run (its replica reaches the API
    # through the edge too) and read back, all at the one base URL, by the locked-down users.
    jobs = f"{stack.api}/v1/projects/default/locations/us-central1/customJobs"
    spec = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": "1",
        "containerSpec": {"imageUri": "python", "command": ["python", "-c", "print('hi edge')"]},
    }
    created = httpx.post(
        jobs,
        json={"displayName": "e2e", "jobSpec": {"workerPoolSpecs": [spec]}},
        timeout=10,
        headers=stack.auth,
    )
    assert created.status_code == 200, created.text
    name = created.json()["name"]
    deadline = time.monotonic() + 60
    state = created.json()["state"]
    while state not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") and time.monotonic() < deadline:
        time.sleep(0.5)
        state = httpx.get(f"{stack.api}/v1/{name}", timeout=5, headers=stack.auth).json()["state"]
    assert state == "JOB_STATE_SUCCEEDED"
    log = httpx.get(f"{stack.api}/v1/{name}/logs", timeout=10, headers=stack.auth)
    assert log.status_code == 200, log.text
    assert "hi edge" in log.text
    listed = httpx.get(jobs, timeout=5, headers=stack.auth).json()["customJobs"]
    assert name in [job["name"] for job in listed]


def test_live_streams_pass_the_api_port(stack: Stack) -> None:
    # The console's live updates (server-sent events) pass the edge as they come.
    with httpx.stream(
        "GET", f"{stack.api}/v1/machineLearningRuns:watch", timeout=10, headers=stack.auth
    ) as live:
        assert live.status_code == 200
        assert live.headers["content-type"].startswith("text/event-stream")
        assert next(live.iter_raw())
    status = stack.cli("status")
    assert "API (edge)" in status.stdout
    assert "training" in status.stdout
    assert "executor" in status.stdout
    assert "notifier" in status.stdout
