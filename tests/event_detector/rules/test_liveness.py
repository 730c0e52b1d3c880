"""Liveness: hangs on the clock, interruptions, restarts and terminations."""

from datetime import timedelta

from event_detector.feed import Feed
from mldiag_event_detector.rules.liveness import classify
from mldiag_schemas.events import EventState, EventType, WorkloadEventOpened
from mldiag_schemas.monitoring import MonitoringRules, RuleName, RuleOverride
from mldiag_schemas.runs import ErrorDetails, Run, RunPhase, RunPhaseChanged, RunState
from mldiag_schemas.telemetry import SignalKind, SignalRequest

FAST_HANG = MonitoringRules(
    rules={RuleName.HANG: RuleOverride(thresholds={"floorSeconds": 5, "stepFactor": 10})}
)


def _steps(feed: Feed, first: int, last: int, seconds: float = 0.2, **extra: float) -> None:
    for step in range(first, last + 1):
        feed.advance(seconds)
        feed.step(step, h0={"step_time": seconds, **extra}, h1={"step_time": seconds, **extra})


def test_no_progress_past_the_timeout_is_a_hang_and_a_new_step_resolves_it() -> None:
    feed = Feed(project_rules=FAST_HANG)
    _steps(feed, 1, 10)
    assert feed.next_check_at == feed.now + timedelta(seconds=5)
    feed.advance(4)
    feed.send(feed.heartbeat("h0"), feed.heartbeat("h1"))
    assert feed.clock() == []
    feed.advance(2)
    [opened] = feed.clock()
    hang = opened.event  # type: ignore[attr-defined]
    assert hang.type is EventType.HANG
    assert hang.evidence.facts["aliveHosts"] == ["h0", "h1"]
    assert feed.clock() == []  # once
    feed.advance(1)
    _steps(feed, 11, 11)
    resolved = feed.latest(hang)
    assert resolved.state is EventState.RESOLVED
    assert resolved.time_lost_seconds > 6


def test_the_hang_timeout_follows_the_typical_step() -> None:
    feed = Feed(project_rules=FAST_HANG)
    _steps(feed, 1, 10, seconds=2.0)  # 10 x 2 s = 20 s > the 5 s floor
    feed.advance(15)
    assert feed.clock() == []
    feed.advance(6)
    assert [c.event.type for c in feed.clock()] == [EventType.HANG]  # type: ignore[attr-defined]


def test_a_run_compiling_its_first_step_is_not_hung_until_the_startup_timeout() -> None:
    feed = Feed(project_rules=FAST_HANG)  # a 5 s floor; startupSeconds keeps its 120 s
    feed.step(0, h0={"loss": 1.0})
    feed.advance(60)
    assert feed.clock() == []  # no step time known yet: still compiling, not hung
    feed.advance(61)
    [opened] = feed.clock()
    assert opened.event.type is EventType.HANG  # type: ignore[attr-defined]


def test_the_startup_timeout_can_be_lowered_like_any_threshold() -> None:
    rules = MonitoringRules(
        rules={RuleName.HANG: RuleOverride(thresholds={"floorSeconds": 5, "startupSeconds": 0})}
    )
    feed = Feed(project_rules=rules)
    feed.step(0, h0={"loss": 1.0})
    feed.advance(6)
    assert [c.event.type for c in feed.clock()] == [EventType.HANG]  # type: ignore[attr-defined]


def test_a_hang_names_the_silent_hosts() -> None:
    feed = Feed(project_rules=FAST_HANG)
    feed.send(feed.heartbeat("h0"), feed.heartbeat("h1"))
    _steps(feed, 1, 5)
    feed.advance(25)
    feed.send(feed.heartbeat("h0"))
    feed.advance(1)
    [opened] = feed.clock()
    facts = opened.event.evidence.facts  # type: ignore[attr-defined]
    assert (facts["aliveHosts"], facts["silentHosts"]) == (["h0"], ["h1"])


