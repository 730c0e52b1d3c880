"""The book's materiality: a slowdown is one event, opened once it has lasted and cost enough
(the defaults, scaled by the run's step), dated from its start, resolved after a settle time."""

from datetime import datetime

import pytest

from event_detector.feed import Feed
from mldiag_schemas.events import EventState, EventType, WorkloadEventOpened
from mldiag_schemas.monitoring import MonitoringRules, RuleName, RuleOverride
from mldiag_schemas.runs import Run, RunPhase, RunPhaseChanged, RunState

BASELINE = 40


def _steps(feed: Feed, first: int, paces: list[float], host: str = "h0") -> dict[int, datetime]:
    """One step per pace, the clock advancing by it; when each step was received."""
    received: dict[int, datetime] = {}
    for step, pace in enumerate(paces, start=first):
        feed.advance(pace)
        feed.step(step, **{host: {"step_time": pace}})
        received[step] = feed.now
    return received


def _baseline(feed: Feed, pace: float = 1.0) -> int:
    """A healthy start with a little jitter; returns the next step."""
    _steps(feed, 1, [pace * (1 + 0.01 * (step % 3)) for step in range(BASELINE)])
    return BASELINE + 1


def test_a_blip_shorter_than_the_defaults_opens_nothing() -> None:
    feed = Feed()
    step = _baseline(feed)
    # Ten steps three times slower: ~30 s, but the window sees it for only part of that.
    _steps(feed, step, [3.0] * 6 + [1.0] * 30)
    assert feed.opened() == []
    assert feed.state.deviations == {}


def _flushed(feed: Feed, first: int, paces: list[float], per_flush: int = 50) -> None:
    """Steps sent as a fast run's SDK sends them: a batch every ``per_flush`` steps."""
    pending = []
    for step, pace in enumerate(paces, start=first):
        feed.advance(pace)
        pending.append(feed.metrics("h0", step, {"step_time": pace}))
        if len(pending) == per_flush:
            feed.send(*pending)
            pending = []
    if pending:
        feed.send(*pending)


def test_a_fast_run_on_a_shared_machine_gets_no_events_for_its_hiccups() -> None:
    # The short runs: 10 ms steps, hiccups of a second or two now and then.
    feed = Feed()
    step = _baseline(feed, 0.01)
    for _ in range(4):
        _flushed(feed, step, [0.03] * 60)
        assert RuleName.STEP_TIME_REGRESSION.value in feed.state.deviations  # seen, pending
        _flushed(feed, step + 60, [0.01] * 1200)  # clear for 12 s: over, forgotten
        assert feed.state.deviations == {}
        step += 1260
    assert feed.opened() == []


def test_a_long_slowdown_opens_once_when_material_and_dated_from_its_start() -> None:
    feed = Feed()
    step = _baseline(feed)
    received = _steps(feed, step, [2.0] * 40)
    [opened] = [change for change in feed.changes if isinstance(change, WorkloadEventOpened)]
    event = opened.event
    # The 5-step window's median turns slow at its third slow step: the deviation's start.
    assert event.start_time == received[step + 2]
    assert event.update_time is not None
    lasted = (event.update_time - event.start_time).total_seconds()
    # 20 typical steps (1.01 s; more than minDurationSeconds=10) is the bar, not 5 s lost.
    assert 20 * 1.01 <= lasted < 20 * 1.01 + 2.0
    # Steps 2/1.01 times as long lose (1 - 1.01/2) of their wall time.
    assert event.time_lost_seconds == pytest.approx(lasted * (1 - 1.01 / 2))
    assert feed.state.deviations[RuleName.STEP_TIME_REGRESSION.value].start == event.start_time


def test_fluctuation_inside_a_slowdown_stays_one_event() -> None:
    feed = Feed()
    step = _baseline(feed)
    # A contended minute: slow stretches with short healthy spells the window sees clear.
    for _ in range(4):
        _steps(feed, step, [3.0] * 8 + [1.0] * 5)
        step += 13
    [event] = feed.opened(EventType.PERFORMANCE_DEGRADATION)
    assert not feed.is_resolved(event)
    _steps(feed, step, [3.0] * 8)
    healthy = _steps(feed, step + 8, [1.0] * 40)
    assert feed.opened() == [event]
    resolved = feed.latest(event)
    assert resolved.state is EventState.RESOLVED
    # Resolved as of when it cleared (three healthy steps into the window), not 20 s later.
    assert resolved.end_time == healthy[step + 10]


