"""A tuning job's runs: the study's run is created from ``TuningJobCreated`` with a readable
study spec as configs, its phase and best trial follow ``TuningJobStateChanged`` (the best
value also as a best-so-far metric), a trial's run carries its parameters and labels, and
``TrialEnded`` records the trial's outcome, even on a run its cancelled job already ended.
Redeliveries change nothing; facts that arrive before their run wait for it. Against the real
registry app, NATS and PostgreSQL."""

import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_run_registry.jobs.service import job_run_request
from mldiag_run_registry.jobs.tuning import (
    best_configs,
    best_metric_name,
    best_points,
    study_run_request,
    trial_outcome,
)
from mldiag_schemas import bus
from mldiag_schemas.jobs import CustomJob, JobState, RpcStatus
from mldiag_schemas.replicas import CustomJobCreated, CustomJobStateChanged
from mldiag_schemas.runs import RunCreated
from mldiag_schemas.tuning import (
    HyperparameterTuningJob,
    Trial,
    TrialEnded,
    TrialOfJob,
    TuningJobCreated,
    TuningJobStateChanged,
)
from support import read_messages, wait_until

PROJECT, LOCATION = "acme", "us-central1"
CREATED = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
STUDY = "resnet lr sweep"

TRIAL_JOB_SPEC: dict[str, Any] = {
    "workerPoolSpecs": [
        {
            "machineSpec": {"machineType": "n1-standard-4"},
            "replicaCount": "1",
            "containerSpec": {"imageUri": "python:3.12", "command": ["python", "train.py"]},
        }
    ]
}


@pytest.fixture
def nats_settings(nats_url: str, namespace: str) -> NatsSettings:
    """Quick retries, as everywhere in the tests, but eight attempts instead of three: a fact
    that comes before its run is retried until the run's create is handled, which on a busy
    machine takes longer than three attempts 50 and 100 ms apart (6.35 s here)."""
    return NatsSettings(
        url=nats_url, namespace=namespace, max_deliver=8, retry_backoff_seconds=0.05
    )


def _new_id() -> str:
    return str(uuid.uuid4().int)[:18]


def _tuning_job(job_id: str) -> HyperparameterTuningJob:
    return HyperparameterTuningJob.model_validate(
        {
            "name": f"projects/{PROJECT}/locations/{LOCATION}/hyperparameterTuningJobs/{job_id}",
            "displayName": STUDY,
            "labels": {"team": "vision"},
            "state": "JOB_STATE_QUEUED",
            "createTime": CREATED.isoformat(),
            "maxTrialCount": 8,
            "parallelTrialCount": 2,
            "studySpec": {
                "algorithm": 3,  # RANDOM_SEARCH, as the SDK sends it (enum-encoding=int)
                "metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
                "parameters": [
                    {
                        "parameterId": "lr",
                        "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.1},
                        "scaleType": "UNIT_LOG_SCALE",
                    },
                    {
                        "parameterId": "batch",
                        "discreteValueSpec": {"values": [16, 32, 64]},
                        "scaleType": "UNIT_LINEAR_SCALE",
                    },
                    {
                        "parameterId": "optimizer",
                        "categoricalValueSpec": {"values": ["adam", "sgd"]},
                        "conditionalParameterSpecs": [
                            {
                                "parentCategoricalValues": {"values": ["sgd"]},
                                "parameterSpec": {
                                    "parameterId": "momentum_steps",
                                    "integerValueSpec": {"minValue": "1", "maxValue": "10"},
                                },
                            }
                        ],
                    },
                ],
                "medianAutomatedStoppingSpec": {"useElapsedDuration": False},
            },
            "trialJobSpec": TRIAL_JOB_SPEC,
        }
    )


def _study_created(job_id: str) -> TuningJobCreated:
    return TuningJobCreated(
        job_id=job_id,
        project=PROJECT,
        location=LOCATION,
        job=_tuning_job(job_id),
        run_set=STUDY,
    )


def _trial(trial_id: str, trial_job: str, accuracy: float | None, **more: Any) -> Trial:
    body: dict[str, Any] = {
        "id": trial_id,
        "state": "SUCCEEDED",
        "parameters": [
            {"parameterId": "lr", "value": 0.01},
            {"parameterId": "optimizer", "value": "adam"},
        ],
        "customJob": f"projects/{PROJECT}/locations/{LOCATION}/customJobs/{trial_job}",
        **more,
    }
    if accuracy is not None:
        body["finalMeasurement"] = {
            "stepCount": "100",
            "metrics": [{"metricId": "accuracy", "value": accuracy}],
        }
    return Trial.model_validate(body)


