"""Every custom job is a run: the registry creates it from ``CustomJobCreated`` (RunCreated
after commit) and mirrors ``CustomJobStateChanged`` into its phase, idempotently and with
terminal phases sticky. Against the real registry app, NATS and PostgreSQL."""

import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_run_registry.jobs.service import (
    MAX_LABELS,
    ending,
    job_run_request,
    with_job_labels,
)
from mldiag_schemas import bus
from mldiag_schemas.jobs import CustomJob, JobState, RpcStatus
from mldiag_schemas.replicas import CustomJobCreated, CustomJobStateChanged
from mldiag_schemas.runs import RunCreated, RunPhase, RunPhaseChanged
from support import read_messages, wait_until

PROJECT, LOCATION = "acme", "us-central1"
CREATED = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)


def _job(job_id: str, **spec: Any) -> CustomJob:
    return CustomJob.model_validate(
        {
            "name": f"projects/{PROJECT}/locations/{LOCATION}/customJobs/{job_id}",
            "displayName": "train-resnet",
            "labels": {"team": "vision"},
            "state": "JOB_STATE_QUEUED",
            "createTime": CREATED.isoformat(),
            "jobSpec": {
                "workerPoolSpecs": [
                    {
                        "machineSpec": {"machineType": "n1-standard-4"},
                        "replicaCount": "1",
                        "containerSpec": {
                            "imageUri": "python:3.12",
                            "command": ["python", "train.py"],
                            "args": ["--epochs", "3"],
                            "env": [{"name": "SECRET_THING", "value": "hunter2"}],
                        },
                    },
                    {
                        "machineSpec": {
                            "machineType": "a2-highgpu-1g",
                            "acceleratorType": "NVIDIA_TESLA_A100",
                            "acceleratorCount": 1,
                        },
                        "replicaCount": "2",
                        "pythonPackageSpec": {
                            "executorImageUri": "pytorch:2",
                            "packageUris": ["gs://b/trainer-0.1.tar.gz"],
                            "pythonModule": "trainer.task",
                        },
                    },
                ],
                "scheduling": {"timeout": "3600s"},
                "baseOutputDirectory": {"outputUriPrefix": "gs://b/out"},
                **spec,
            },
        }
    )


def _created(job_id: str, **spec: Any) -> CustomJobCreated:
    return CustomJobCreated(
        job_id=job_id,
        project=PROJECT,
        location=LOCATION,
        job=_job(job_id, **spec),
        run_set=spec.get("experiment") or "training-jobs",
    )


def _changed(
    job_id: str,
    previous: JobState,
    state: JobState,
    *,
    error: RpcStatus | None = None,
    restarts: int = 0,
) -> CustomJobStateChanged:
    return CustomJobStateChanged(
        job_id=job_id,
        project=PROJECT,
        location=LOCATION,
        previous_state=previous,
        state=state,
        error=error,
        restarts=restarts,
    )


def _path(job_id: str) -> str:
    return f"/v1/projects/{PROJECT}/locations/{LOCATION}/machineLearningRuns/{job_id}"


async def _run(api: httpx.AsyncClient, job_id: str) -> dict[str, Any] | None:
    response = await api.get(_path(job_id))
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# --- the mapping, without servers -------------------------------------------------------------


def test_a_jobs_run_names_the_job_and_shows_what_it_runs() -> None:
    request = job_run_request(_created("123456", experimentRun="resnet-lr-0-1"))

    assert request.run_id == "123456"
    assert request.display_name == "resnet-lr-0-1"  # experimentRun wins over displayName
    assert request.labels == {
        "team": "vision",
        "mldiag-job": "custom-job",
        "mldiag-job-state": "queued",
    }
    assert request.orchestrator.value == "CUSTOM"
    custom = request.workload_details.custom
    assert custom is not None
    assert custom.id == f"projects/{PROJECT}/locations/{LOCATION}/customJobs/123456"
    assert (custom.display_name, custom.create_time) == ("train-resnet", CREATED)
    assert request.workload_id == custom.id
    software = request.configs.software_configs["customJob"]
    assert isinstance(software, dict)
    assert software["workerPools"] == [
        {
            "pool": 0,
            "role": "chief",
            "imageUri": "python:3.12",
            "command": ["python", "train.py"],
            "args": ["--epochs", "3"],
            "env": ["SECRET_THING"],  # names only: values may be secrets
        },
        {
            "pool": 1,
            "role": "worker",
            "executorImageUri": "pytorch:2",
            "packageUris": ["gs://b/trainer-0.1.tar.gz"],
            "pythonModule": "trainer.task",
            "args": [],
            "env": [],
        },
    ]
    assert software["baseOutputDirectory"] == "gs://b/out"
    assert "hunter2" not in request.model_dump_json()
    assert request.configs.hardware_configs == {
        "workerPools": [
            {"pool": 0, "role": "chief", "replicaCount": 1, "machineType": "n1-standard-4"},
            {
                "pool": 1,
                "role": "worker",
                "replicaCount": 2,
                "machineType": "a2-highgpu-1g",
                "acceleratorType": "NVIDIA_TESLA_A100",
                "acceleratorCount": 1,
            },
        ],
        "replicaCount": 3,
    }


