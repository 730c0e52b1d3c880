"""A trial of a tuning job stopped early by median stopping: its custom job is cancelled (the
replicas get SIGTERM and exit 143), its run ends FAILED as cancelled, then the trial's end is
merged into its configs. None of that is a TERMINATION, an interruption or a hang; the same
run failing on its own still is one TERMINATION. The study's own run (no replicas) is ended
by its tuning job the same way: cancelled, nothing; failed, one TERMINATION.

The trial's run is built with run-registry's own mapping (``job_run_request``, ``ending``), so
the detector is tested against what the registry really writes."""

from datetime import UTC, datetime

from event_detector.feed import Feed
from mldiag_run_registry.jobs.service import ending, job_run_request
from mldiag_run_registry.jobs.tuning import study_run_request
from mldiag_schemas.events import EventType
from mldiag_schemas.jobs import CustomJob, JobState, RpcStatus
from mldiag_schemas.replicas import CustomJobCreated
from mldiag_schemas.runs import (
    Run,
    RunCreated,
    RunPhase,
    RunPhaseChanged,
    RunState,
    RunUpdated,
)
from mldiag_schemas.telemetry import SignalKind, SignalRequest
from mldiag_schemas.tuning import HyperparameterTuningJob, TrialOfJob, TuningJobCreated

PROJECT, LOCATION, TRIAL_JOB = "p", "us-central1", "4242"
CHIEF = "workerpool0-0"


def _trial_run(feed: Feed) -> Run:
    job = CustomJob.model_validate(
        {
            "name": f"projects/{PROJECT}/locations/{LOCATION}/customJobs/{TRIAL_JOB}",
            "displayName": "sweep-trial-3",
            "createTime": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
            "jobSpec": {
                "workerPoolSpecs": [
                    {
                        "machineSpec": {"machineType": "n1-standard-4"},
                        "replicaCount": "1",
                        "containerSpec": {"imageUri": "python:3.12"},
                    }
                ]
            },
        }
    )
    request = job_run_request(
        CustomJobCreated(
            job_id=TRIAL_JOB,
            project=PROJECT,
            location=LOCATION,
            job=job,
            run_set="sweep",
            trial=TrialOfJob(
                tuning_job_id="77", study_display_name="sweep", trial_id="3", parameters={"lr": 0.1}
            ),
        )
    )
    return Run(
        name=f"projects/{PROJECT}/locations/{LOCATION}/machineLearningRuns/{feed.run_id}",
        run_id=feed.run_id,
        display_name=request.display_name,
        run_set=request.run_set,
        labels=request.labels,
        configs=request.configs,
        orchestrator=request.orchestrator,
        workload_details=request.workload_details,
        state=RunState.ACTIVE,
        create_time=feed.now,
        update_time=feed.now,
    )


def _trial_feed() -> tuple[Feed, Run]:
    feed = Feed(run_id=TRIAL_JOB)
    run = _trial_run(feed)
    assert run.labels["mldiag-trial"] == "3"
    feed.send(RunCreated(run=run, occurred_at=feed.now))
    assert feed.state.job.endswith(f"/customJobs/{TRIAL_JOB}")  # watched as a job's run
    feed.send(feed.heartbeat(CHIEF, pid=10))
    for step in range(1, 6):
        feed.advance(2)
        feed.step(step, **{CHIEF: {"accuracy": 0.1 * step}})
    return feed, run


def _stop_replica(feed: Feed) -> None:
    feed.send(feed.signal(SignalRequest(kind=SignalKind.SIGTERM, host=CHIEF, pid=10)))
    feed.send(
        feed.signal(
            SignalRequest(
                kind=SignalKind.PROCESS_EXITED, host=CHIEF, pid=10, exit_code=143, signal="SIGTERM"
            )
        )
    )


def _end(feed: Feed, run: Run, state: JobState, error: RpcStatus) -> Run:
    phase, details = ending(state, error, "job")
    ended = run.model_copy(
        update={"run_phase": phase, "state": phase.state, "error_details": details}
    )
    feed.send(RunPhaseChanged(run=ended, previous_phase=RunPhase.ACTIVE, occurred_at=feed.now))
    return ended


def test_a_trial_stopped_early_raises_nothing() -> None:
    feed, run = _trial_feed()
    feed.advance(1)
    _stop_replica(feed)  # median stopping cancelled the trial's custom job
    ended = _end(feed, run, JobState.CANCELLED, RpcStatus(code=1, message="stopped early"))
    assert ended.error_details is not None
    assert ended.error_details.reason == "JOB_CANCELLED"

    # The trial's end merged into its configs afterwards, then a long quiet time.
    user = ended.configs.user_configs | {"trial_state": "SUCCEEDED", "stopped_early": True}
    configs = ended.configs.model_copy(update={"user_configs": user})
    noted = ended.model_copy(update={"configs": configs})
    feed.send(RunUpdated(run=noted, update_mask=["configs"], occurred_at=feed.now))
    feed.advance(3600)
    feed.clock()

    assert feed.opened() == []
    assert feed.state.downs == {}


def test_the_same_trial_failing_on_its_own_is_one_termination() -> None:
    feed, run = _trial_feed()
    feed.advance(1)
    _stop_replica(feed)
    _end(feed, run, JobState.FAILED, RpcStatus(code=13, message="workerpool0-0 exited 143"))

    [termination] = feed.opened()
    assert termination.type is EventType.TERMINATION


def _study_feed() -> tuple[Feed, Run]:
    job = HyperparameterTuningJob.model_validate(
        {
            "displayName": "sweep",
            "maxTrialCount": 4,
            "parallelTrialCount": 2,
            "studySpec": {
                "metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
                "parameters": [
                    {"parameterId": "lr", "doubleValueSpec": {"minValue": 0.01, "maxValue": 1}}
                ],
            },
            "trialJobSpec": {
                "workerPoolSpecs": [
                    {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1"}
                ]
            },
        }
    )
    request = study_run_request(
        TuningJobCreated(job_id="77", project=PROJECT, location=LOCATION, job=job, run_set="sweep")
    )
    feed = Feed(run_id="77")
    run = Run(
        name=f"projects/{PROJECT}/locations/{LOCATION}/machineLearningRuns/77",
        run_id="77",
        display_name=request.display_name,
        run_set=request.run_set,
        labels=request.labels,
        configs=request.configs,
        orchestrator=request.orchestrator,
        workload_details=request.workload_details,
        state=RunState.ACTIVE,
        create_time=feed.now,
        update_time=feed.now,
    )
    feed.send(RunCreated(run=run, occurred_at=feed.now))
    return feed, run


def test_a_cancelled_tuning_jobs_run_raises_nothing() -> None:
    feed, run = _study_feed()
    feed.advance(600)
    _end(feed, run, JobState.CANCELLED, RpcStatus(code=1, message="cancelled by alice"))
    feed.advance(3600)
    feed.clock()
    assert feed.opened() == []


def test_a_failed_tuning_jobs_run_is_one_termination() -> None:
    feed, run = _study_feed()
    feed.advance(600)
    error = RpcStatus(code=9, message="3 trials failed (maxFailedTrialCount 3)")
    _end(feed, run, JobState.FAILED, error)
    [termination] = feed.opened()
    assert termination.type is EventType.TERMINATION
    assert termination.evidence.facts["jobError"] == error.message
