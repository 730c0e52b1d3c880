"""examples/ run as they are, as a user runs them, against a stack `mldiag up` started.

Each example is a subprocess given only what its docstring tells a user to set (the API URL
and a token; the official SDK's DIAGON_/OTEL_ variables), and what it claims to produce is
read back through the API: the runs, their final state, their metrics, their logs, and the
event the watcher printed (caused here by a NaN loss).
"""

import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from queue import Empty, Queue
from typing import Any, TypeVar

import httpx
import pytest

from stacks import Stack, running_stack
from support import with_credentials

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
T = TypeVar("T")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack("mldiag-examples-e2e-") as running:
        yield running


@pytest.fixture
def env(stack: Stack, tmp_path: Path) -> dict[str, str]:
    """A user's environment: the API URL and a token, nothing of the test's own."""
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MLDIAG_", "DIAGON_", "OTEL_", "RUN_WORKLOAD_ID"))
    }
    return {
        **inherited,
        "MLDIAG_API_URL": stack.api,
        "MLDIAG_TOKEN": stack.token,
        # A spool of its own, so no batch of another test is replayed into this stack.
        "MLDIAG_SPOOL_DIR": str(tmp_path / "spool"),
        "JAX_PLATFORMS": "cpu",
    }


def _run(
    command: list[str], env: dict[str, str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(  # fixed argument list
        command, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done


def _until(read: Callable[[], T], ready: Callable[[T], bool], timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if ready(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.3)


def _get(stack: Stack, path: str) -> dict[str, Any]:
    response = httpx.get(f"{stack.api}{path}", headers=stack.auth, timeout=10)
    if response.status_code == 404:
        return {}
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found


def _points(stack: Stack, run_id: str, metric: str) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = _get(
        stack, f"/v1/machineLearningRuns/{run_id}/metrics/{metric}"
    ).get("points", [])
    return points


def _state(stack: Stack, run_id: str) -> str:
    return str(_get(stack, f"/v1/machineLearningRuns/{run_id}").get("state", ""))


def test_the_jax_loop_records_loss_step_time_checkpoints_and_completes(
    stack: Stack, env: dict[str, str]
) -> None:
    run_id = f"examples-jax-{uuid.uuid4().hex[:8]}"
    done = _run(
        [sys.executable, str(EXAMPLES / "jax_training.py"), "--steps=40", "--checkpoint-every=20"],
        {**env, "MLDIAG_RUN_ID": run_id},
    )
    assert f"run {run_id}" in done.stdout
    loss = _until(lambda: _points(stack, run_id, "loss"), lambda p: len(p) >= 40)
    assert [p["step"] for p in loss] == list(range(40))
    assert loss[-1]["value"] < loss[0]["value"] / 10  # it learned
    step_time = _points(stack, run_id, "step_time")
    assert len(step_time) == 40
    assert all(p["value"] > 0 for p in step_time)
    checkpoints = _until(lambda: _points(stack, run_id, "checkpoint_time"), lambda p: len(p) >= 2)
    assert [p["step"] for p in checkpoints] == [19, 39]
    assert (
        _until(lambda: _state(stack, run_id), lambda s: s == "STATE_COMPLETED") == "STATE_COMPLETED"
    )
    run = _get(stack, f"/v1/machineLearningRuns/{run_id}")
    assert run["runSet"] == "examples"
    assert run["configs"]["userConfigs"]["steps"] == 40


def test_mldiag_run_wraps_the_unmodified_script_as_its_readme_says(
    stack: Stack, env: dict[str, str]
) -> None:
    readme = (EXAMPLES / "mldiag_run" / "README.md").read_text()
    line = next(line for line in readme.splitlines() if line.startswith("mldiag run "))
    assert line.endswith("-- python examples/mldiag_run/train.py --steps 100")
    run_id = f"examples-wrapped-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "mldiag.cli", "run", f"--run-id={run_id}"]
    command += [
        "--run-set=examples",
        "--",
        sys.executable,
        str(EXAMPLES / "mldiag_run" / "train.py"),
    ]
    done = _run([*command, "--steps=10", "--sleep=0"], env)
    assert "step 9 loss" in done.stdout  # passed through as the script wrote it
    assert (
        _until(lambda: _state(stack, run_id), lambda s: s == "STATE_COMPLETED") == "STATE_COMPLETED"
    )

    def texts() -> list[str]:
        entries = _get(stack, f"/v1/machineLearningRuns/{run_id}/logs?stream=stdout")
        return [entry["text"] for entry in entries.get("entries", [])]

    lines = _until(texts, lambda found: "training done" in found)
    printed = [f"step {step} loss {2.0 * math.exp(-step / 25) + 0.1:.4f}" for step in range(10)]
    assert lines == [*printed, "training done"]


def test_the_otlp_exporter_writes_points_with_their_steps(
    stack: Stack, env: dict[str, str]
) -> None:
    run_id = f"examples-otlp-{uuid.uuid4().hex[:8]}"
    done = _run(
        [sys.executable, str(EXAMPLES / "otlp_exporter.py"), f"--run-id={run_id}", "--steps=5"],
        env,
    )
    assert f"exported 5 steps to run {run_id}" in done.stdout
    loss = _until(lambda: _points(stack, run_id, "loss"), lambda p: len(p) >= 5)
    assert [p["step"] for p in loss] == [1, 2, 3, 4, 5]
    assert loss[0]["labels"] == {"phase": "train"}
    assert len(_points(stack, run_id, "learning_rate")) == 5
    assert _points(stack, run_id, "training_step") == []  # the step, not a metric


def _otlp_grpc_port(stack: Stack) -> int:
    """The OTLP/gRPC port `mldiag up` gave ingestion (state.json keeps only its HTTP URL):
    read from the environment the supervisor started it with."""
    environ = Path(f"/proc/{stack.service_pid('ingestion')}/environ").read_bytes()
    variables = dict(item.partition(b"=")[::2] for item in environ.split(b"\0") if item)
    return int(variables[b"MLDIAG_INGESTION_OTLP_GRPC_PORT"])


def test_the_official_sdk_records_into_mldiag_with_environment_variables_only(
    stack: Stack, env: dict[str, str]
) -> None:
    python = os.environ.get("MLDIAG_TEST_OFFICIAL_SDK_PYTHON")
    if not python:
        pytest.skip("set MLDIAG_TEST_OFFICIAL_SDK_PYTHON to a Python with the SDK and jax")
    grpc_port = _otlp_grpc_port(stack)
    official = {
        **env,
        "DIAGON_BASE_URL": with_credentials(stack.api, stack.token),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{grpc_port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{stack.token}",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
    }
    workload = f"examples-official-{uuid.uuid4().hex[:8]}"
    done = _run(
        [python, str(EXAMPLES / "official_sdk.py"), f"--workload={workload}", "--steps=3"],
        official,
    )
    run_id = done.stdout.split()[-1].rsplit("/", 1)[-1]
    loss = _until(lambda: _points(stack, run_id, "loss"), lambda p: len(p) >= 3)
    assert [(p["step"], p["value"]) for p in loss] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    run = _until(
        lambda: _get(stack, f"/v1/machineLearningRuns/{run_id}"),
        lambda r: bool(r.get("configs", {}).get("userConfigs")),
    )
    assert run["configs"]["userConfigs"] == {"learning_rate": 0.01, "optimizer": {"name": "adam"}}


def _lines(process: subprocess.Popen[str]) -> "Queue[str]":
    """The process's stdout lines as they come, read on a thread."""
    lines: Queue[str] = Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def test_the_watcher_prints_the_event_a_nan_loss_opens(stack: Stack, env: dict[str, str]) -> None:
    run_id = f"examples-watch-{uuid.uuid4().hex[:8]}"
    created = httpx.post(
        f"{stack.api}/v1/machineLearningRuns",
        json={"runId": run_id, "displayName": "watched"},
        headers=stack.auth,
        timeout=10,
    )
    assert created.status_code == 200, created.text
    watcher = subprocess.Popen(  # fixed argument list
        [sys.executable, str(EXAMPLES / "watch_events.py"), run_id, "--count=1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _lines(watcher)
        assert lines.get(timeout=30) == f"watching {run_id}"
        series = [{"name": "loss", "steps": [1, 2, 3, 4], "values": [0.9, 0.8, math.nan, 0.7]}]
        written = httpx.post(
            f"{stack.api}/v1/machineLearningRuns/{run_id}/metrics:write",
            content=json.dumps({"series": series}),  # json.dumps writes NaN as the API takes it
            headers=stack.auth,
            timeout=10,
        )
        assert written.status_code == 202, written.text
        try:
            printed = lines.get(timeout=90)
        except Empty:
            pytest.fail("the watcher printed no event")
        assert watcher.wait(timeout=10) == 0  # --count=1: it exits after the first event
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    start_time, kind, state, severity, *display = printed.split(" ")
    assert (kind, state) == ("NUMERICAL_INSTABILITY", "OPEN")
    [event] = _get(stack, f"/v1/machineLearningRuns/{run_id}/monitoredEvents")["events"]
    assert (event["startTime"], event["type"], event["severity"]) == (start_time, kind, severity)
    assert " ".join(display) == event["displayName"]
