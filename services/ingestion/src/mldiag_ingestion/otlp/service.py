"""Mapping OTLP exports to bus messages: metrics to metric writes, ``mlrun_configs`` log
records to run configs (no HTTP, no gRPC, no NATS here).

Metric rules (see ``docs/otlp.md``):

- Run id: the data point attribute ``node_id``, else the resource's ``node_id``,
  ``mldiag.run_id`` or ``host.name`` (the official SDK sets ``host.name`` to the run id).
- Step: the official SDK sends a ``training_step`` gauge next to every metric, with the same
  attributes; a point takes the step of the ``training_step`` point with its attribute set in
  the same export (else the only step of its run in that export). Without one the step is the
  point's time in whole seconds since the epoch, so steps still grow.
- Gauges and sums map one point to one point; histograms (plain and exponential) and
  summaries become ``<name>.count``, ``<name>.sum`` (and ``.min`` / ``.max`` when set).
- Labels: the data point's attributes less the run id keys, validated like an HTTP write.

Log rules: a record whose attribute ``namespace`` is ``mlrun_configs`` carries configs: its
body is a map with ``userConfigs`` (the official SDK), ``softwareConfigs`` and/or
``hardwareConfigs``, values kept typed. Its run is found like a metric's (record attribute
``node_id``, then the resource). The official SDK turns every user config value into
``str(value)`` before sending; from its resource (``service.name=diagon_sdk_workload``)
those strings are read back as the Python literals they spell (``"0.01"`` → 0.01,
``"{'name': 'adam'}"`` → a map); other strings stay strings.

Every other record is a log line of its run (found the same way), written like
``logs:write`` writes them: its body as text (a structured body as compact JSON), cut to
``MAX_LOG_LINE_CHARS`` with a trailing ``…``, NUL replaced by U+FFFD; its time (else its
observed time, else the time of receipt); its severity number as a severity (1-8 DEBUG,
9-12 INFO, 13-16 WARNING, 17-20 ERROR, 21-24 CRITICAL, 0 DEFAULT); the resource's
``host.name`` as host (unless it is the run id) and ``process.pid`` as pid; stream OTLP.
"""

import ast
import hashlib
import json
import math
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import structlog
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, NumberDataPoint
from pydantic import JsonValue, ValidationError

from mldiag_ingestion.service import IngestionService
from mldiag_platform.bus import MessagePublisher
from mldiag_platform.errors import InvalidArgument
from mldiag_schemas.ids import derived_id, has_nul, is_run_id
from mldiag_schemas.logs import (
    MAX_LOG_BYTES_PER_REQUEST,
    MAX_LOG_LINE_CHARS,
    MAX_LOG_LINES_PER_REQUEST,
    LogLine,
    LogSeverity,
    LogStream,
    WriteLogsRequest,
)
from mldiag_schemas.runs import Configs, RunConfigsReported
from mldiag_schemas.telemetry import MetricSeries, WriteMetricsRequest, from_unix_micros

log = structlog.get_logger(__name__)

STEP_METRIC = "training_step"
"""The gauge the official SDK sends with each metric to carry its step."""
RUN_ID_ATTRIBUTE = "node_id"
RESOURCE_RUN_ID_KEYS = ("node_id", "mldiag.run_id", "host.name")
_DROPPED_LABELS = frozenset({"node_id", "mldiag.run_id"})
_NANOS_PER_SECOND = 1_000_000_000
DEDUPE_CACHE_SIZE = 100_000
CONFIGS_NAMESPACE = "mlrun_configs"
"""The ``namespace`` attribute of the official SDK's configs log record."""
_CONFIG_SECTIONS = ("userConfigs", "softwareConfigs", "hardwareConfigs")
_CONFIGS_ID_NAMESPACE = uuid.UUID("0c8f5f0e-5d43-4c6a-b0a1-7e3c2f9d4a61")
OFFICIAL_SDK_SERVICE = "diagon_sdk_workload"
"""The ``service.name`` of the official SDK's resource: its config values arrive as str()."""
_OTLP_LOGS_ID_NAMESPACE = uuid.UUID("9a3e5c71-4f2d-4b8a-a6e0-1d7c3b5e9f42")
_CUT = "…"
_FLOAT_WORDS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_LONGEST_LITERAL = 64 * 1024

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
                        if not math.isfinite(value):  # int() of NaN or ±Inf raises
                            mapped.reject(1, f"{STEP_METRIC} {value!r} is not a number of steps")
                            continue
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


