"""Time lost to an event: the detector's count, or the analysis's estimate."""

import pytest

from analyzer.analyzer_contexts import NOW, degradation, event, hang, straggler
from mldiag_analyzer.cost import estimate_time_lost, time_lost_seconds
from mldiag_schemas.events import EventType, Evidence, MetricWindow


def test_a_slow_window_loses_its_extra_step_time() -> None:
    slow, ctx = straggler()  # 10 steps at 1.6 s against 1.0 s
    assert estimate_time_lost(slow, ctx) == pytest.approx(6.0)


def test_the_worst_window_counts_once_not_the_sum_over_hosts() -> None:
    windows = [
        MetricWindow(metric="step_time", host=h, observed=2.0, baseline=1.0, count=10)
        for h in ("a", "b")
    ]
    slowed = event(
        EventType.PERFORMANCE_DEGRADATION,
        "step-time-regression",
        evidence=Evidence(windows=windows),
    )
    assert estimate_time_lost(slowed, None) == 10.0


def test_a_duty_cycle_drop_loses_its_share_of_the_window() -> None:
    assert estimate_time_lost(*degradation()) == 10.0


def test_a_hang_loses_the_time_since_the_last_progress() -> None:
    stopped, ctx = hang()
    assert estimate_time_lost(stopped, ctx) == 600.0
    assert (
        estimate_time_lost(stopped, ctx.model_copy(update={"captured_at": NOW.replace(hour=11)}))
        == 0.0
    )


def test_the_detectors_count_wins_when_larger() -> None:
    stopped, ctx = hang()
    assert time_lost_seconds(stopped.model_copy(update={"time_lost_seconds": 900.0}), ctx) == 900.0
    other = event(EventType.INPUT_STALL, "input-stall", time_lost_seconds=3.0)
    assert time_lost_seconds(other, None) == 3.0
