"""Custom jobs through the whole platform, as users run them: `mldiag up`, the one API
address, the real executor running real processes.

- the real ``google-cloud-aiplatform`` SDK (in its own venv) runs, submits, cancels, lists
  and gets jobs, and gets Google's exceptions for bad requests and failed jobs;
- a two-process JAX job joins ``jax.distributed`` from its environment and sums across
  processes;
- a job killed mid-run restarts and resumes from the checkpoint it wrote to
  ``AIP_CHECKPOINT_DIR``, then writes its model to ``AIP_MODEL_DIR``;
- the training service killed -9 during a batch of jobs: every job still succeeds, and
  every replica ran exactly once.
"""

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from mldiag_schemas.jobs import ENUM_NUMBERS, AcceleratorType, JobState, Strategy
from stacks import Stack, running_stack

pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
TERMINAL = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}
BUCKET = "mldiag-e2e"
VERTEX_SCENARIOS = ("success", "cancel", "failure", "enums")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack("mldiag-jobs-e2e-") as running:
        yield running


def _vertex_python() -> str | None:
    named = os.environ.get("MLDIAG_TEST_VERTEX_SDK_PYTHON")
    if named:
        return named
    local = Path(__file__).parents[3] / ".ci-venvs" / "vertex-sdk" / "bin" / "python"
    return str(local) if local.exists() else None