def json_value(value: AnyValue) -> JsonValue:
    """An OTLP value as JSON: maps stay objects, numbers stay numbers (NaN included)."""
    kind = value.WhichOneof("value")
    if kind == "kvlist_value":
        return {pair.key: json_value(pair.value) for pair in value.kvlist_value.values}
    if kind == "array_value":
        return [json_value(item) for item in value.array_value.values]
    if kind == "bytes_value":
        return value.bytes_value.hex()
    if kind is None:
        return None
    scalar: JsonValue = getattr(value, kind)
    return scalar


@dataclass
class MappedLogs:
    """An export's configs reports, its other records as log lines by run, and how many
    records were refused."""

    reports: list[RunConfigsReported] = field(default_factory=list)
    lines: dict[str, list[LogLine]] = field(default_factory=dict)
    rejected: MappedExport = field(default_factory=MappedExport)

    def line_count(self) -> int:
        """Log lines mapped, over every run."""
        return sum(len(lines) for lines in self.lines.values())


def map_logs(request: ExportLogsServiceRequest, received_at: datetime) -> MappedLogs:
    """The configs records of an export as reports, every other record as a log line."""
    mapped = MappedLogs()
    for resource_logs in request.resource_logs:
        resource = _attributes(resource_logs.resource.attributes)
        resource_run = next(
            (resource[key] for key in RESOURCE_RUN_ID_KEYS if resource.get(key)), ""
        )
        host = resource.get("host.name", "")
        if host == resource_run:
            host = ""  # the official SDK's host.name is the run id, not a host
        pid_text = resource.get("process.pid", "")
        pid = int(pid_text) if pid_text.isascii() and pid_text.isdigit() else None
        stringified = resource.get("service.name") == OFFICIAL_SDK_SERVICE
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                attributes = _attributes(record.attributes)
                run_id = attributes.get(RUN_ID_ATTRIBUTE) or resource_run
                emitted = record.time_unix_nano or record.observed_time_unix_nano
                if attributes.get("namespace") != CONFIGS_NAMESPACE:
                    if not is_run_id(run_id):
                        mapped.rejected.reject(
                            1,
                            f"log record: {run_id!r} is not a valid run id (set 'node_id' or"
                            " the resource's 'mldiag.run_id' or 'host.name')",
                        )
                        continue
                    line = log_line(record.body, record.severity_number, emitted, received_at)
                    line = line.model_copy(update={"host": host[:253], "pid": pid})
                    mapped.lines.setdefault(run_id, []).append(line)
                    continue
                body = json_value(record.body)
                if stringified:
                    body = _restore_user_configs(body)
                report = _configs_report(run_id, body, emitted, received_at)
                if isinstance(report, str):
                    mapped.rejected.reject(1, report)
                else:
                    mapped.reports.append(report)
    return mapped


