"""A training job's run: a replica going down and coming back is one ORCHESTRATOR_INTERRUPTION
from when it went down (its time lost counted), the job's failure is one TERMINATION with the
replica's reason, and a cancelled job terminates nothing."""

import uuid
from datetime import datetime, timedelta

from event_detector.feed import Feed
from mldiag_schemas.events import EventState, EventType
from mldiag_schemas.runs import (
    CustomWorkload,
    ErrorDetails,
    Orchestrator,
    Run,
    RunCreated,
    RunPhase,
    RunPhaseChanged,
    RunState,
    WorkloadDetails,
)
from mldiag_schemas.telemetry import (
    MetricColumns,
    MetricPointsReceived,
    SignalKind,
    SignalRequest,
)

JOB = "projects/p/locations/us-central1/customJobs/123"
CHIEF, WORKER = "workerpool0-0", "workerpool1-0"


def _run(feed: Feed, phase: RunPhase = RunPhase.ACTIVE, error: ErrorDetails | None = None) -> Run:
    return Run(
        name=f"projects/p/locations/us-central1/machineLearningRuns/{feed.run_id}",
        run_id=feed.run_id,
        display_name="job",
        run_set="training-jobs",
        labels={"mldiag-job": "custom-job"},
        orchestrator=Orchestrator.CUSTOM,
        workload_details=WorkloadDetails(custom=CustomWorkload(id=JOB, display_name="job")),
        run_phase=phase,
        state=RunState(phase.state),
        create_time=feed.now,
        update_time=feed.now,
        error_details=error,
    )


def _job_feed() -> Feed:
    feed = Feed(run_id="123")
    feed.send(RunCreated(run=_run(feed), occurred_at=feed.now))
    assert feed.state.job == JOB
    return feed


def _exit(feed: Feed, host: str, pid: int, code: int = 1, **more: str) -> None:
    request = SignalRequest(
        kind=SignalKind.PROCESS_EXITED, host=host, pid=pid, exit_code=code, **more
    )
    feed.send(feed.signal(request))


def _sigterm(feed: Feed, host: str, pid: int) -> None:
    feed.send(feed.signal(SignalRequest(kind=SignalKind.SIGTERM, host=host, pid=pid)))


def _end(feed: Feed, reason: str, message: str, code: str) -> None:
    error = ErrorDetails(code=code, reason=reason, message=message)
    run = _run(feed, RunPhase.FAILED, error)
    feed.send(RunPhaseChanged(run=run, previous_phase=RunPhase.ACTIVE, occurred_at=feed.now))


def test_a_replica_restarted_by_the_job_is_an_interruption_with_its_downtime() -> None:
    feed = _job_feed()
    feed.send(feed.heartbeat(CHIEF, pid=10), feed.heartbeat(WORKER, pid=20))
    feed.advance(30)
    went_down: datetime = feed.now
    _exit(feed, WORKER, 20, code=1, message="Traceback ... RuntimeError: boom")
    assert feed.opened() == []  # the job decides what a replica's exit means
    feed.advance(4)
    feed.send(feed.heartbeat(WORKER, pid=21))  # the job restarted it: a new process

    [event] = feed.opened()
    assert event.type is EventType.ORCHESTRATOR_INTERRUPTION
    assert event.hosts == [WORKER]
    assert event.start_time == went_down
    resolved = feed.latest(event)
    # No step to catch up on: back running is recovered, after 4 s down.
    assert resolved.state is EventState.RESOLVED
    assert resolved.time_lost_seconds == 4.0
    causes = resolved.evidence.facts["causes"]
    assert isinstance(causes, list)
    assert "the job restarted it" in str(causes[0])
    assert feed.state.hosts[WORKER].restarts == 1
    assert feed.opened(EventType.TERMINATION) == []


def test_with_steps_the_interruption_lasts_until_the_job_is_past_its_old_step() -> None:
    feed = _job_feed()
    feed.send(feed.heartbeat(CHIEF, pid=10))
    for step in range(1, 21):
        feed.step(step, **{CHIEF: {"step_time": 1.0}})
        feed.advance(1)
    _exit(feed, CHIEF, 10, code=137, signal="SIGKILL")
    feed.advance(5)
    feed.send(feed.heartbeat(CHIEF, pid=11))
    [event] = feed.opened()
    assert not feed.is_resolved(event)
    for step in range(15, 22):  # resumed from the checkpoint at 14
        feed.step(step, **{CHIEF: {"step_time": 1.0}})
        feed.advance(1)
    resolved = feed.latest(event)
    assert resolved.state is EventState.RESOLVED
    assert resolved.time_lost_seconds >= 5 + 6


def test_a_failed_job_is_one_termination_with_the_replicas_reason() -> None:
    feed = _job_feed()
    feed.send(feed.heartbeat(CHIEF, pid=10), feed.heartbeat(WORKER, pid=20))
    feed.advance(10)
    feed.send(
        feed.signal(
            SignalRequest(
                kind=SignalKind.EXCEPTION,
                host=WORKER,
                pid=20,
                error_type="ValueError",
                message="ValueError: shapes (3,) and (4,) not aligned",
            )
        )
    )
    _exit(feed, WORKER, 20, code=1)
    feed.advance(1)
    _sigterm(feed, CHIEF, 10)  # the job stops the others once one has failed
    _exit(feed, CHIEF, 10, code=143, signal="SIGTERM")
    _end(feed, "JOB_FAILED", "workerpool1-0 exited with status 1", "INTERNAL")

    [termination] = feed.opened()  # no interruption: nothing came back
    assert termination.type is EventType.TERMINATION
    assert termination.hosts == [WORKER]
    facts = termination.evidence.facts
    assert facts["classification"] == "user_exception"
    assert facts["errorType"] == "ValueError"
    assert facts["source"] == "job"
    assert facts["jobError"] == "workerpool1-0 exited with status 1"
    assert feed.is_resolved(termination)


