"""Builders of OTLP export requests for the receiver's tests."""

from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
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


def any_value(value: Any) -> AnyValue:
    """A JSON-like Python value as OTLP's AnyValue, as the OpenTelemetry SDK encodes it."""
    if isinstance(value, dict):
        pairs = [KeyValue(key=k, value=any_value(v)) for k, v in value.items()]
        return AnyValue(kvlist_value=KeyValueList(values=pairs))
    if isinstance(value, list):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=value)


def log_record(body: Any, time: int = T0, **attributes: str | int) -> LogRecord:
    return LogRecord(time_unix_nano=time, body=any_value(body), attributes=attrs(**attributes))


def logs_export(*records: LogRecord, **resource: str) -> ExportLogsServiceRequest:
    return ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=attrs(**resource)),
                scope_logs=[ScopeLogs(log_records=records)],
            )
        ]
    )


def sdk_configs_export(
    run_id: str, user_configs: dict[str, Any], time: int = T0
) -> ExportLogsServiceRequest:
    """The official SDK's configs record: ``{"userConfigs": ...}`` with every value turned
    into ``str(value)`` as the SDK does, attribute namespace mlrun_configs."""
    stringified = {key: str(value) for key, value in user_configs.items()}
    record = log_record({"userConfigs": stringified}, time, namespace="mlrun_configs")
    return logs_export(record, **{"service.name": "diagon_sdk_workload", "host.name": run_id})