def log_line(
    body: AnyValue, severity_number: int, emitted_unix_nano: int, received_at: datetime
) -> LogLine:
    """A log record's body, severity and time as a line (host and pid left to the caller)."""
    if body.WhichOneof("value") == "string_value":
        text = body.string_value.rstrip("\r\n")
    elif body.WhichOneof("value") is None:
        text = ""
    else:
        text = json.dumps(json_value(body), ensure_ascii=False, separators=(",", ":"))
    if has_nul(text):  # no text column stores NUL; a lost line would be worse than a mark
        text = text.replace("\x00", "\ufffd")
    if len(text) > MAX_LOG_LINE_CHARS:
        text = text[: MAX_LOG_LINE_CHARS - len(_CUT)] + _CUT
    return LogLine(
        time=from_unix_micros(emitted_unix_nano // 1000) if emitted_unix_nano else received_at,
        stream=LogStream.OTLP,
        severity=severity(severity_number),
        text=text,
    )


def severity(number: int) -> LogSeverity:
    """OTLP's severity number as a severity (TRACE counts as DEBUG, FATAL as CRITICAL)."""
    if number <= 0:
        return LogSeverity.DEFAULT
    if number <= 8:
        return LogSeverity.DEBUG
    if number <= 12:
        return LogSeverity.INFO
    if number <= 16:
        return LogSeverity.WARNING
    if number <= 20:
        return LogSeverity.ERROR
    return LogSeverity.CRITICAL


def log_writes(run_id: str, lines: list[LogLine]) -> list[WriteLogsRequest]:
    """A run's lines from one export as writes within the request limits.

    Each write's batch id derives from the run and its lines, so an export the exporter
    retries publishes the same ids, which JetStream (and the registry) drop as duplicates.
    """
    writes: list[list[LogLine]] = [[]]
    size = 0
    for line in lines:
        length = len(line.text.encode())
        full = len(writes[-1]) >= MAX_LOG_LINES_PER_REQUEST
        if writes[-1] and (full or size + length > MAX_LOG_BYTES_PER_REQUEST):
            writes.append([])
            size = 0
        writes[-1].append(line)
        size += length
    requests = []
    for chunk in writes:
        digest = hashlib.sha256()
        for line in chunk:
            digest.update(line.model_dump_json().encode())
        batch_id = derived_id(_OTLP_LOGS_ID_NAMESPACE, run_id, digest.hexdigest())
        requests.append(WriteLogsRequest(batch_id=batch_id, lines=chunk))
    return requests


def _restore_user_configs(body: JsonValue) -> JsonValue:
    """The official SDK's configs body with each ``str(value)`` user config read back."""
    if not isinstance(body, dict):
        return body
    user = body.get("userConfigs")
    if not isinstance(user, dict):
        return body
    return {**body, "userConfigs": {key: python_literal(value) for key, value in user.items()}}


def python_literal(value: JsonValue) -> JsonValue:
    """A string read back as the Python literal it spells, when it spells one that JSON can
    hold (numbers, booleans, None, lists, tuples, string-keyed maps); else the value as is.
    """
    if not isinstance(value, str) or len(value) > _LONGEST_LITERAL:
        return value
    word = value.strip().lower()
    if word in _FLOAT_WORDS:  # str(float("nan")) is "nan", which is no literal
        return _FLOAT_WORDS[word]
    try:
        return _as_json(ast.literal_eval(value))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return value


def _as_json(value: object) -> JsonValue:
    """``value`` as JSON, or ``ValueError`` when it holds something JSON cannot (a set)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_as_json(item) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _as_json(item) for key, item in value.items()}
    raise ValueError(f"{type(value).__name__} is not JSON")


def _configs_report(
    run_id: str, body: JsonValue, emitted_unix_nano: int, received_at: datetime
) -> RunConfigsReported | str:
    """The report a configs record makes, or why it cannot make one.

    Its event id derives from the run, the record's time and its content: an export retried
    by the client is published once, while the same configs emitted again later are not
    mistaken for a retry.
    """
    if not is_run_id(run_id):
        return f"configs record: {run_id!r} is not a valid run id (set 'node_id' or 'host.name')"
    if not isinstance(body, dict) or not any(
        isinstance(body.get(s), dict) for s in _CONFIG_SECTIONS
    ):
        return "configs record: the body must be a map with userConfigs (or software/hardware)"
    sections = {name: body[name] for name in _CONFIG_SECTIONS if isinstance(body.get(name), dict)}
    if _holds_nul(sections):  # the registry keeps configs in jsonb, which refuses NUL
        return "configs record: keys and values must not contain NUL (U+0000)"
    try:
        configs = Configs.model_validate(sections)
    except ValidationError as exc:
        return f"configs record: {exc.errors()[0]['msg']}"
    content = json.dumps([run_id, emitted_unix_nano, configs.model_dump(mode="json")])
    return RunConfigsReported(
        event_id=derived_id(_CONFIGS_ID_NAMESPACE, content),
        occurred_at=from_unix_micros(emitted_unix_nano // 1000)
        if emitted_unix_nano
        else received_at,
        run_id=run_id,
        configs=configs,
    )


def _holds_nul(value: JsonValue) -> bool:
    if isinstance(value, str):
        return has_nul(value)
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    if isinstance(value, dict):
        return any(has_nul(key) or _holds_nul(item) for key, item in value.items())
    return False


def _series_key(point: OtlpPoint) -> tuple[str, str, str, _Attrs]:
    return point.run_id, point.name, point.host, point.labels


AdmitRun = Callable[[str], None]
"""Raises ``permission_denied`` for a run the caller may not write."""


def _any_run(run_id: str) -> None:
    """Every run is open (a caller not held to one run)."""


def _configs_open() -> None:
    """Configs may be written (a caller not checked for it)."""


class OtlpIngestion:
    """Writes mapped metric exports through :class:`IngestionService`, one write per run,
    and publishes configs records.

    A gauge is exported again at every collection until it changes, so a point equal to
    the last one stored for its series (same step, same value) is skipped; the cache is
    bounded and only updated once JetStream has acked.
    """

    def __init__(
        self,
        service: IngestionService,
        publisher: MessagePublisher,
        cache_size: int = DEDUPE_CACHE_SIZE,
    ) -> None:
        self._service = service
        self._publisher = publisher
        self._last: OrderedDict[tuple[str, str, str, _Attrs], tuple[int, float]] = OrderedDict()
        self._cache_size = cache_size

    async def export(
        self,
        request: ExportMetricsServiceRequest,
        received_at: datetime,
        admit_run: AdmitRun = _any_run,
    ) -> ExportResult:
        """Map, validate and publish an export; answer once every accepted point is stored.

        ``admit_run`` raises ``permission_denied`` for a run the caller may not write (a
        token held to one run): nothing of the export is published then.
        """
        mapped = map_export(request)
        for run_id in sorted({point.run_id for point in mapped.points}):
            admit_run(run_id)
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
            try:
                result = await self._service.write_metrics(run_id, write, received_at)
            except InvalidArgument as exc:  # one run's limits must not fail the others
                mapped.reject(write.point_count(), f"run {run_id!r}: {exc.message}")
                continue
            accepted += result.accepted_points
            for rejection in result.rejected:
                mapped.reject(0, f"metric {rejection.name!r}: {rejection.reason}")
            mapped.rejected += result.rejected_points
            refused = {rejection.series_index for rejection in result.rejected}
            for index, one in enumerate(series):
                if index not in refused:  # a refused point must be refused again if resent
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

    async def export_logs(
        self,
        request: ExportLogsServiceRequest,
        received_at: datetime,
        admit_run: AdmitRun = _any_run,
        admit_configs: Callable[[], None] = _configs_open,
    ) -> ExportResult:
        """Publish the configs records and log lines of a logs export, one log write per
        run; answer once JetStream has them (``admit_run`` as for :meth:`export`;
        ``admit_configs`` raises ``permission_denied`` when the caller may not write the
        configs records it carries). Nothing is published unless every check passes."""
        mapped = map_logs(request, received_at)
        runs = sorted({report.run_id for report in mapped.reports} | set(mapped.lines))
        for run_id in runs:
            admit_run(run_id)
        if mapped.reports:
            admit_configs()
        if mapped.reports:
            await self._publisher.publish_many(mapped.reports)
        accepted = len(mapped.reports)
        for run_id, lines in mapped.lines.items():
            for write in log_writes(run_id, lines):
                # Mapping already kept each line within the limits; a run that fails here
                # would fail the same way on every retry, so it is reported, not retried.
                try:
                    result = await self._service.write_logs(run_id, write, received_at)
                except InvalidArgument as exc:
                    mapped.rejected.reject(len(write.lines), f"run {run_id!r}: {exc.message}")
                    continue
                accepted += result.accepted
        log.info(
            "otlp.logs_export",
            runs=runs,
            configs=len(mapped.reports),
            lines=mapped.line_count(),
            rejected=mapped.rejected.rejected,
        )
        problems = "; ".join(mapped.rejected.problems)
        return ExportResult(accepted, mapped.rejected.rejected, problems)

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
