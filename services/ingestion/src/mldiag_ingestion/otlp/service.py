"""Mapping OTLP metric exports to metric writes (no HTTP, no gRPC, no NATS here).

Rules (see ``docs/otlp.md``):

- Run id: the data point attribute ``node_id``, else the resource's ``node_id``,
  ``mldiag.run_id`` or ``host.name`` (the official SDK sets ``host.name`` to the run id).
- Step: the official SDK sends a ``training_step`` gauge next to every metric, with the same
  attributes; a point takes the step of the ``training_step`` point with its attribute set in
  the same export (else the only step of its run in that export). Without one the step is the
  point's time in whole seconds since the epoch, so steps still grow.
- Gauges and sums map one point to one point; histograms (plain and exponential) and
  summaries become ``<name>.count``, ``<name>.sum`` (and ``.min`` / ``.max`` when set).
- Labels: the data point's attributes less the run id keys, validated like an HTTP write.
"""

import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import structlog
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, NumberDataPoint
from pydantic import ValidationError

from mldiag_ingestion.service import IngestionService
from mldiag_schemas.ids import is_run_id
from mldiag_schemas.telemetry import MetricSeries, WriteMetricsRequest, from_unix_micros

log = structlog.get_logger(__name__)

STEP_METRIC = "training_step"
"""The gauge the official SDK sends with each metric to carry its step."""
RUN_ID_ATTRIBUTE = "node_id"
RESOURCE_RUN_ID_KEYS = ("node_id", "mldiag.run_id", "host.name")
_DROPPED_LABELS = frozenset({"node_id", "mldiag.run_id"})
_NANOS_PER_SECOND = 1_000_000_000
DEDUPE_CACHE_SIZE = 100_000

_Attrs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class OtlpPoint:
    """One value mapped from an OTLP data point, before it is grouped into series."""

    run_id: str
    name: str
    step: int
    value: float
    time_unix_nano: int
    host: str
    labels: _Attrs


@dataclass
class MappedExport:
    """An export's points by run, and what could not be mapped (OTLP partial success)."""

    points: list[OtlpPoint] = field(default_factory=list)
    rejected: int = 0
    problems: list[str] = field(default_factory=list)

    def reject(self, count: int, problem: str) -> None:
        """Count ``count`` points as rejected, keeping the first few reasons."""
        self.rejected += count
        if problem not in self.problems and len(self.problems) < 5:
            self.problems.append(problem)


@dataclass(frozen=True)
class ExportResult:
    """What the receiver answers: OTLP's ``partial_success``."""

    accepted_points: int
    rejected_points: int
    error_message: str


def _text(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "int_value":
        return str(value.int_value)
    if kind == "double_value":
        return repr(value.double_value)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return str(value).strip()  # arrays and maps: their text form, bounded by the label rules


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, str]:
    return {pair.key: _text(pair.value) for pair in pairs}


def _number(point: NumberDataPoint) -> float:
    return float(point.as_int) if point.WhichOneof("value") == "as_int" else point.as_double


def _values(metric: Metric) -> Iterator[tuple[str, Sequence[KeyValue], int, float]]:
    """(name, attributes, time, value) of every value a metric carries."""
    kind = metric.WhichOneof("data")
    name = metric.name
    if kind == "gauge":
        for number in metric.gauge.data_points:
            yield name, number.attributes, number.time_unix_nano, _number(number)
    elif kind == "sum":
        for number in metric.sum.data_points:
            yield name, number.attributes, number.time_unix_nano, _number(number)
    elif kind in ("histogram", "exponential_histogram"):
        points = (
            metric.histogram.data_points
            if kind == "histogram"
            else metric.exponential_histogram.data_points
        )
        for hist in points:
            yield f"{name}.count", hist.attributes, hist.time_unix_nano, float(hist.count)
            if hist.HasField("sum"):
                yield f"{name}.sum", hist.attributes, hist.time_unix_nano, hist.sum
            if hist.HasField("min"):
                yield f"{name}.min", hist.attributes, hist.time_unix_nano, hist.min
            if hist.HasField("max"):
                yield f"{name}.max", hist.attributes, hist.time_unix_nano, hist.max
    elif kind == "summary":
        for summary in metric.summary.data_points:
            time = summary.time_unix_nano
            yield f"{name}.count", summary.attributes, time, float(summary.count)
            yield f"{name}.sum", summary.attributes, time, summary.sum