def test_the_jobs_own_labels_are_never_dropped_for_mldiags() -> None:
    full = {f"k{i}": "v" for i in range(MAX_LABELS)}
    assert with_job_labels(full, {"mldiag-job": "custom-job"}) == full
    almost = {f"k{i}": "v" for i in range(MAX_LABELS - 1)}
    merged = with_job_labels(almost, {"mldiag-job": "custom-job", "mldiag-job-state": "running"})
    assert len(merged) == MAX_LABELS
    assert merged["mldiag-job"] == "custom-job"


@pytest.mark.parametrize(
    ("state", "error", "phase", "code", "reason"),
    [
        (JobState.SUCCEEDED, None, RunPhase.COMPLETED, None, None),
        (JobState.RUNNING, None, RunPhase.ACTIVE, None, None),
        (JobState.CANCELLING, None, RunPhase.ACTIVE, None, None),
        (
            JobState.FAILED,
            RpcStatus(code=13, message="x"),
            RunPhase.FAILED,
            "INTERNAL",
            "JOB_FAILED",
        ),
        (
            JobState.FAILED,
            RpcStatus(code=4, message="timeout"),
            RunPhase.FAILED,
            "DEADLINE_EXCEEDED",
            "JOB_FAILED",
        ),
        (JobState.CANCELLED, None, RunPhase.FAILED, "CANCELLED", "JOB_CANCELLED"),
        (JobState.EXPIRED, None, RunPhase.FAILED, "DEADLINE_EXCEEDED", "JOB_EXPIRED"),
    ],
)
def test_each_job_state_has_one_run_phase(
    state: JobState, error: RpcStatus | None, phase: RunPhase, code: str | None, reason: str | None
) -> None:
    got, details = ending(state, error)
    assert got is phase
    assert (details.code if details else None, details.reason if details else None) == (
        code,
        reason,
    )


# --- against the registry ---------------------------------------------------------------------

connected = pytest.mark.connected


