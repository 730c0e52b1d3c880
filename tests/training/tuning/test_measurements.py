"""A trial's measurements: merging metric points by step, and choosing the final one."""

import math
from typing import Any

import pytest

from mldiag_schemas.tuning import Measurement, MeasurementMetric, StudySpec
from mldiag_training.tuning.measurements import (
    MetricPoint,
    final_measurement,
    merge,
    objective_values,
)


def _spec(selection: str, *metrics: tuple[str, str]) -> StudySpec:
    body: dict[str, Any] = {
        "metrics": [{"metricId": m, "goal": g} for m, g in metrics],
        "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}],
        "measurementSelectionType": selection,
    }
    return StudySpec.model_validate(body)


def _m(step: int, elapsed: float | None = None, **metrics: float) -> Measurement:
    return Measurement(
        step_count=step,
        elapsed_duration=elapsed,
        metrics=[MeasurementMetric(metric_id=k, value=v) for k, v in metrics.items()],
    )


def _table(measurements: list[Measurement]) -> list[tuple[int, float | None, dict[str, float]]]:
    return [
        (m.step_count, m.elapsed_duration, {x.metric_id: x.value for x in m.metrics})
        for m in measurements
    ]


def test_merge_groups_points_by_step_sorted_and_keeps_only_the_studys_metrics() -> None:
    points = [
        MetricPoint("loss", 20, 0.5, 12.0),
        MetricPoint("accuracy", 10, 0.7, 6.0),
        MetricPoint("loss", 10, 0.9, 5.0),
        MetricPoint("learning_rate", 10, 0.1, 5.0),  # not a metric of the study
        MetricPoint("loss", -1, 9.0, 0.0),  # a Measurement's step is at least 0
    ]
    merged = merge([], points, ["accuracy", "loss"])
    assert _table(merged) == [
        (10, 5.0, {"accuracy": 0.7, "loss": 0.9}),
        (20, 12.0, {"loss": 0.5}),
    ]
    # The metrics of a measurement come in the spec's order, whatever the points' order.
    assert [x.metric_id for x in merged[0].metrics] == ["accuracy", "loss"]


def test_merge_a_later_point_replaces_the_earlier_and_the_latest_elapsed_wins() -> None:
    existing = merge([], [MetricPoint("loss", 5, 1.0, 3.0)], ["loss"])
    merged = merge(
        existing,
        [MetricPoint("loss", 5, 0.8, 4.5), MetricPoint("loss", 6, 0.7, None)],
        ["loss"],
    )
    assert _table(merged) == [(5, 4.5, {"loss": 0.8}), (6, None, {"loss": 0.7})]
    # A point without elapsed seconds keeps the step's known elapsed time.
    again = merge(merged, [MetricPoint("loss", 5, 0.75, None)], ["loss"])
    assert _table(again)[0] == (5, 4.5, {"loss": 0.75})


def test_merge_keeps_non_finite_values_they_are_data() -> None:
    merged = merge([], [MetricPoint("loss", 1, math.nan, 1.0)], ["loss"])
    assert math.isnan(merged[0].metrics[0].value)


def test_final_last_is_the_last_measurement_holding_every_metric() -> None:
    spec = _spec("LAST_MEASUREMENT", ("loss", "MINIMIZE"), ("acc", "MAXIMIZE"))
    measurements = [_m(1, loss=0.9, acc=0.5), _m(2, loss=0.4, acc=0.8), _m(3, loss=0.3)]
    final = final_measurement(measurements, spec)
    assert final is not None
    assert final.step_count == 2  # step 3 lacks acc
    assert objective_values(final, spec) == (0.4, 0.8)


def test_final_unspecified_means_last() -> None:
    spec = _spec("MEASUREMENT_SELECTION_TYPE_UNSPECIFIED", ("loss", "MINIMIZE"))
    final = final_measurement([_m(1, loss=0.1), _m(2, loss=0.5)], spec)
    assert final is not None
    assert final.step_count == 2


@pytest.mark.parametrize(
    ("goal", "expected_step"), [("MINIMIZE", 2), ("MAXIMIZE", 3), ("GOAL_TYPE_UNSPECIFIED", 3)]
)
def test_final_best_follows_the_first_metrics_goal(goal: str, expected_step: int) -> None:
    spec = _spec("BEST_MEASUREMENT", ("score", goal))
    measurements = [_m(1, score=0.5), _m(2, score=0.1), _m(3, score=0.9), _m(4, score=0.4)]
    final = final_measurement(measurements, spec)
    assert final is not None
    assert final.step_count == expected_step


def test_final_best_takes_the_earliest_of_equals_and_never_a_nan() -> None:
    spec = _spec("BEST_MEASUREMENT", ("loss", "MINIMIZE"))
    measurements = [_m(1, loss=math.nan), _m(2, loss=0.3), _m(3, loss=0.3), _m(4, loss=math.nan)]
    final = final_measurement(measurements, spec)
    assert final is not None
    assert final.step_count == 2


def test_final_best_only_among_measurements_holding_every_metric() -> None:
    spec = _spec("BEST_MEASUREMENT", ("loss", "MINIMIZE"), ("acc", "MAXIMIZE"))
    measurements = [_m(1, loss=0.01), _m(2, loss=0.3, acc=0.5), _m(3, loss=0.2, acc=0.4)]
    final = final_measurement(measurements, spec)
    assert final is not None
    assert final.step_count == 3


def test_no_final_measurement_without_the_objective() -> None:
    spec = _spec("LAST_MEASUREMENT", ("loss", "MINIMIZE"))
    assert final_measurement([], spec) is None
    assert final_measurement([_m(1, acc=0.5)], spec) is None


def test_objective_values_names_a_missing_metric() -> None:
    spec = _spec("LAST_MEASUREMENT", ("loss", "MINIMIZE"), ("acc", "MAXIMIZE"))
    with pytest.raises(KeyError, match="acc"):
        objective_values(_m(1, loss=0.5), spec)