def test_a_step_recorded_again_is_a_restart_resolved_once_past_the_old_step() -> None:
    feed = Feed()
    _steps(feed, 1, 20)
    feed.advance(30)
    _steps(feed, 15, 20)  # back from the checkpoint at 14
    [event] = feed.opened()
    assert event.type is EventType.ORCHESTRATOR_INTERRUPTION
    assert event.evidence.facts["lostSteps"] == 6
    assert not feed.is_resolved(event)
    _steps(feed, 21, 21)
    resolved = feed.latest(event)
    assert resolved.state is EventState.RESOLVED
    assert resolved.time_lost_seconds >= 30


def test_hosts_restarting_from_one_checkpoint_give_its_cause_once_and_both_hosts() -> None:
    feed = Feed()
    _steps(feed, 1, 20)
    feed.advance(30)
    _steps(feed, 15, 20)  # h0 and h1 both back from the checkpoint at 14
    [event] = feed.opened()
    latest = feed.latest(event)
    assert latest.evidence.facts["causes"] == ["restart from step 15 (had reached 20)"]
    assert latest.hosts == ["h0", "h1"]


def _steps_on_h0(feed: Feed, first: int, last: int, seconds: float = 0.2) -> None:
    for step in range(first, last + 1):
        feed.advance(seconds)
        feed.step(step, h0={"step_time": seconds})


def test_a_new_pid_already_past_the_old_step_then_its_steps_again_is_one_interruption() -> None:
    """Heartbeats and metrics come through different consumers: the new process's heartbeat
    can arrive after it went past the old step, and its steps recorded again after that."""
    feed = Feed()
    feed.send(feed.heartbeat("h0", pid=10))
    _steps_on_h0(feed, 1, 20)
    feed.advance(15)
    feed.send(feed.heartbeat("h0", pid=11, step=25))  # late: the new life is at step 25
    [event] = feed.opened()
    assert feed.is_resolved(event)
    _steps_on_h0(feed, 11, 25)  # the new life's steps, read after its heartbeat
    assert feed.opened() == [event]
    assert feed.state.hosts["h0"].restarts == 1


def test_steps_again_then_the_new_pid_is_one_interruption() -> None:
    feed = Feed()
    feed.send(feed.heartbeat("h0", pid=10))
    _steps_on_h0(feed, 1, 20)
    feed.advance(15)
    _steps_on_h0(feed, 11, 22)  # back past the old step before its heartbeat is read
    [event] = feed.opened()
    assert feed.is_resolved(event)
    feed.send(feed.heartbeat("h0", pid=11))
    assert feed.opened() == [event]
    assert feed.state.hosts["h0"].restarts == 1


def test_a_second_restart_long_after_the_first_is_a_second_interruption() -> None:
    feed = Feed()
    feed.send(feed.heartbeat("h0", pid=10))
    _steps_on_h0(feed, 1, 20)
    feed.advance(15)
    feed.send(feed.heartbeat("h0", pid=11, step=21))  # no steps recorded again: resumed at 21
    feed.advance(300)
    _steps_on_h0(feed, 15, 30)
    assert [e.type for e in feed.opened()] == [EventType.ORCHESTRATOR_INTERRUPTION] * 2


def test_sigterm_then_a_new_pid_is_one_interruption() -> None:
    feed = Feed()
    feed.send(feed.heartbeat("h0", pid=10))
    _steps(feed, 1, 5)
    feed.send(feed.signal(SignalRequest(kind=SignalKind.SIGTERM, host="h0")))
    feed.advance(20)
    feed.send(feed.heartbeat("h0", pid=11))
    [event] = feed.opened()
    assert event.type is EventType.ORCHESTRATOR_INTERRUPTION
    causes = feed.latest(event).evidence.facts["causes"]
    assert causes == ["SIGTERM", "process restarted (pid 10 → 11)"]


