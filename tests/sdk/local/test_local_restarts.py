"""The supervisor's restart policy: backoff, its reset after a stable run, the crash-loop limit."""

import signal

import pytest

from mldiag.local.restarts import RestartPolicy, RestartTracker, describe_exit

POLICY = RestartPolicy(initial_delay=1.0, max_delay=8.0, stable_after=60.0, max_crashes=5)


def _crash_loop(tracker: RestartTracker, start: float, crashes: int) -> list[float]:
    """Crash ``crashes`` times, each run lasting 0.5 s after the delay it was given."""
    delays, now = [], start
    for _ in range(crashes):
        started_at = now
        now += 0.5
        decision = tracker.on_exit(now, started_at)
        delays.append(decision.delay)
        now += decision.delay
    return delays


def test_backoff_doubles_up_to_the_cap() -> None:
    policy = RestartPolicy(initial_delay=1.0, max_delay=8.0, max_crashes=100, window=10.0)
    tracker = RestartTracker(policy)
    # Runs of 10 s, so the window never holds more than a couple of crashes.
    delays = [tracker.on_exit(now=n * 30.0 + 10.0, started_at=n * 30.0).delay for n in range(7)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0]


def test_the_fifth_crash_within_the_window_gives_up() -> None:
    tracker = RestartTracker(POLICY)
    decisions = []
    now = 100.0
    for _ in range(5):
        decisions.append(tracker.on_exit(now + 0.5, now))
        now += 0.5 + decisions[-1].delay
    assert [d.give_up for d in decisions] == [False, False, False, False, True]
    assert [d.crashes_in_window for d in decisions] == [1, 2, 3, 4, 5]
    assert decisions[-1].delay == 0.0


def test_crashes_spread_wider_than_the_window_never_give_up() -> None:
    policy = RestartPolicy(initial_delay=1.0, max_delay=30.0, max_crashes=3, window=60.0)
    tracker = RestartTracker(policy)
    for n in range(20):
        # A crash every 40 s after a 30 s run: at most two in any 60 s.
        decision = tracker.on_exit(now=n * 40.0 + 30.0, started_at=n * 40.0)
        assert not decision.give_up
        assert decision.crashes_in_window <= 2


def test_a_run_that_lasted_resets_the_backoff() -> None:
    tracker = RestartTracker(POLICY)
    assert _crash_loop(tracker, start=0.0, crashes=3) == [1.0, 2.0, 4.0]
    # Back up for a minute (the stable_after), then a crash: the first delay again.
    decision = tracker.on_exit(now=1_000.0, started_at=1_000.0 - 60.0)
    assert decision.delay == 1.0
    assert not decision.give_up
    assert decision.crashes_in_window == 1  # the early crashes left the window


def test_a_short_run_does_not_reset_the_backoff() -> None:
    tracker = RestartTracker(POLICY)
    assert _crash_loop(tracker, start=0.0, crashes=2) == [1.0, 2.0]
    assert tracker.on_exit(now=62.0, started_at=3.0).delay == 4.0  # 59 s < stable_after


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_delay": 0.0},
        {"initial_delay": 5.0, "max_delay": 1.0},
        {"max_crashes": 0},
        {"window": 0.0},
        {"stable_after": 0.0},
    ],
)
def test_nonsense_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="need"):
        RestartPolicy(**kwargs)  # type: ignore[arg-type]


def test_exits_are_described_for_people() -> None:
    assert describe_exit(0) == "status 0"
    assert describe_exit(3) == "status 3"
    assert describe_exit(-signal.SIGKILL) == "signal 9 (SIGKILL)"
    assert describe_exit(-200) == "signal 200"
    assert describe_exit(None) == "unknown"
