"""Mapping OTLP exports to points: run ids, steps, labels, histograms (pure, no I/O)."""

import math
from datetime import UTC, datetime

from opentelemetry.proto.metrics.v1.metrics_pb2 import HistogramDataPoint

from ingestion.otlp.otlp_messages import (
    T0,
    attrs,
    export,
    gauge,
    histogram,
    number,
    sdk_export,
    total,
)
from mldiag_ingestion.otlp.service import map_export

RUN = "3f6c1a52-0b7e-4d4e-9a51-6f1f0c6a2b11"


def test_the_official_sdk_shape_pairs_each_metric_with_its_training_step() -> None:
    mapped = map_export(sdk_export(RUN, 7, loss=0.25, lr=0.1))
    assert mapped.rejected == 0
    points = {point.name: point for point in mapped.points}
    assert set(points) == {"loss", "lr"}  # training_step carries the step, it is no metric
    loss = points["loss"]
    assert (loss.run_id, loss.step, loss.value, loss.time_unix_nano) == (RUN, 7, 0.25, T0)
    assert dict(loss.labels) == {"unit": "1", "location": "us-central1"}
    assert loss.host == ""  # host.name is the run id there, not a host


def test_training_step_is_matched_on_the_attribute_set() -> None:
    request = export(
        gauge(
            "loss", number(0.5, phase="train", node_id=RUN), number(0.7, phase="eval", node_id=RUN)
        ),
        gauge(
            "training_step",
            number(10, phase="train", node_id=RUN),
            number(4, phase="eval", node_id=RUN),
        ),
    )
    steps = {dict(p.labels)["phase"]: p.step for p in map_export(request).points}
    assert steps == {"train": 10, "eval": 4}


def test_the_run_id_comes_from_the_point_then_the_resource() -> None:
    request = export(
        gauge("a", number(1.0)),
        gauge("b", number(2.0, node_id="other-run")),
        **{"mldiag.run_id": RUN, "host.name": "worker-3"},
    )
    runs = {p.name: (p.run_id, p.host) for p in map_export(request).points}
    assert runs == {"a": (RUN, "worker-3"), "b": ("other-run", "worker-3")}


def test_without_a_step_the_step_is_the_time_in_seconds() -> None:
    [point] = map_export(export(gauge("temp", number(3.0)), node_id=RUN)).points
    assert point.step == T0 // 1_000_000_000
    assert datetime.fromtimestamp(point.step, UTC).year == 2026


def test_sums_monotonic_or_not_and_int_values() -> None:
    request = export(
        total("tokens", number(1200), monotonic=True),
        total("queue", number(-3.5), monotonic=False),
        node_id=RUN,
    )
    assert {p.name: p.value for p in map_export(request).points} == {
        "tokens": 1200.0,
        "queue": -3.5,
    }


def test_histograms_become_count_sum_min_max() -> None:
    point = HistogramDataPoint(
        count=4,
        sum=10.0,
        min=1.0,
        max=4.0,
        bucket_counts=[1, 3],
        explicit_bounds=[2.0],
        time_unix_nano=T0,
        attributes=attrs(op="fwd"),
    )
    mapped = map_export(export(histogram("latency", point), node_id=RUN))
    values = {p.name: p.value for p in mapped.points}
    assert values == {
        "latency.count": 4.0,
        "latency.sum": 10.0,
        "latency.min": 1.0,
        "latency.max": 4.0,
    }
    assert {dict(p.labels)["op"] for p in mapped.points} == {"fwd"}


def test_a_histogram_without_sum_min_max_gives_its_count_only() -> None:
    point = HistogramDataPoint(count=2, time_unix_nano=T0)
    assert [p.name for p in map_export(export(histogram("h", point), node_id=RUN)).points] == [
        "h.count"
    ]


def test_points_without_a_run_id_are_rejected_with_a_reason() -> None:
    mapped = map_export(export(gauge("loss", number(1.0), number(2.0, node_id="BAD ID"))))
    assert mapped.points == []
    assert mapped.rejected == 2
    assert any("no run id" in problem and "node_id" in problem for problem in mapped.problems)
    assert any("not a valid run id" in problem for problem in mapped.problems)


def test_nan_is_kept() -> None:
    [point] = map_export(export(gauge("loss", number(math.nan)), node_id=RUN)).points
    assert math.isnan(point.value)
