"""A trial's measurements: the metric points it reported, one Measurement per step, and the
final one by ``measurementSelectionType``. Pure: no I/O."""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mldiag_schemas.tuning import (
    GoalType,
    Measurement,
    MeasurementMetric,
    MeasurementSelectionType,
    StudySpec,
)

__all__ = ["MetricPoint", "final_measurement", "merge", "objective_values"]


@dataclass(frozen=True)
class MetricPoint:
    """One reported value of a metric at a step, with the seconds since the trial started
    (None when unknown)."""

    metric_id: str
    step: int
    value: float
    elapsed_seconds: float | None


def merge(
    existing: Sequence[Measurement], points: Iterable[MetricPoint], metric_ids: Sequence[str]
) -> list[Measurement]:
    """``existing`` with ``points`` added: one Measurement per step, sorted by step, holding
    only the metrics of ``metric_ids`` (in that order). A later point for the same metric and
    step replaces the earlier; a step's ``elapsedDuration`` is the latest point's elapsed
    seconds there (when it has one). Points at negative steps are dropped (a Measurement's
    step is at least 0)."""
    wanted = set(metric_ids)
    values: dict[int, dict[str, float]] = {}
    elapsed: dict[int, float | None] = {}
    for measurement in existing:
        step = measurement.step_count
        values[step] = {m.metric_id: m.value for m in measurement.metrics if m.metric_id in wanted}
        elapsed[step] = measurement.elapsed_duration
    for point in points:
        if point.metric_id not in wanted or point.step < 0:
            continue
        values.setdefault(point.step, {})[point.metric_id] = point.value
        if point.elapsed_seconds is not None or point.step not in elapsed:
            elapsed[point.step] = point.elapsed_seconds
    return [
        Measurement(
            step_count=step,
            elapsed_duration=elapsed.get(step),
            metrics=[
                MeasurementMetric(metric_id=metric_id, value=values[step][metric_id])
                for metric_id in metric_ids
                if metric_id in values[step]
            ],
        )
        for step in sorted(values)
        if values[step]
    ]


def _holds(measurement: Measurement, metric_ids: Sequence[str]) -> bool:
    present = {m.metric_id for m in measurement.metrics}
    return all(metric_id in present for metric_id in metric_ids)


def final_measurement(measurements: Sequence[Measurement], spec: StudySpec) -> Measurement | None:
    """The trial's final measurement among those holding every metric of ``spec``:
    LAST_MEASUREMENT (and UNSPECIFIED) the last of them; BEST_MEASUREMENT the best by the
    first metric's goal (the earliest among equals; NaN is never better than a number).
    None when no measurement holds every metric."""
    metric_ids = [m.metric_id for m in spec.metrics]
    candidates = [m for m in measurements if _holds(m, metric_ids)]
    if not candidates:
        return None
    if spec.measurement_selection_type != MeasurementSelectionType.BEST_MEASUREMENT:
        return candidates[-1]
    objective = spec.metrics[0]
    sign = -1.0 if objective.goal == GoalType.MINIMIZE else 1.0

    def score(measurement: Measurement) -> float:
        value = next(m.value for m in measurement.metrics if m.metric_id == objective.metric_id)
        return -math.inf if math.isnan(value) else sign * value

    # max keeps the first of equal scores: the earliest measurement.
    return max(candidates, key=score)


def objective_values(measurement: Measurement, spec: StudySpec) -> tuple[float, ...]:
    """The values of ``spec``'s metrics in ``measurement``, in the spec's order. Raises
    KeyError naming a metric the measurement does not hold."""
    by_id = {m.metric_id: m.value for m in measurement.metrics}
    return tuple(by_id[m.metric_id] for m in spec.metrics)