def _study_changed(
    job_id: str,
    state: JobState,
    best: Trial | None = None,
    *,
    succeeded: int = 0,
    infeasible: int = 0,
) -> TuningJobStateChanged:
    return TuningJobStateChanged(
        job_id=job_id,
        project=PROJECT,
        location=LOCATION,
        previous_state=JobState.RUNNING,
        state=state,
        best_trial=best,
        trials_succeeded=succeeded,
        trials_infeasible=infeasible,
    )


def _trial_job_created(study_id: str, job_id: str, trial_id: str) -> CustomJobCreated:
    job = CustomJob.model_validate(
        {
            "name": f"projects/{PROJECT}/locations/{LOCATION}/customJobs/{job_id}",
            "displayName": f"{STUDY}-trial-{trial_id}",
            "state": "JOB_STATE_QUEUED",
            "createTime": CREATED.isoformat(),
            "jobSpec": TRIAL_JOB_SPEC,
        }
    )
    return CustomJobCreated(
        job_id=job_id,
        project=PROJECT,
        location=LOCATION,
        job=job,
        run_set=STUDY,
        trial=TrialOfJob(
            tuning_job_id=study_id,
            study_display_name=STUDY,
            trial_id=trial_id,
            parameters={"lr": 0.01, "batch": 32, "optimizer": "adam"},
        ),
    )


def _trial_ended(study_id: str, trial: Trial, *, stopped_early: bool = False) -> TrialEnded:
    return TrialEnded(
        tuning_job_id=study_id,
        trial_job_id=trial.custom_job.rsplit("/", 1)[-1],
        trial=trial,
        stopped_early=stopped_early,
    )


def _job_changed(job_id: str, state: JobState, error: RpcStatus | None = None) -> Any:
    return CustomJobStateChanged(
        job_id=job_id,
        project=PROJECT,
        location=LOCATION,
        previous_state=JobState.RUNNING,
        state=state,
        error=error,
    )


def _path(run_id: str) -> str:
    return f"/v1/projects/{PROJECT}/locations/{LOCATION}/machineLearningRuns/{run_id}"


async def _run(api: httpx.AsyncClient, run_id: str) -> dict[str, Any] | None:
    response = await api.get(_path(run_id))
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _points(api: httpx.AsyncClient, run_id: str, metric: str) -> list[tuple[int, float]]:
    response = await api.get(f"{_path(run_id)}/metrics/{metric}")
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    return [(point["step"], point["value"]) for point in response.json()["points"]]


def _user(run: dict[str, Any] | None) -> dict[str, Any]:
    assert run is not None
    configs: dict[str, Any] = run["configs"]["userConfigs"]
    return configs


async def _settled(api: httpx.AsyncClient, publisher: Publisher) -> None:
    """Wait until the facts published so far on the tuning durable are applied: a study
    created after them has its run (one durable keeps them in order)."""
    marker = _new_id()
    await publisher.publish(_study_created(marker))
    await wait_until(lambda: _run(api, marker), lambda run: run is not None)


async def _trials_settled(api: httpx.AsyncClient, publisher: Publisher) -> None:
    """Wait until the trials' ends published so far are applied: a trial's end published
    after them is (one durable keeps them in order)."""
    marker = _new_id()
    await publisher.publish(_trial_job_created(_new_id(), marker, "1"))
    await publisher.publish(_trial_ended(marker, _trial("1", marker, 0.1)))
    await wait_until(
        lambda: _run(api, marker), lambda run: run is not None and "trial_state" in _user(run)
    )


# --- the mapping, without servers -------------------------------------------------------------