@pytest.fixture(scope="module")
def vertex(stack: Stack) -> dict[str, Any]:
    """What the real SDK saw, scenario by scenario (one process runs them all)."""
    python = _vertex_python()
    if python is None:
        pytest.skip("set MLDIAG_TEST_VERTEX_SDK_PYTHON to a Python with google-cloud-aiplatform")
    done = subprocess.run(  # fixed argument list
        [python, str(HERE / "vertex_client.py"), stack.api, stack.token, *VERTEX_SCENARIOS],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, f"the Vertex SDK script failed:\n{done.stdout}\n{done.stderr}"
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def _call(method: str, url: str, stack: Stack, **kwargs: Any) -> httpx.Response:
    """One API call, retried while the service behind the edge is restarting (503), as a
    client of a platform that restarts its services should."""
    deadline = time.monotonic() + 60
    while True:
        answer = httpx.request(method, url, headers=stack.auth, timeout=30, **kwargs)
        if answer.status_code != 503 or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


def _create(stack: Stack, pools: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    body = {
        "displayName": f"e2e-{uuid.uuid4().hex[:6]}",
        "jobSpec": {"workerPoolSpecs": pools, **spec},
    }
    url = f"{stack.api}/v1/projects/default/locations/us-central1/customJobs"
    answer = _call("POST", url, stack, json=body)
    assert answer.status_code == 200, answer.text
    job: dict[str, Any] = answer.json()
    return job


def _get(stack: Stack, name: str) -> dict[str, Any]:
    answer = _call("GET", f"{stack.api}/v1/{name}", stack)
    assert answer.status_code == 200, answer.text
    job: dict[str, Any] = answer.json()
    return job


def _wait(stack: Stack, name: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = _get(stack, name)
        if job["state"] in TERMINAL:
            return job
        assert time.monotonic() < deadline, f"{name} still {job['state']} after {timeout}s"
        time.sleep(0.2)


def _python_pool(script: Path, *args: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "machineSpec": {"machineType": "local-small"},
        "replicaCount": str(replicas),
        "containerSpec": {"imageUri": "python", "command": ["python", str(script), *args]},
    }


def _output(stack: Stack, prefix: str) -> Path:
    """Where ``gs://<bucket>/<prefix>`` lives in the embedded file store."""
    return stack.home / "storage" / "gs" / BUCKET / prefix


def test_the_vertex_sdk_runs_a_job_to_success(vertex: dict[str, Any]) -> None:
    seen = vertex["success"]
    assert seen["state"] == "JOB_STATE_SUCCEEDED"
    assert seen["fetchedState"] == "JOB_STATE_SUCCEEDED"
    assert seen["listed"] is True
    assert seen["name"].startswith("projects/default/locations/us-central1/customJobs/")
    assert seen["outputDir"].startswith("gs://mldiag-staging/aiplatform-custom-job-")


def test_the_vertex_sdk_submits_and_cancels(vertex: dict[str, Any]) -> None:
    assert vertex["cancel"]["state"] == "JOB_STATE_CANCELLED"


def test_the_vertex_sdk_sees_a_failed_job_with_its_error(vertex: dict[str, Any]) -> None:
    seen = vertex["failure"]
    assert seen["raised"] == "RuntimeError"
    assert seen["state"] == "JOB_STATE_FAILED"
    assert "exit" in seen["message"].lower()


def test_our_enum_numbers_are_the_sdks(vertex: dict[str, Any]) -> None:
    sdk = vertex["enums"]
    assert ENUM_NUMBERS[JobState] == sdk["JobState"]
    assert ENUM_NUMBERS[AcceleratorType] == sdk["AcceleratorType"]
    assert ENUM_NUMBERS[Strategy] == sdk["Strategy"]


def test_a_two_process_jax_job_sums_across_processes(stack: Stack) -> None:
    prefix = f"jax-{uuid.uuid4().hex[:8]}"
    pool = _python_pool(WORKLOADS / "jax_sum.py")
    job = _create(
        stack, [pool, pool], baseOutputDirectory={"outputUriPrefix": f"gs://{BUCKET}/{prefix}"}
    )
    ended = _wait(stack, job["name"], timeout=180)
    assert ended["state"] == "JOB_STATE_SUCCEEDED", ended
    result = json.loads((_output(stack, prefix) / "model" / "sum.json").read_text())
    assert result == {"sum": 30.0, "processes": 2}


def _workload_process(job_id: str, script: str) -> psutil.Process | None:
    for process in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmdline = process.info["cmdline"] or []
            environ = process.info["environ"] or {}
        except (psutil.Error, KeyError):
            continue
        launched = any(word.endswith(script) for word in cmdline)
        if launched and environ.get("CLOUD_ML_JOB_ID") == job_id and "run" not in cmdline[1:3]:
            return process
    return None


def test_a_killed_job_restarts_and_resumes_from_its_checkpoint(stack: Stack) -> None:
    prefix = f"ckpt-{uuid.uuid4().hex[:8]}"
    job = _create(
        stack,
        [_python_pool(WORKLOADS / "checkpointed.py", "40", "0.2")],
        baseOutputDirectory={"outputUriPrefix": f"gs://{BUCKET}/{prefix}"},
    )
    job_id = job["name"].rsplit("/", 1)[1]
    checkpoint = _output(stack, prefix) / "checkpoints" / "checkpoint.json"
    deadline = time.monotonic() + 60
    while not (checkpoint.exists() and json.loads(checkpoint.read_text())["step"] >= 5):
        assert time.monotonic() < deadline, "the job never reached step 5"
        time.sleep(0.1)
    workload = _workload_process(job_id, "checkpointed.py")
    assert workload is not None, "the workload's process was not found"
    workload.send_signal(signal.SIGKILL)

    ended = _wait(stack, job["name"], timeout=120)
    assert ended["state"] == "JOB_STATE_SUCCEEDED", ended
    starts = [
        json.loads(line)
        for line in (_output(stack, prefix) / "checkpoints" / "starts.jsonl")
        .read_text()
        .splitlines()
    ]
    assert len(starts) == 2, starts
    assert starts[0]["first"] == 0
    assert starts[1]["first"] >= 5  # resumed, not restarted from scratch
    model = json.loads((_output(stack, prefix) / "model" / "model.json").read_text())
    assert model["resumedAt"] == starts[1]["first"]
    replicas = httpx.get(
        f"{stack.api}/v1/{job['name']}/replicas", headers=stack.auth, timeout=30
    ).json()["replicas"]
    assert [replica["attempt"] for replica in replicas] == [1]


def test_jobs_survive_the_training_service_killed(stack: Stack) -> None:
    prefix = f"batch-{uuid.uuid4().hex[:8]}"
    jobs = [
        _create(
            stack,
            [_python_pool(WORKLOADS / "checkpointed.py", "5", "0.1")],
            baseOutputDirectory={"outputUriPrefix": f"gs://{BUCKET}/{prefix}/{number}"},
        )
        for number in range(12)
    ]
    training = stack.service_pid("training")
    os.kill(training, signal.SIGKILL)
    for job in jobs:
        assert _wait(stack, job["name"], timeout=180)["state"] == "JOB_STATE_SUCCEEDED"
    for number in range(12):
        starts = _output(stack, f"{prefix}/{number}") / "checkpoints" / "starts.jsonl"
        assert len(starts.read_text().splitlines()) == 1, f"job {number} ran more than once"
    assert stack.service_pid("training") != training  # the supervisor restarted it


def test_logs_of_a_job_through_the_cli(stack: Stack) -> None:
    job = _create(
        stack,
        [_python_pool(WORKLOADS / "checkpointed.py", "3", "0.05")],
        baseOutputDirectory={"outputUriPrefix": f"gs://{BUCKET}/logs-{uuid.uuid4().hex[:6]}"},
    )
    _wait(stack, job["name"])
    logs = stack.cli("jobs", "logs", job["name"])  # its us-central1 parent
    assert logs.returncode == 0, logs.stderr
    assert "done: 3 steps" in logs.stdout
