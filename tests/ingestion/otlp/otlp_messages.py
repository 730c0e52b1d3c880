"""Builders of OTLP export requests for the receiver's tests."""

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

T0 = 1_796_000_000_000_000_000
"""A time in nanoseconds since the epoch (2026-12-1x)."""


def attrs(**values: str | int) -> list[KeyValue]:
    return [
        KeyValue(
            key=key,
            value=AnyValue(int_value=value)
            if isinstance(value, int)
            else AnyValue(string_value=value),
        )
        for key, value in values.items()
    ]


def number(value: float, time: int = T0, **attributes: str | int) -> NumberDataPoint:
    if isinstance(value, int):
        return NumberDataPoint(as_int=value, time_unix_nano=time, attributes=attrs(**attributes))
    return NumberDataPoint(as_double=value, time_unix_nano=time, attributes=attrs(**attributes))


def gauge(name: str, *points: NumberDataPoint) -> Metric:
    return Metric(name=name, gauge=Gauge(data_points=points))


def total(name: str, *points: NumberDataPoint, monotonic: bool = True) -> Metric:
    return Metric(name=name, sum=Sum(data_points=points, is_monotonic=monotonic))


def histogram(name: str, *points: HistogramDataPoint) -> Metric:
    return Metric(name=name, histogram=Histogram(data_points=points))


def export(*metrics: Metric, **resource: str) -> ExportMetricsServiceRequest:
    return ExportMetricsServiceRequest(
        resource_metrics=[
            ResourceMetrics(
                resource=Resource(attributes=attrs(**resource)),
                scope_metrics=[ScopeMetrics(metrics=metrics)],
            )
        ]
    )


def sdk_export(
    run_id: str, step: int, time: int = T0, **metrics: float
) -> ExportMetricsServiceRequest:
    """An export shaped like the official SDK's: gauges plus a training_step per label set."""
    common = {"unit": "1", "node_id": run_id, "location": "us-central1"}
    gauges = [gauge(name, number(value, time, **common)) for name, value in metrics.items()]
    gauges.append(gauge("training_step", number(step, time, **common)))
    return export(*gauges, **{"service.name": "diagon_sdk_workload", "host.name": run_id})