def test_a_relapse_before_the_resolve_time_continues_the_event() -> None:
    feed = Feed()
    step = _baseline(feed)
    _steps(feed, step, [2.0] * 30)
    [event] = feed.opened()
    _steps(feed, step + 30, [1.0] * 12)  # clear for ~10 s: less than resolveSteps x 1 s
    assert not feed.is_resolved(event)
    _steps(feed, step + 42, [2.0] * 10)
    assert feed.opened() == [event]
    assert feed.state.deviations[RuleName.STEP_TIME_REGRESSION.value].cleared_at is None
    cleared = _steps(feed, step + 52, [1.0] * 30)
    latest = feed.latest(event)
    assert latest.state is EventState.RESOLVED
    assert latest.end_time == cleared[step + 54]
    assert latest.revision > 1


def test_a_resolved_slowdown_that_returns_later_is_a_second_event() -> None:
    feed = Feed()
    step = _baseline(feed)
    _steps(feed, step, [2.0] * 30 + [1.0] * 40 + [2.0] * 30)
    first, second = feed.opened()
    assert feed.is_resolved(first)
    assert second.event_id != first.event_id
    assert second.start_time > (feed.latest(first).end_time or second.start_time)


def test_project_and_run_overrides_change_when_it_opens() -> None:
    patient = Feed(
        project_rules=MonitoringRules(
            rules={
                RuleName.STEP_TIME_REGRESSION: RuleOverride(
                    thresholds={"minDurationSteps": 0, "minDurationSeconds": 120.0}
                )
            }
        )
    )
    step = _baseline(patient)
    _steps(patient, step, [2.0] * 40)  # ~80 s: not long enough for this project
    assert patient.opened() == []
    assert RuleName.STEP_TIME_REGRESSION.value in patient.state.deviations

    eager = Feed(project_rules=patient.project_rules)
    eager.state.rules = MonitoringRules(  # the run's own override wins over its project's
        rules={
            RuleName.STEP_TIME_REGRESSION: RuleOverride(
                thresholds={"minDurationSteps": 2, "minDurationSeconds": 5.0}
            )
        }
    )
    step = _baseline(eager)
    received = _steps(eager, step, [2.0] * 40)
    [event] = eager.opened()
    assert event.start_time == received[step + 2]
    assert event.thresholds["minDurationSeconds"] == 5.0
    # Lasting 5 s is now enough, but the default cost (5 steps' worth) is not met before
    # ~10 s at about half of each step lost.
    assert event.update_time is not None
    assert 10.2 <= (event.update_time - event.start_time).total_seconds() <= 12.2


def test_a_slowdown_still_in_flight_when_the_run_ended_is_judged_on_its_own_times() -> None:
    # The detector lags: the run's COMPLETED phase is folded before the last 80 s of steps
    # (two consumers), which arrive in big batches.
    feed = Feed()
    step = _baseline(feed)
    late = []
    for index in range(40):
        feed.advance(2.0)
        late.append(feed.metrics("h0", step + index, {"step_time": 2.0}))
    feed.send(_completed(feed))
    for batch in range(0, 40, 10):
        feed.send(*late[batch : batch + 10])
    [event] = feed.opened()
    assert event.start_time == late[9].occurred_at  # the first batch that showed it
    resolved = feed.latest(event)
    assert resolved.state is EventState.RESOLVED
    assert resolved.end_time == feed.now  # the run's end


def _completed(feed: Feed) -> RunPhaseChanged:
    run = Run(
        name=f"projects/p/locations/l/machineLearningRuns/{feed.run_id}",
        run_id=feed.run_id,
        display_name="r",
        run_set="",
        labels={},
        run_phase=RunPhase.COMPLETED,
        state=RunState.COMPLETED,
        create_time=feed.now,
        update_time=feed.now,
    )
    return RunPhaseChanged(run=run, previous_phase=RunPhase.ACTIVE, occurred_at=feed.now)


def test_a_duty_cycle_dip_shorter_than_the_defaults_opens_nothing() -> None:
    feed = Feed()
    for sample in range(1, 40):
        feed.advance(1)
        duty = 40.0 if 20 <= sample < 28 else 80.0
        feed.step(sample, h0={"tpu_duty_cycle": [duty, duty], "step_time": 1.0})
    assert feed.opened() == []
