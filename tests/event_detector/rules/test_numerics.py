"""Numerics: NaN/±Inf once per series with the last good value; loss spikes, robustly."""

import math

from event_detector.feed import Feed
from mldiag_schemas.events import EventType, Severity


def test_nan_opens_one_event_with_the_last_good_value() -> None:
    feed = Feed()
    for step, loss in enumerate([1.0, 0.7, 0.6, math.nan, math.nan, math.inf], start=1):
        feed.advance(1)
        feed.step(step, h0={"loss": loss})
    [event] = feed.opened()
    assert event.type is EventType.NUMERICAL_INSTABILITY
    assert event.severity is Severity.CRITICAL
    assert event.hosts == ["h0"]
    assert (event.evidence.first_bad_step, event.evidence.last_good_step) == (4, 3)
    assert event.evidence.last_good_value == 0.6
    assert math.isnan(event.evidence.first_bad_value or 0.0)


def test_nan_resolves_after_ten_finite_values_and_a_new_one_opens_again() -> None:
    feed = Feed()
    feed.step(1, h0={"loss": math.nan})
    for step in range(2, 12):
        feed.step(step, h0={"loss": 1.0})
    [first] = feed.opened()
    assert feed.is_resolved(first)
    feed.step(12, h0={"loss": math.nan})
    assert len(feed.opened()) == 2
    assert feed.opened()[1].event_id != first.event_id


def test_a_loss_spike_opens_and_resolves_but_noise_does_not() -> None:
    feed = Feed()
    for step in range(1, 60):
        feed.step(step, h0={"loss": 2.0 - step * 0.01 + 0.02 * (step % 3)})
    assert feed.opened() == []
    feed.step(60, h0={"loss": 25.0})
    [spike] = feed.opened()
    assert spike.severity is Severity.WARNING
    assert spike.evidence.facts["kind"] == "loss_spike"
    for step in range(61, 70):
        feed.step(step, h0={"loss": 1.4})
    assert not feed.is_resolved(spike)  # calm for 9 values: not yet over
    feed.step(70, h0={"loss": 1.4})
    assert feed.is_resolved(spike)


def test_a_loss_that_keeps_swinging_is_one_spike_event() -> None:
    # A learning rate too high: the loss spikes, settles for a few steps, spikes again.
    feed = Feed()
    for step in range(1, 60):
        feed.step(step, h0={"loss": 2.0 - step * 0.01 + 0.02 * (step % 3)})
    for step in range(60, 100):
        feed.step(step, h0={"loss": 30.0 if step % 6 == 0 else 1.4})
    [spike] = feed.opened()
    assert not feed.is_resolved(spike)


def test_late_points_of_a_falling_loss_are_no_spike() -> None:
    # A batch redelivered after a failure arrives after newer ones: its higher, older loss
    # values must not be judged against the newer window.
    feed = Feed()
    for step in range(100, 160):
        feed.step(step, h0={"loss": 1.0 / (1.0 + 0.01 * step)})
    for step in range(1, 100):
        feed.step(step, h0={"loss": 1.0 / (1.0 + 0.01 * step)})
    assert feed.opened() == []


def test_a_non_loss_metric_may_jump_without_an_event() -> None:
    feed = Feed()
    for step in range(1, 40):
        feed.step(step, h0={"learning_rate": 1e-4 if step < 20 else 1e-2})
    assert feed.opened() == []