def test_a_job_that_failed_after_restarts_has_both_and_one_termination() -> None:
    feed = _job_feed()
    feed.send(feed.heartbeat(CHIEF, pid=10))
    for pid in (10, 11, 12):
        feed.advance(5)
        _exit(feed, CHIEF, pid, code=3)
        feed.advance(2)
        if pid < 12:
            feed.send(feed.heartbeat(CHIEF, pid=pid + 1))
    _end(feed, "JOB_FAILED", "workerpool0-0 exited with status 3", "INTERNAL")
    interruptions = feed.opened(EventType.ORCHESTRATOR_INTERRUPTION)
    assert len(interruptions) == 2
    assert all(feed.latest(event).time_lost_seconds == 2.0 for event in interruptions)
    [termination] = feed.opened(EventType.TERMINATION)
    assert termination.evidence.facts["exitCode"] == 3
    assert termination.evidence.facts["classification"] == "exit_code"


def test_a_cancelled_job_terminates_nothing() -> None:
    feed = _job_feed()
    feed.send(feed.heartbeat(CHIEF, pid=10), feed.heartbeat(WORKER, pid=20))
    feed.advance(10)
    for host, pid in ((CHIEF, 10), (WORKER, 20)):
        _sigterm(feed, host, pid)
        _exit(feed, host, pid, code=143, signal="SIGTERM")
    _end(feed, "JOB_CANCELLED", "CustomJob was cancelled.", "CANCELLED")
    assert feed.opened() == []
    assert feed.state.downs == {}


def test_an_exit_read_after_the_new_process_still_finds_the_restart() -> None:
    feed = _job_feed()
    feed.send(feed.heartbeat(CHIEF, pid=10))
    exited_at = feed.now + timedelta(seconds=1)
    feed.advance(3)
    feed.send(feed.heartbeat(CHIEF, pid=11))  # the heartbeat consumer ran ahead
    assert feed.opened() == []
    late = feed.signal(
        SignalRequest(kind=SignalKind.PROCESS_EXITED, host=CHIEF, pid=10, exit_code=1)
    )
    feed.send(late.model_copy(update={"occurred_at": exited_at, "received_at": exited_at}))
    [event] = feed.opened()
    assert event.type is EventType.ORCHESTRATOR_INTERRUPTION
    assert feed.latest(event).time_lost_seconds == 2.0
    assert feed.state.downs == {}
    # The old attempt's last words, later still, are history.
    feed.send(
        feed.signal(SignalRequest(kind=SignalKind.PROCESS_EXITED, host=CHIEF, pid=10, exit_code=1))
    )
    assert feed.state.downs == {}
    assert len(feed.opened()) == 1


def test_the_launcher_and_an_sdk_in_its_program_beating_together_are_no_restart() -> None:
    feed = _job_feed()
    for _ in range(5):
        feed.send(feed.heartbeat(CHIEF, pid=10))  # the launcher
        feed.advance(1)
        feed.send(feed.heartbeat(CHIEF, pid=55))  # the SDK in the program, same replica
        feed.advance(9)
    assert feed.opened() == []
    assert feed.state.hosts[CHIEF].restarts == 0


def test_outside_a_job_an_exit_still_terminates_the_run_at_once() -> None:
    feed = Feed()
    feed.send(feed.heartbeat("h0", pid=10))
    _exit(feed, "h0", 10, code=1)
    [event] = feed.opened()
    assert event.type is EventType.TERMINATION


def test_a_resumed_batch_already_past_the_old_step_is_one_interruption() -> None:
    feed = _job_feed()
    feed.send(feed.heartbeat(CHIEF, pid=10))
    feed.send(feed.metrics(CHIEF, 20, {"step_time": 1.0}))
    _exit(feed, CHIEF, 10)
    feed.advance(3)
    feed.send(feed.heartbeat(CHIEF, pid=11))
    steps = list(range(15, 26))  # one write of steps 15..25, as an SDK flush sends it
    columns = MetricColumns(name="step_time", host=CHIEF, steps=steps, values=[1.0] * 11)
    resumed = MetricPointsReceived(
        run_id=feed.run_id, batch_id=uuid.uuid4(), chunk=0, occurred_at=feed.now, series=[columns]
    )
    feed.send(resumed)
    [event] = feed.opened()
    assert feed.is_resolved(event)
    causes = feed.latest(event).evidence.facts["causes"]
    assert isinstance(causes, list)
    assert len(causes) == 2  # the new process, then the step seen again


def test_a_replica_with_an_sdk_inside_restarts_once_per_attempt() -> None:
    feed = _job_feed()
    feed.send(feed.heartbeat(CHIEF, pid=10), feed.heartbeat(CHIEF, pid=55))
    feed.advance(5)
    exception = SignalRequest(
        kind=SignalKind.EXCEPTION, host=CHIEF, pid=55, error_type="KeyError", message="KeyError: x"
    )
    feed.send(feed.signal(exception))  # the SDK in the program
    _exit(feed, CHIEF, 10, code=1)  # the launcher
    feed.advance(2)
    feed.send(feed.heartbeat(CHIEF, pid=11), feed.heartbeat(CHIEF, pid=56))
    feed.advance(10)
    feed.send(feed.heartbeat(CHIEF, pid=11), feed.heartbeat(CHIEF, pid=56))
    [event] = feed.opened()
    assert feed.latest(event).evidence.facts["downClassification"] == "user_exception"
    assert feed.latest(event).time_lost_seconds == 2.0
    assert feed.state.hosts[CHIEF].restarts == 1