def test_the_study_run_names_the_tuning_job_and_reads_its_spec() -> None:
    request = study_run_request(_study_created("777"))

    assert request.run_id == "777"
    assert (request.display_name, request.run_set) == (STUDY, STUDY)
    assert request.labels == {
        "team": "vision",
        "mldiag-job": "tuning-job",
        "mldiag-job-state": "queued",
        "mldiag-tuning-job": "777",
    }
    custom = request.workload_details.custom
    assert custom is not None
    assert custom.id == f"projects/{PROJECT}/locations/{LOCATION}/hyperparameterTuningJobs/777"
    assert request.workload_id == custom.id
    assert request.configs.user_configs == {
        "algorithm": "RANDOM_SEARCH",
        "max_trial_count": 8,
        "parallel_trial_count": 2,
        "max_failed_trial_count": 0,
        "measurement_selection_type": "LAST_MEASUREMENT",  # UNSPECIFIED means the last
        "median_stopping": "steps",
        "metrics": {"accuracy": "MAXIMIZE"},
        "parameters": {
            "lr": "DOUBLE [0.0001, 0.1] UNIT_LOG_SCALE",
            "batch": "DISCRETE {16, 32, 64} UNIT_LINEAR_SCALE",
            "optimizer": "CATEGORICAL {adam, sgd}",
            "momentum_steps": "INTEGER [1, 10] SCALE_TYPE_UNSPECIFIED when optimizer in {sgd}",
        },
    }
    software = request.configs.software_configs["trialJob"]
    assert isinstance(software, dict)
    assert software["workerPools"] == [
        {
            "pool": 0,
            "role": "chief",
            "imageUri": "python:3.12",
            "command": ["python", "train.py"],
            "args": [],
            "env": [],
        }
    ]
    assert request.configs.hardware_configs["replicaCount"] == 1


def test_a_trials_run_carries_its_parameters_and_its_study() -> None:
    request = job_run_request(_trial_job_created("777", "888", "3"))

    assert request.run_set == STUDY
    assert request.labels["mldiag-tuning-job"] == "777"
    assert request.labels["mldiag-trial"] == "3"
    assert request.labels["mldiag-job"] == "custom-job"
    assert request.configs.user_configs == {
        "lr": 0.01,
        "batch": 32,
        "optimizer": "adam",
        "trial_id": "3",
        "tuning_job_id": "777",
    }
    assert "customJob" in request.configs.software_configs  # still a custom job's run


def test_the_best_trial_is_configs_and_a_point_at_the_finished_count() -> None:
    best = _trial("2", "9002", 0.91)
    changed = _study_changed("777", JobState.RUNNING, best, succeeded=2, infeasible=1)

    assert best_configs(changed) == {
        "best_trial_id": "2",
        "best_trial_run": "9002",
        "best_params": {"lr": 0.01, "optimizer": "adam"},
        "best_accuracy": 0.91,
        "trials_finished": 3,
    }
    points = best_points(changed)
    assert points is not None
    assert [(s.name, s.steps, s.values) for s in points.series] == [("best_accuracy", [3], [0.91])]
    # Another message at the same count is the same point (stored once).
    again = best_points(changed.model_copy(update={"event_id": uuid.uuid4()}))
    assert again is not None
    assert again.event_id == points.event_id
    later = best_points(changed.model_copy(update={"trials_succeeded": 3}))
    assert later is not None
    assert later.event_id != points.event_id
    assert best_configs(_study_changed("777", JobState.RUNNING)) == {}
    assert best_metric_name("val/top-1 acc@5") == "best_val/top-1_acc_5"


def test_a_trials_outcome_says_how_it_ended() -> None:
    stopped = _trial_ended("777", _trial("4", "9004", 0.5), stopped_early=True)
    assert trial_outcome(stopped) == {
        "trial_state": "SUCCEEDED",
        "stopped_early": True,
        "final_accuracy": 0.5,
    }
    failed = _trial(
        "5", "9005", None, state="INFEASIBLE", infeasibleReason="no objective metric reported"
    )
    assert trial_outcome(_trial_ended("777", failed)) == {
        "trial_state": "INFEASIBLE",
        "stopped_early": False,
        "infeasible_reason": "no objective metric reported",
    }


# --- against the registry ---------------------------------------------------------------------

connected = pytest.mark.connected


