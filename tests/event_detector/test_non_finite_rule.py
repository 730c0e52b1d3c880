"""The non-finite rule: opens one event per (run, metric), with the last good value."""

import math
import uuid
from datetime import UTC, datetime

from mldiag_event_detector.service import WatchState, apply_non_finite_rule
from mldiag_schemas.events import EventType
from mldiag_schemas.telemetry import MetricColumns, MetricPoint, MetricPointsReceived

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _message(
    run_id: str, *points: tuple[str, int, float], host: str = "h0"
) -> MetricPointsReceived:
    return MetricPointsReceived(
        run_id=run_id,
        batch_id=uuid.uuid4(),
        chunk=0,
        occurred_at=NOW,
        points=[
            MetricPoint(name=name, step=step, value=value, time=NOW, host=host)
            for name, step, value in points
        ],
    )


def test_finite_values_open_nothing_and_track_the_last_good_value() -> None:
    outcome = apply_non_finite_rule({}, [_message("r", ("loss", 1, 2.0), ("loss", 2, 1.5))])
    assert outcome.opened == []
    assert outcome.states[("r", "loss")] == WatchState(last_good_step=2, last_good_value=1.5)


def test_nan_opens_an_event_with_evidence() -> None:
    outcome = apply_non_finite_rule(
        {}, [_message("r", ("loss", 1, 0.7), ("loss", 3, math.nan), ("loss", 2, 0.6))]
    )
    [opened] = outcome.opened
    event = opened.event
    assert event.type is EventType.NUMERICAL_INSTABILITY
    assert event.run_id == "r"
    assert event.hosts == ["h0"]
    assert event.evidence.metric == "loss"
    assert event.evidence.first_bad_step == 3
    assert math.isnan(event.evidence.first_bad_value)
    # steps are taken in order: step 2 (0.6) is the last good value before step 3
    assert (event.evidence.last_good_step, event.evidence.last_good_value) == (2, 0.6)
    assert "NaN at step 3" in event.display_name


def test_an_open_event_is_not_opened_again() -> None:
    first = apply_non_finite_rule({}, [_message("r", ("loss", 1, math.inf))])
    second = apply_non_finite_rule(first.states, [_message("r", ("loss", 2, math.nan))])
    assert len(first.opened) == 1
    assert second.opened == []


def test_each_metric_and_run_gets_its_own_event() -> None:
    outcome = apply_non_finite_rule(
        {},
        [
            _message("r1", ("loss", 1, math.nan), ("grad_norm", 1, -math.inf)),
            _message("r2", ("loss", 5, math.nan)),
        ],
    )
    keys = {(o.event.run_id, o.event.evidence.metric) for o in outcome.opened}
    assert keys == {("r1", "loss"), ("r1", "grad_norm"), ("r2", "loss")}


def test_the_same_signal_always_yields_the_same_event_id() -> None:
    messages = [_message("r", ("loss", 1, 1.0), ("loss", 4, math.nan))]
    first = apply_non_finite_rule({}, messages).opened[0].event.event_id
    again = apply_non_finite_rule({}, messages).opened[0].event.event_id
    assert first == again


def test_no_good_value_before_the_first_bad_one() -> None:
    [opened] = apply_non_finite_rule({}, [_message("r", ("loss", 0, math.nan))]).opened
    assert opened.event.evidence.last_good_step is None
    assert opened.event.evidence.last_good_value is None


def test_columnar_messages_per_device_series_share_the_metrics_state() -> None:
    message = MetricPointsReceived(
        run_id="r",
        batch_id=uuid.uuid4(),
        chunk=0,
        occurred_at=NOW,
        series=[
            MetricColumns(name="loss", host="h0", process_index=0, steps=[5, 4], values=[1.0, 2.0]),
            MetricColumns(name="loss", host="h0", process_index=1, steps=[3], values=[0.5]),
        ],
    )
    outcome = apply_non_finite_rule({}, [message])
    assert outcome.opened == []
    assert outcome.states[("r", "loss")] == WatchState(last_good_step=5, last_good_value=1.0)

    bad = message.model_copy(
        update={
            "event_id": uuid.uuid4(),
            "series": [MetricColumns(name="loss", host="h1", steps=[6, 7], values=[3.0, math.inf])],
        }
    )
    [opened] = apply_non_finite_rule(outcome.states, [bad]).opened
    assert opened.event.evidence.last_good_step == 6
    assert opened.event.hosts == ["h1"]