@connected
async def test_a_created_job_gets_its_run_once_and_runcreated_goes_out(
    api: httpx.AsyncClient, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    job_id = str(uuid.uuid4().int)[:18]
    created = _created(job_id, experiment="resnets")
    await publisher.publish(created)
    run = await wait_until(lambda: _run(api, job_id), lambda run: run is not None)
    assert run is not None
    assert run["name"] == f"projects/{PROJECT}/locations/{LOCATION}/machineLearningRuns/{job_id}"
    assert run["runSet"] == "resnets"
    assert run["displayName"] == "train-resnet"
    assert run["runPhase"] == "ACTIVE"
    assert run["orchestrator"] == "CUSTOM"
    assert run["labels"]["mldiag-job"] == "custom-job"
    assert run["workloadDetails"]["custom"]["id"].endswith(f"/customJobs/{job_id}")
    assert run["configs"]["hardwareConfigs"]["replicaCount"] == 3

    # The same fact again, under a new envelope id (JetStream's dedupe does not help), and a
    # state change only after it: the run is untouched by the repeat.
    await publisher.publish(created.model_copy(update={"event_id": uuid.uuid4()}))
    await publisher.publish(_changed(job_id, JobState.QUEUED, JobState.PENDING))
    await wait_until(
        lambda: _run(api, job_id),
        lambda run: run is not None and run["labels"]["mldiag-job-state"] == "pending",
    )
    announced = await read_messages(nats_settings, bus.RUN_CREATED, RunCreated)
    assert [message.run.run_id for message in announced] == [job_id]


@connected
async def test_job_states_reach_the_run_and_an_ended_run_stays_ended(
    api: httpx.AsyncClient, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    job_id = str(uuid.uuid4().int)[:18]
    # The state first: it waits (retried) until the run exists.
    await publisher.publish(_changed(job_id, JobState.PENDING, JobState.RUNNING))
    await publisher.publish(_created(job_id))
    await publisher.publish(_changed(job_id, JobState.RUNNING, JobState.RUNNING, restarts=2))
    run = await wait_until(
        lambda: _run(api, job_id),
        lambda run: run is not None and run["labels"].get("mldiag-job-restarts") == "2",
    )
    assert run is not None
    assert run["runPhase"] == "ACTIVE"
    assert run["labels"]["mldiag-job-state"] == "running"

    failed = _changed(
        job_id,
        JobState.RUNNING,
        JobState.FAILED,
        error=RpcStatus(code=13, message="workerpool0-0 exited with status 3: ValueError: nan"),
        restarts=3,
    )
    await publisher.publish(failed)
    run = await wait_until(
        lambda: _run(api, job_id), lambda run: run is not None and run["runPhase"] == "FAILED"
    )
    assert run is not None
    assert run["errorDetails"] == {
        "code": "INTERNAL",
        "message": "workerpool0-0 exited with status 3: ValueError: nan",
        "reason": "JOB_FAILED",
        "stackTrace": None,
    }
    assert run["labels"]["mldiag-job-state"] == "failed"
    assert run["labels"]["mldiag-job-restarts"] == "3"
    assert run["endTime"]
    etag = run["etag"]

    # Late and repeated facts change nothing: the run ended FAILED.
    await publisher.publish(failed.model_copy(update={"event_id": uuid.uuid4()}))
    await publisher.publish(_changed(job_id, JobState.FAILED, JobState.SUCCEEDED))
    await publisher.publish(_changed(job_id, JobState.QUEUED, JobState.RUNNING))
    marker = str(uuid.uuid4().int)[:18]  # a fact published after them, to know they are done
    await publisher.publish(_created(marker))
    await wait_until(lambda: _run(api, marker), lambda run: run is not None)
    after = await _run(api, job_id)
    assert after is not None
    assert (after["etag"], after["runPhase"]) == (etag, "FAILED")
    changes = await read_messages(nats_settings, bus.RUN_PHASE_CHANGED, RunPhaseChanged)
    assert [change.run.run_phase for change in changes if change.run.run_id == job_id] == [
        RunPhase.FAILED
    ]


@connected
async def test_a_cancelled_job_ends_its_run_as_cancelled_not_crashed(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    job_id = str(uuid.uuid4().int)[:18]
    await publisher.publish(_created(job_id))
    await publisher.publish(_changed(job_id, JobState.RUNNING, JobState.CANCELLING))
    await publisher.publish(
        _changed(
            job_id,
            JobState.CANCELLING,
            JobState.CANCELLED,
            error=RpcStatus(code=1, message="CustomJob was cancelled."),
        )
    )
    run = await wait_until(
        lambda: _run(api, job_id), lambda run: run is not None and run["runPhase"] != "ACTIVE"
    )
    assert run is not None
    assert run["runPhase"] == "FAILED"
    assert run["errorDetails"] == {
        "code": "CANCELLED",
        "message": "CustomJob was cancelled.",
        "reason": "JOB_CANCELLED",
        "stackTrace": None,
    }
    assert run["labels"]["mldiag-job-state"] == "cancelled"


@connected
async def test_a_succeeded_job_completes_its_run(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    job_id = str(uuid.uuid4().int)[:18]
    await publisher.publish(_created(job_id))
    await publisher.publish(_changed(job_id, JobState.RUNNING, JobState.SUCCEEDED))
    run = await wait_until(
        lambda: _run(api, job_id), lambda run: run is not None and run["runPhase"] != "ACTIVE"
    )
    assert run is not None
    assert run["runPhase"] == "COMPLETED"
    assert run.get("errorDetails") is None