@connected
async def test_a_tuning_job_gets_its_study_run_once(
    api: httpx.AsyncClient, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    study = _new_id()
    created = _study_created(study)
    await publisher.publish(created)
    run = await wait_until(lambda: _run(api, study), lambda run: run is not None)
    assert run is not None
    assert (run["displayName"], run["runSet"], run["runPhase"]) == (STUDY, STUDY, "ACTIVE")
    assert run["labels"]["mldiag-tuning-job"] == study
    assert run["labels"]["mldiag-job"] == "tuning-job"
    assert run["workloadDetails"]["custom"]["id"].endswith(f"/hyperparameterTuningJobs/{study}")
    assert _user(run)["parameters"]["lr"] == "DOUBLE [0.0001, 0.1] UNIT_LOG_SCALE"
    assert _user(run)["metrics"] == {"accuracy": "MAXIMIZE"}

    await publisher.publish(created.model_copy(update={"event_id": uuid.uuid4()}))
    await _settled(api, publisher)
    after = await _run(api, study)
    assert after is not None
    assert after["etag"] == run["etag"]
    announced = await read_messages(nats_settings, bus.RUN_CREATED, RunCreated)
    assert [message.run.run_id for message in announced].count(study) == 1


@connected
async def test_the_best_trial_is_recorded_once_and_never_goes_back(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    study = _new_id()
    await publisher.publish(_study_created(study))
    first = _study_changed(study, JobState.RUNNING, _trial("1", "9001", 0.80), succeeded=1)
    second = _study_changed(
        study, JobState.RUNNING, _trial("3", "9003", 0.90), succeeded=2, infeasible=1
    )
    await publisher.publish(first)
    await publisher.publish(second)
    # Redeliveries of both, the older one last: the newer best stands, no point twice.
    await publisher.publish(second.model_copy(update={"event_id": uuid.uuid4()}))
    await publisher.publish(first.model_copy(update={"event_id": uuid.uuid4()}))
    await _settled(api, publisher)

    run = await _run(api, study)
    user = _user(run)
    assert {key: user[key] for key in user if key.startswith(("best", "trials"))} == {
        "best_trial_id": "3",
        "best_trial_run": "9003",
        "best_accuracy": 0.90,
        "best_params": {"lr": 0.01, "optimizer": "adam"},
        "trials_finished": 3,
    }
    assert run is not None
    assert run["runPhase"] == "ACTIVE"
    assert await _points(api, study, "best_accuracy") == [(1, 0.80), (3, 0.90)]

    # The job ends with its final best: recorded, and the run completes.
    final = _study_changed(
        study, JobState.SUCCEEDED, _trial("6", "9006", 0.95), succeeded=7, infeasible=1
    )
    await publisher.publish(final)
    run = await wait_until(
        lambda: _run(api, study), lambda run: run is not None and run["runPhase"] != "ACTIVE"
    )
    assert run is not None
    assert run["runPhase"] == "COMPLETED"
    assert run["labels"]["mldiag-job-state"] == "succeeded"
    assert (_user(run)["best_trial_id"], _user(run)["best_accuracy"]) == ("6", 0.95)
    etag = run["etag"]
    await publisher.publish(final.model_copy(update={"event_id": uuid.uuid4()}))
    await _settled(api, publisher)
    after = await _run(api, study)
    assert after is not None
    assert after["etag"] == etag
    assert await _points(api, study, "best_accuracy") == [(1, 0.80), (3, 0.90), (8, 0.95)]


@connected
async def test_a_failed_tuning_job_fails_its_run_like_a_custom_job(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    study = _new_id()
    await publisher.publish(_study_created(study))
    error = RpcStatus(code=9, message="3 trials failed (maxFailedTrialCount 3)")
    failed = _study_changed(study, JobState.FAILED, infeasible=3).model_copy(
        update={"error": error}
    )
    await publisher.publish(failed)
    run = await wait_until(
        lambda: _run(api, study), lambda run: run is not None and run["runPhase"] != "ACTIVE"
    )
    assert run is not None
    assert run["runPhase"] == "FAILED"
    assert run["errorDetails"]["code"] == "FAILED_PRECONDITION"
    assert run["errorDetails"]["reason"] == "JOB_FAILED"
    assert run["errorDetails"]["message"] == error.message


@connected
async def test_a_trials_run_has_its_parameters_and_its_outcome(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    study, trial_job = _new_id(), _new_id()
    await publisher.publish(_study_created(study))
    await publisher.publish(_trial_job_created(study, trial_job, "1"))
    run = await wait_until(lambda: _run(api, trial_job), lambda run: run is not None)
    assert run is not None
    assert run["runSet"] == STUDY
    assert run["labels"]["mldiag-tuning-job"] == study
    assert run["labels"]["mldiag-trial"] == "1"
    assert _user(run) == {
        "lr": 0.01,
        "batch": 32,
        "optimizer": "adam",
        "trial_id": "1",
        "tuning_job_id": study,
    }

    await publisher.publish(_job_changed(trial_job, JobState.SUCCEEDED))
    ended = _trial_ended(study, _trial("1", trial_job, 0.87))
    await publisher.publish(ended)
    # The job's state and the trial's end come on two durables: either may land first.
    run = await wait_until(
        lambda: _run(api, trial_job),
        lambda run: run is not None and run["runPhase"] != "ACTIVE" and "trial_state" in _user(run),
    )
    assert run is not None
    assert run["runPhase"] == "COMPLETED"
    assert _user(run) == {
        "lr": 0.01,
        "batch": 32,
        "optimizer": "adam",
        "trial_id": "1",
        "tuning_job_id": study,
        "trial_state": "SUCCEEDED",
        "stopped_early": False,
        "final_accuracy": 0.87,
    }
    etag = run["etag"]
    await publisher.publish(ended.model_copy(update={"event_id": uuid.uuid4()}))
    await _trials_settled(api, publisher)
    after = await _run(api, trial_job)
    assert after is not None
    assert after["etag"] == etag


@connected
async def test_a_trial_stopped_early_reads_as_stopped_not_crashed(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    study, trial_job = _new_id(), _new_id()
    await publisher.publish(_trial_job_created(study, trial_job, "2"))
    # Median stopping cancels the trial's custom job: its run ends FAILED as cancelled...
    await publisher.publish(_job_changed(trial_job, JobState.CANCELLING))
    await publisher.publish(
        _job_changed(trial_job, JobState.CANCELLED, RpcStatus(code=1, message="stopped early"))
    )
    run = await wait_until(
        lambda: _run(api, trial_job), lambda run: run is not None and run["runPhase"] != "ACTIVE"
    )
    assert run is not None
    # ...then the trial's end says it SUCCEEDED, stopped early, with its final value.
    await publisher.publish(_trial_ended(study, _trial("2", trial_job, 0.4), stopped_early=True))
    run = await wait_until(lambda: _run(api, trial_job), lambda run: "trial_state" in _user(run))
    assert run is not None
    assert run["runPhase"] == "FAILED"  # an ended run's phase is final
    assert (run["errorDetails"]["code"], run["errorDetails"]["reason"]) == (
        "CANCELLED",
        "JOB_CANCELLED",
    )
    assert run["labels"]["mldiag-job-state"] == "cancelled"
    user = _user(run)
    assert (user["trial_state"], user["stopped_early"], user["final_accuracy"]) == (
        "SUCCEEDED",
        True,
        0.4,
    )


@connected
async def test_facts_before_their_runs_wait_for_them(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    study, trial_job = _new_id(), _new_id()
    infeasible = _trial(
        "1", trial_job, None, state="INFEASIBLE", infeasibleReason="workerpool0-0 exited 1"
    )
    # The trial's end and the study's best before either run exists.
    await publisher.publish(_trial_ended(study, infeasible))
    await publisher.publish(
        _study_changed(study, JobState.RUNNING, _trial("2", "9002", 0.7), succeeded=1)
    )
    await publisher.publish(_study_created(study))
    await publisher.publish(_trial_job_created(study, trial_job, "1"))

    trial_run = await wait_until(
        lambda: _run(api, trial_job), lambda run: run is not None and "trial_state" in _user(run)
    )
    assert _user(trial_run)["trial_state"] == "INFEASIBLE"
    assert _user(trial_run)["infeasible_reason"] == "workerpool0-0 exited 1"
    assert _user(trial_run)["lr"] == 0.01  # the created run's configs are kept
    study_run = await wait_until(
        lambda: _run(api, study),
        lambda run: run is not None and "best_trial_id" in _user(run),
    )
    assert _user(study_run)["best_accuracy"] == 0.7
    assert _user(study_run)["algorithm"] == "RANDOM_SEARCH"
    # The point is stored just after the configs are merged.
    points = await wait_until(lambda: _points(api, study, "best_accuracy"))
    assert points == [(1, 0.7)]
