"""Performance: duty-cycle drops, step-time regressions and stragglers."""

from event_detector.feed import Feed, immediate
from mldiag_schemas.events import EventType
from mldiag_schemas.monitoring import MonitoringRules, RuleName, RuleOverride
from mldiag_schemas.runs import Run, RunPhase, RunPhaseChanged


def _duty_run(feed: Feed, samples: int, duty: float, start: int = 1) -> None:
    for step in range(start, start + samples):
        feed.advance(10)
        feed.step(step, h0={"tpu_duty_cycle": [duty, duty]}, h1={"tpu_duty_cycle": [duty, duty]})


def test_a_fifteen_percent_duty_cycle_drop_opens_and_recovery_resolves() -> None:
    feed = Feed(project_rules=immediate())
    _duty_run(feed, 10, 80.0)
    assert feed.opened() == []
    _duty_run(feed, 3, 60.0, start=11)
    [event] = feed.opened()
    assert event.type is EventType.PERFORMANCE_DEGRADATION
    assert event.rule == RuleName.DUTY_CYCLE_DROP
    assert event.hosts == ["h0", "h1"]
    assert round(event.evidence.facts["drop"], 2) == 0.25  # type: ignore[arg-type]
    _duty_run(feed, 3, 60.0, start=14)
    assert len(feed.opened()) == 1  # still the same event
    _duty_run(feed, 3, 80.0, start=17)
    resolved = feed.latest(event)
    assert resolved.end_time is not None
    assert resolved.time_lost_seconds > 0


def test_a_ten_percent_dip_is_not_an_event_by_default_but_is_with_a_lower_threshold() -> None:
    quiet = Feed(project_rules=immediate())
    _duty_run(quiet, 10, 80.0)
    _duty_run(quiet, 5, 72.0, start=11)
    assert quiet.opened() == []
    strict = Feed(project_rules=immediate({RuleName.DUTY_CYCLE_DROP: {"drop": 0.05}}))
    _duty_run(strict, 10, 80.0)
    _duty_run(strict, 5, 72.0, start=11)
    [event] = strict.opened()
    assert event.thresholds["drop"] == 0.05


def test_step_time_regression_on_every_host_is_a_degradation_not_a_straggler() -> None:
    feed = Feed(project_rules=immediate())
    for step in range(1, 60):
        feed.advance(1)
        pace = 1.0 + 0.01 * (step % 4) if step < 40 else 1.5
        feed.step(step, h0={"step_time": pace}, h1={"step_time": pace + 0.005})
    [event] = feed.opened()
    assert event.type is EventType.PERFORMANCE_DEGRADATION
    assert event.rule == RuleName.STEP_TIME_REGRESSION
    assert event.hosts == ["h0", "h1"]


def test_throughput_regression_when_no_step_time_is_logged() -> None:
    feed = Feed(project_rules=immediate())
    for step in range(1, 50):
        feed.advance(1)
        feed.step(step, h0={"throughput": 1000.0 + step % 3 if step < 35 else 600.0})
    [event] = feed.opened()
    assert event.rule == RuleName.STEP_TIME_REGRESSION
    assert event.evidence.metric == "throughput"
    assert "Throughput down" in event.display_name


def test_one_slow_host_is_a_straggler_named_by_host() -> None:
    feed = Feed(project_rules=immediate())
    for step in range(1, 40):
        feed.advance(1)
        slow = 1.4 if step > 20 else 1.0
        feed.step(
            step,
            h0={"step_time": 1.0},
            h1={"step_time": 1.01},
            h2={"step_time": 0.99},
            h3={"step_time": slow},
        )
    [event] = feed.opened()
    assert event.type is EventType.STRAGGLER
    assert event.hosts == ["h3"]


def test_a_single_slow_window_is_not_a_straggler() -> None:
    feed = Feed(project_rules=immediate())
    for step in range(1, 40):
        feed.advance(1)
        blip = 1.5 if 21 <= step <= 25 else 1.0
        feed.step(step, h0={"step_time": 1.0}, h1={"step_time": 1.0}, h2={"step_time": blip})
    assert feed.opened() == []


def test_a_rule_switched_off_for_the_run_stays_quiet() -> None:
    feed = Feed()
    feed.state.rules = MonitoringRules(rules={RuleName.STRAGGLER: RuleOverride(enabled=False)})
    for step in range(1, 40):
        feed.step(step, h0={"step_time": 1.0}, h1={"step_time": 2.0 if step > 10 else 1.0})
    assert feed.opened() == []


def test_a_slowdown_in_the_last_flush_after_the_run_ended_is_still_reported() -> None:
    feed = Feed(project_rules=immediate())
    for step in range(1, 31):
        feed.advance(1)
        feed.step(step, h0={"step_time": 1.0})
    feed.send(_phase_changed(feed, RunPhase.COMPLETED))
    feed.send(*(feed.metrics("h0", step, {"step_time": 2.0}) for step in range(31, 41)))
    [event] = feed.opened()
    assert event.type is EventType.PERFORMANCE_DEGRADATION
    assert feed.is_resolved(event)


def _phase_changed(feed: Feed, phase: RunPhase) -> RunPhaseChanged:
    run = Run(
        name=f"projects/p/locations/l/machineLearningRuns/{feed.run_id}",
        run_id=feed.run_id,
        display_name="r",
        run_set="",
        labels={},
        run_phase=phase,
        state=phase.state,
        create_time=feed.now,
        update_time=feed.now,
    )
    return RunPhaseChanged(run=run, previous_phase=RunPhase.ACTIVE, occurred_at=feed.now)


def test_a_straggler_closed_by_the_run_end_is_not_reopened_by_its_late_steps() -> None:
    feed = Feed(project_rules=immediate())
    for step in range(1, 30):
        feed.step(step, h0={"step_time": 1.0}, h1={"step_time": 1.0}, h2={"step_time": 2.0})
    [event] = feed.opened()
    feed.send(_phase_changed(feed, RunPhase.COMPLETED))  # process 0 is done first
    for step in range(30, 50):
        feed.step(step, h2={"step_time": 2.0})
    assert feed.opened() == [event]
    assert feed.is_resolved(event)


def _slow_then(feed: Feed, *, hung: bool) -> None:
    """60 healthy steps of 50 ms, slow steps of 100 ms for a second, then 60 s in which the
    process either hangs (only its system metrics still come, at its last step) or keeps
    stepping slowly."""
    step = 0
    for step in range(1, 61):
        feed.advance(0.05)
        feed.step(step, h0={"step_time": 0.05 + 0.001 * (step % 3)})
    for step in range(61, 71):
        feed.advance(0.1)
        feed.step(step, h0={"step_time": 0.1})
    for _ in range(60):
        feed.advance(1)
        if hung:
            feed.step(step, h0={"host_cpu_utilization": 3.0})
        else:
            step += 1
            feed.step(step, h0={"step_time": 0.1})


def test_a_process_that_hangs_after_slow_steps_is_no_slowdown() -> None:
    # The hang is the hang rule's; its system metrics must not stretch the slow window.
    hung = Feed()
    _slow_then(hung, hung=True)
    assert hung.opened(EventType.PERFORMANCE_DEGRADATION) == []
    slowed = Feed()
    _slow_then(slowed, hung=False)
    [event] = slowed.opened(EventType.PERFORMANCE_DEGRADATION)
    assert event.rule == RuleName.STEP_TIME_REGRESSION