def test_an_exception_is_one_termination_with_its_classification() -> None:
    feed = Feed()
    _steps(feed, 1, 3)
    feed.send(
        feed.signal(
            SignalRequest(
                kind=SignalKind.EXCEPTION,
                host="h0",
                error_type="ValueError",
                message="bad shape",
            )
        )
    )
    run = Run(
        name="projects/p/locations/l/machineLearningRuns/run-1",
        run_id="run-1",
        display_name="r",
        run_set="",
        labels={},
        run_phase=RunPhase.FAILED,
        state=RunState.FAILED,
        create_time=feed.now,
        update_time=feed.now,
        error_details=ErrorDetails(message="ValueError: bad shape"),
    )
    feed.send(RunPhaseChanged(run=run, previous_phase=RunPhase.ACTIVE, occurred_at=feed.now))
    [event] = feed.opened()
    assert event.type is EventType.TERMINATION
    assert event.evidence.facts["classification"] == "user_exception"
    assert feed.is_resolved(event)


def test_a_failed_phase_alone_is_a_termination_and_ends_open_events() -> None:
    feed = Feed(project_rules=FAST_HANG)
    _steps(feed, 1, 3)
    feed.advance(10)
    feed.clock()
    [hang] = feed.opened()
    run = Run(
        name="projects/p/locations/l/machineLearningRuns/run-1",
        run_id="run-1",
        display_name="r",
        run_set="",
        labels={},
        run_phase=RunPhase.FAILED,
        state=RunState.FAILED,
        create_time=feed.now,
        update_time=feed.now,
        error_details=ErrorDetails(message="terminated by signal SIGTERM"),
    )
    feed.send(RunPhaseChanged(run=run, previous_phase=RunPhase.ACTIVE, occurred_at=feed.now))
    assert feed.is_resolved(hang)
    [termination] = feed.opened(EventType.TERMINATION)
    assert termination.evidence.facts["classification"] == "killed"
    assert feed.next_check_at is None


def test_classification_of_how_processes_end() -> None:
    assert (
        classify(error_type="XlaRuntimeError", message="RESOURCE_EXHAUSTED: Out of memory")
        == "oom_accelerator"
    )
    assert classify(signal="SIGKILL", exit_code=137) == "oom_host"
    assert classify(reason="oom_killed") == "oom_host"
    assert (
        classify(error_type="RuntimeError", message="DATA_LOSS: ICI link down") == "hardware_error"
    )
    assert classify(error_type="KeyError") == "user_exception"
    assert classify(signal="SIGTERM") == "killed"
    assert classify(exit_code=3) == "exit_code"


def test_a_clean_exit_is_not_a_termination() -> None:
    feed = Feed()
    feed.send(feed.signal(SignalRequest(kind=SignalKind.PROCESS_EXITED, exit_code=0)))
    assert feed.opened() == []


def _opened_snapshot_of_h0(feed: Feed) -> tuple[float, float]:
    """Seconds since h0's last heartbeat and last progress in the interruption's snapshot."""
    [opened] = [
        change
        for change in feed.changes
        if isinstance(change, WorkloadEventOpened)
        and change.event.type is EventType.ORCHESTRATOR_INTERRUPTION
    ]
    assert opened.context is not None
    [h0] = [host for host in opened.context.hosts if host.host == "h0"]
    assert h0.last_heartbeat_time is not None and h0.last_progress_time is not None
    now = opened.context.captured_at
    return (
        (now - h0.last_heartbeat_time).total_seconds(),
        (now - h0.last_progress_time).total_seconds(),
    )


def test_a_restart_seen_by_its_new_pid_shows_the_new_process_beating() -> None:
    feed = Feed()
    feed.send(feed.heartbeat("h0", pid=10))
    _steps_on_h0(feed, 1, 20)
    feed.advance(40)  # the first life died 40 s ago, without a word
    feed.send(feed.heartbeat("h0", pid=11))
    beat_age, _ = _opened_snapshot_of_h0(feed)
    assert beat_age == 0.0  # the analyzers must not call the host dead


def test_a_restart_seen_by_its_steps_again_shows_the_new_process_progressing() -> None:
    feed = Feed()
    feed.send(feed.heartbeat("h0", pid=10))
    _steps_on_h0(feed, 1, 20)
    feed.advance(40)
    _steps_on_h0(feed, 15, 15)  # the new life's first step, before its first heartbeat
    _, progress_age = _opened_snapshot_of_h0(feed)
    assert progress_age == 0.0