def map_export(request: ExportMetricsServiceRequest) -> MappedExport:
    """Map every data point of an export to points; unmappable ones are counted as rejected."""
    mapped = MappedExport()
    for resource_metrics in request.resource_metrics:
        resource = _attributes(resource_metrics.resource.attributes)
        resource_run = next(
            (resource[key] for key in RESOURCE_RUN_ID_KEYS if resource.get(key)), ""
        )
        host = resource.get("host.name", "")
        if host == resource_run:
            host = ""  # the official SDK's host.name is the run id, not a host
        values: list[tuple[str, str, _Attrs, int, float]] = []
        steps: dict[tuple[str, _Attrs], int] = {}
        run_steps: dict[str, set[int]] = {}
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for name, pairs, time, value in _values(metric):
                    attributes = _attributes(pairs)
                    run_id = attributes.get(RUN_ID_ATTRIBUTE) or resource_run
                    labels = tuple(
                        sorted((k, v) for k, v in attributes.items() if k not in _DROPPED_LABELS)
                    )
                    if name == STEP_METRIC:
                        steps[run_id, labels] = int(value)
                        run_steps.setdefault(run_id, set()).add(int(value))
                    else:
                        values.append((run_id, name, labels, time, value))
        for run_id, name, labels, time, value in values:
            if not run_id:
                mapped.reject(
                    1,
                    f"metric {name!r}: no run id; set the data point attribute 'node_id' or"
                    " the resource attribute 'mldiag.run_id' (or 'host.name')",
                )
                continue
            if not is_run_id(run_id):
                mapped.reject(1, f"metric {name!r}: {run_id!r} is not a valid run id")
                continue
            step = steps.get((run_id, labels))
            if step is None:
                only = run_steps.get(run_id, set())
                step = next(iter(only)) if len(only) == 1 else time // _NANOS_PER_SECOND
            mapped.points.append(OtlpPoint(run_id, name, step, value, time, host, labels))
    return mapped


def _series_key(point: OtlpPoint) -> tuple[str, str, str, _Attrs]:
    return point.run_id, point.name, point.host, point.labels


class OtlpIngestion:
    """Writes mapped exports through :class:`IngestionService`, one write per run.

    A gauge is exported again at every collection until it changes, so a point equal to
    the last one stored for its series (same step, same value) is skipped; the cache is
    bounded and only updated once JetStream has acked.
    """

    def __init__(self, service: IngestionService, cache_size: int = DEDUPE_CACHE_SIZE) -> None:
        self._service = service
        self._last: OrderedDict[tuple[str, str, str, _Attrs], tuple[int, float]] = OrderedDict()
        self._cache_size = cache_size

    async def export(
        self, request: ExportMetricsServiceRequest, received_at: datetime
    ) -> ExportResult:
        """Map, validate and publish an export; answer once every accepted point is stored."""
        mapped = map_export(request)
        fresh = [point for point in mapped.points if not self._seen(point)]
        by_run: dict[str, dict[tuple[str, str, str, _Attrs], list[OtlpPoint]]] = {}
        for point in fresh:
            by_run.setdefault(point.run_id, {}).setdefault(_series_key(point), []).append(point)
        accepted = 0
        for run_id, grouped in by_run.items():
            series: list[MetricSeries] = []
            for (_, name, host, labels), points in grouped.items():
                try:
                    series.append(_series(name, host, labels, points, received_at))
                except ValidationError as exc:
                    mapped.reject(len(points), f"metric {name!r}: {exc.errors()[0]['msg']}")
            if not series:
                continue
            write = WriteMetricsRequest(batch_id=uuid.uuid4(), series=series)
            result = await self._service.write_metrics(run_id, write, received_at)
            accepted += result.accepted_points
            for one in series:
                self._remember(grouped[run_id, one.name, one.host, _labels(one)][-1])
        skipped = len(mapped.points) - len(fresh)
        log.info(
            "otlp.export",
            runs=sorted(by_run),
            accepted=accepted,
            unchanged=skipped,
            rejected=mapped.rejected,
        )
        return ExportResult(accepted, mapped.rejected, "; ".join(mapped.problems))

    def _seen(self, point: OtlpPoint) -> bool:
        last = self._last.get(_series_key(point))
        return last is not None and last == (point.step, point.value)

    def _remember(self, point: OtlpPoint) -> None:
        key = _series_key(point)
        self._last[key] = (point.step, point.value)
        self._last.move_to_end(key)
        while len(self._last) > self._cache_size:
            self._last.popitem(last=False)


def _labels(series: MetricSeries) -> _Attrs:
    return tuple(sorted(series.labels.items()))


def _series(
    name: str, host: str, labels: _Attrs, points: list[OtlpPoint], received_at: datetime
) -> MetricSeries:
    return MetricSeries.model_validate(
        {
            "name": name,
            "host": host,
            "labels": dict(labels),
            "steps": [point.step for point in points],
            "values": [point.value for point in points],
            "times": [
                from_unix_micros(point.time_unix_nano // 1000)
                if point.time_unix_nano
                else received_at
                for point in points
            ],
        }
    )
