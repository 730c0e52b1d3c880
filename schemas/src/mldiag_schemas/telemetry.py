"""Metric points: the HTTP write contract, the bus message that carries them, and the
query answers (raw pages, downsampled buckets, latest values, comparisons).

Limits (see ``docs/metrics.md`` for where each is enforced): metric names match
:data:`METRIC_NAME_PATTERN`; a series carries at most :data:`MAX_LABELS` labels with bounded
keys and values; one request may hold at most :data:`MAX_LABEL_SETS_PER_METRIC` distinct
label sets (host, process index, labels) per metric, and the registry keeps at most that
many series per (run, metric).
"""

import enum
import math
import re
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, StringConstraints, field_validator, model_validator
from pydantic_core import PydanticCustomError

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope, upcaster
from mldiag_schemas.ids import RunId

MAX_POINTS_PER_REQUEST = 100_000
"""Default upper bound on points in one write request (ingestion can lower it)."""

MAX_POINTS_PER_MESSAGE = 5_000
"""Points per bus message; keeps a message well under NATS's 1 MB default payload limit."""

METRIC_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_./:-]{0,199}$"
"""Metric names: an identifier-like token, at most 200 characters."""

MAX_LABELS = 8
"""Most labels on one series."""

LABEL_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"
"""Label keys: an identifier-like token, at most 64 characters."""

MAX_LABEL_VALUE_LENGTH = 128
"""Longest label value."""

MAX_HOST_LENGTH = 253
"""Longest host name (a DNS name)."""

MAX_PROCESS_INDEX = 1_000_000
"""Largest process index (rank) accepted."""

MAX_LABEL_SETS_PER_METRIC = 256
"""Most distinct (host, process index, labels) series of one metric: per request in
ingestion, per run in the registry."""

MAX_FUTURE_SKEW = timedelta(days=1)
"""How far past the time of receipt a point's timestamp may lie (clock skew allowance)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LABEL_KEY = re.compile(LABEL_KEY_PATTERN)


def to_unix_micros(when: datetime) -> int:
    """Microseconds since the Unix epoch of an aware (or UTC-naive) datetime."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH) // timedelta(microseconds=1)


def from_unix_micros(micros: int) -> datetime:
    """The UTC datetime of a microsecond Unix timestamp."""
    return _EPOCH + timedelta(microseconds=micros)


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise PydanticCustomError(
            "too_many_labels", "at most {limit} labels per series", {"limit": MAX_LABELS}
        )
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise PydanticCustomError(
                "invalid_label",
                "label key {key!r} must match {pattern}",
                {"key": key[:80], "pattern": LABEL_KEY_PATTERN},
            )
        if len(value) > MAX_LABEL_VALUE_LENGTH:
            raise PydanticCustomError(
                "invalid_label",
                "label {key!r}: values are at most {limit} characters",
                {"key": key, "limit": MAX_LABEL_VALUE_LENGTH},
            )
    return labels


class MetricSeries(Contract):
    """Points of one metric on one host (and process / label set), as parallel arrays."""

    name: str = Field(pattern=METRIC_NAME_PATTERN, description="Metric name, e.g. `loss`.")
    steps: list[int] = Field(description="Training step of each point (non-negative).")
    values: list[float] = Field(description="Value of each point; NaN and ±Inf are kept.")
    times: list[datetime] | None = Field(
        default=None, description="Time of each point; stamped on receipt when absent."
    )
    host: str = Field(
        default="", max_length=MAX_HOST_LENGTH, description="Host that recorded the points."
    )
    process_index: int | None = Field(
        default=None,
        ge=0,
        le=MAX_PROCESS_INDEX,
        description="Process (rank) on the host that recorded them, if several do.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="A small label set telling series of one metric apart, e.g. `device: 3`"
        f" (at most {MAX_LABELS} keys). Values are kept per label set, never averaged.",
    )

    _labels_bounded = field_validator("labels")(_check_labels)

    @model_validator(mode="after")
    def _columns_align(self) -> Self:
        if len(self.values) != len(self.steps):
            raise ValueError("steps and values must have the same length")
        if self.times is not None and len(self.times) != len(self.steps):
            raise ValueError("times and steps must have the same length")
        if self.steps and min(self.steps) < 0:
            raise ValueError("steps must be non-negative")
        return self


class WriteMetricsRequest(Contract):
    """Body of `POST .../machineLearningRuns/{run}/metrics:write`."""

    batch_id: uuid.UUID | None = Field(
        default=None,
        description="Client idempotency key: retrying a request with the same id stores once.",
    )
    series: list[MetricSeries] = Field(description="The points, grouped by metric and host.")

    def point_count(self) -> int:
        """How many points the request carries."""
        return sum(len(series.steps) for series in self.series)


class WriteMetricsResponse(Contract):
    """Answer of a metrics write, sent once JetStream has stored every point."""

    batch_id: uuid.UUID = Field(description="The batch id (the client's, or a new one).")
    accepted_points: int = Field(description="How many points were accepted.")


class IngestMetrics(Envelope):
    """A command to ingest a metrics write, for publishers inside the cluster.

    Subject: ``telemetry.metrics.ingest.<run id>`` on the TELEMETRY stream, so JetStream's
    publish ack means the write is stored. ingestion validates it exactly like an HTTP write
    and publishes the same :class:`MetricPointsReceived` chunks; a write that breaks a rule is
    dead-lettered with the reason. Without a ``batchId`` in the request the ``eventId`` is
    the batch id, so a redelivery publishes the same chunk ids.
    """

    type: Literal["telemetry.metrics.ingest"] = "telemetry.metrics.ingest"
    run_id: RunId = Field(description="The run the points belong to.")
    request: WriteMetricsRequest = Field(description="The write, as the HTTP body would be.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id


class MetricPoint(Contract):
    """One metric value at one step on one host (the row view of a message's columns)."""

    name: str = Field(description="Metric name.")
    step: int = Field(description="Training step.")
    value: float = Field(description="The value; NaN and ±Inf are kept.")
    time: datetime = Field(description="When the value was recorded (UTC).")
    host: str = Field(default="", description="Host that recorded it.")
    process_index: int | None = Field(default=None, description="Process on the host.")
    labels: dict[str, str] = Field(default_factory=dict, description="The series' labels.")

    @property
    def is_finite(self) -> bool:
        """Whether the value is a real number (not NaN, not ±Inf)."""
        return math.isfinite(self.value)


class MetricColumns(Contract):
    """One series' points inside a bus message, as parallel arrays (the columnar v2 shape).

    Times are integers (µs since the Unix epoch): parsing and storing them costs a fraction
    of what ISO strings do, and PostgreSQL keeps microseconds anyway.
    """

    name: str = Field(description="Metric name.")
    host: str = Field(default="", description="Host that recorded the points.")
    process_index: int | None = Field(default=None, description="Process on the host.")
    labels: dict[str, str] = Field(default_factory=dict, description="The series' labels.")
    steps: list[int] = Field(description="Step of each point.")
    values: list[float] = Field(description="Value of each point; NaN and ±Inf are kept.")
    times_unix_us: list[int] | None = Field(
        default=None,
        description="Time of each point in µs since the epoch; absent: the message's"
        " `occurredAt` (the time of receipt) for every point.",
    )

    @model_validator(mode="after")
    def _columns_align(self) -> Self:
        if len(self.values) != len(self.steps):
            raise ValueError("steps and values must have the same length")
        if self.times_unix_us is not None and len(self.times_unix_us) != len(self.steps):
            raise ValueError("timesUnixUs and steps must have the same length")
        return self


class MetricPointsReceived(Envelope):
    """A chunk of metric points for one run, accepted by ingestion (schema v2, columnar).

    Subject: ``telemetry.metrics.received.<run id>``. ``event_id`` is derived from the
    request's batch id and the chunk index, so a retried request dedupes. Version 1 carried
    one object per point (``points``); it is upcast on parse, and the constructor still
    accepts ``points=[MetricPoint, ...]`` for producers written against it.
    """

    SCHEMA_VERSION: ClassVar[int] = 2

    type: Literal["telemetry.metrics.received"] = "telemetry.metrics.received"
    schema_version: int = Field(default=2, ge=1, description="Version of this message's schema.")
    run_id: RunId = Field(description="The run the points belong to.")
    batch_id: uuid.UUID = Field(description="The write request this chunk came from.")
    chunk: int = Field(ge=0, description="Index of this chunk within its batch.")
    series: list[MetricColumns] = Field(description="The points, one entry per series.")

    @model_validator(mode="before")
    @classmethod
    def _accept_point_objects(cls, data: Any) -> Any:
        if isinstance(data, dict) and "points" in data and "series" not in data:
            return points_to_columns(dict(data))
        return data

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id

    def point_count(self) -> int:
        """How many points the message carries."""
        return sum(len(columns.steps) for columns in self.series)

    def iter_points(self) -> Iterator[MetricPoint]:
        """The points as row objects, series by series (slow: for small messages and tests)."""
        for columns in self.series:
            times = columns.times_unix_us
            for index, (step, value) in enumerate(zip(columns.steps, columns.values, strict=True)):
                yield MetricPoint(
                    name=columns.name,
                    step=step,
                    value=value,
                    time=self.occurred_at if times is None else from_unix_micros(times[index]),
                    host=columns.host,
                    process_index=columns.process_index,
                    labels=columns.labels,
                )

    @property
    def points(self) -> list[MetricPoint]:
        """Every point as a row object (see :meth:`iter_points`)."""
        return list(self.iter_points())


def _field(point: Any, snake: str, camel: str, default: Any = None) -> Any:
    if isinstance(point, Mapping):
        return point.get(camel, point.get(snake, default))
    return getattr(point, snake, default)


@upcaster("telemetry.metrics.received", 1)
def points_to_columns(data: dict[str, Any]) -> dict[str, Any]:
    """v1 → v2: group the per-point objects into one column set per series, in order."""
    grouped: dict[tuple[str, str, Any, str], dict[str, Any]] = {}
    for point in data.pop("points"):
        labels = dict(_field(point, "labels", "labels") or {})
        process_index = _field(point, "process_index", "processIndex")
        key = (
            _field(point, "name", "name"),
            _field(point, "host", "host", ""),
            process_index,
            repr(sorted(labels.items())),
        )
        columns = grouped.get(key)
        if columns is None:
            columns = grouped[key] = {
                "name": key[0],
                "host": key[1],
                "processIndex": process_index,
                "labels": labels,
                "steps": [],
                "values": [],
                "timesUnixUs": [],
            }
        time = _field(point, "time", "time")
        if isinstance(time, str):
            time = datetime.fromisoformat(time)
        columns["steps"].append(_field(point, "step", "step"))
        columns["values"].append(_field(point, "value", "value"))
        columns["timesUnixUs"].append(to_unix_micros(time))
    data["series"] = list(grouped.values())
    data["schemaVersion"] = 2
    data.pop("schema_version", None)
    return data


class SeriesPoint(Contract):
    """One stored point of a series."""

    step: int = Field(description="Training step.")
    value: float = Field(description="The value; NaN and ±Inf are kept.")
    time: datetime = Field(description="When it was recorded.")
    host: str = Field(description="Host that recorded it.")
    process_index: int | None = Field(default=None, description="Process on the host.")
    labels: dict[str, str] = Field(default_factory=dict, description="The series' labels.")


class ReadMetricSeriesResponse(Contract):
    """A page of one metric's points, in step order."""

    metric: str = Field(description="Metric name.")
    points: list[SeriesPoint] = Field(description="Points on this page.")
    next_page_token: str = Field(default="", description="Token of the next page; empty at end.")


class MetricSummary(Contract):
    """What is stored for one metric of a run."""

    name: str = Field(description="Metric name.")
    point_count: int = Field(description="Points stored.")
    last_step: int = Field(description="Highest step recorded.")


class ListMetricsResponse(Contract):
    """The metrics a run has recorded, by name."""

    metrics: list[MetricSummary] = Field(description="One entry per metric name.")


GroupBy = Literal["series", "host", "none"]
"""How downsampled lines are split: per stored series (host, process, labels), per host,
or one line for everything."""


class MetricBucket(Contract):
    """Aggregates of the points whose steps fall in ``[startStep, endStep]``.

    ``min``, ``max`` and ``mean`` cover the non-NaN values (±Inf included, so an overflow
    shows); they are null when every point is NaN. ``nanCount`` says how many were NaN.
    ``last`` is the value at the highest step in the bucket, NaN or not; ``lastTime`` is
    when it was recorded (only when the read asked for ``withTimes``).
    """

    start_step: int = Field(description="First step the bucket covers.")
    end_step: int = Field(description="Last step the bucket covers.")
    first_step: int = Field(description="Lowest step with a point in the bucket.")
    last_step: int = Field(description="Highest step with a point in the bucket.")
    count: int = Field(description="Points in the bucket.")
    nan_count: int = Field(description="Points whose value is NaN.")
    min: float | None = Field(description="Smallest non-NaN value.")
    max: float | None = Field(description="Largest non-NaN value.")
    mean: float | None = Field(description="Mean of the non-NaN values.")
    last: float = Field(description="Value at `lastStep`.")
    last_time: datetime | None = Field(
        default=None,
        description=(
            "When the point at `lastStep` was recorded (merged lines: of any series with a"
            " point there). Null unless the read asked for `withTimes=true`."
        ),
    )


class DownsampledSeries(Contract):
    """One line of a chart: a run's metric, for one group, in step buckets."""

    run_id: str = Field(description="The run.")
    host: str | None = Field(default=None, description="Host (null when merged over hosts).")
    process_index: int | None = Field(default=None, description="Process (series grouping).")
    labels: dict[str, str] | None = Field(
        default=None, description="Labels (series grouping only)."
    )
    buckets: list[MetricBucket] = Field(description="Buckets in step order; empty ones left out.")


_RANGE_START = (
    "First step of the range the buckets cover: `startStep`, raised to the lowest step"
    " recorded (edge buckets may reach past it); null when the metric has no points or the"
    " range misses them."
)
_RANGE_END = (
    "Last step of the range the buckets cover: `endStep`, lowered to the highest step"
    " recorded (edge buckets may reach past it); null when the metric has no points or the"
    " range misses them."
)


class DownsampleMetricResponse(Contract):
    """A metric downsampled to at most the requested number of step buckets per line."""

    metric: str = Field(description="Metric name.")
    bucket_width: int = Field(description="Steps per bucket (a multiple of the source's).")
    source: str = Field(description="`raw` or the rollup read, e.g. `rollup:256`.")
    group_by: GroupBy = Field(description="How lines are split.")
    start_step: int | None = Field(default=None, description=_RANGE_START)
    end_step: int | None = Field(default=None, description=_RANGE_END)
    series: list[DownsampledSeries] = Field(description="The lines.")


class LatestValue(Contract):
    """The value at the highest step of one series."""

    name: str = Field(description="Metric name.")
    host: str = Field(description="Host.")
    process_index: int | None = Field(default=None, description="Process on the host.")
    labels: dict[str, str] = Field(default_factory=dict, description="The series' labels.")
    step: int = Field(description="Highest step recorded.")
    value: float = Field(description="Its value; NaN and ±Inf are kept.")
    time: datetime = Field(description="When it was recorded.")
    point_count: int = Field(description="Points stored for the series.")


class LatestMetricsResponse(Contract):
    """Latest value of every series of every metric of a run."""

    values: list[LatestValue] = Field(description="One entry per series, by name.")


class CompareMetricsResponse(Contract):
    """One metric of several runs, downsampled on shared step buckets."""

    metric: str = Field(description="Metric name.")
    bucket_width: int = Field(description="Steps per bucket, the same for every run.")
    source: str = Field(description="`raw` or the rollup read.")
    group_by: GroupBy = Field(description="How lines are split within a run.")
    start_step: int | None = Field(default=None, description=_RANGE_START)
    end_step: int | None = Field(default=None, description=_RANGE_END)
    series: list[DownsampledSeries] = Field(description="The lines, run by run.")


# --- heartbeats ------------------------------------------------------------------------------

Fingerprint = Annotated[
    dict[
        Annotated[str, StringConstraints(max_length=100)],
        Annotated[str, StringConstraints(max_length=500)],
    ],
    Field(max_length=64),
]
"""A process's environment in short: at most 64 short entries."""

MAX_HEARTBEAT_INTERVAL_SECONDS = 3600.0
"""The longest interval a process may announce between two heartbeats."""


class HeartbeatRequest(Contract):
    """A process of a run saying it is alive (``POST .../machineLearningRuns/{run}:heartbeat``).

    The SDK sends one every ``intervalSeconds`` while the run is alive; a process whose next
    one is late is what the event detector's hang rule looks for.
    """

    host: str = Field(default="", max_length=253, description="The process's host.")
    process_index: int = Field(default=0, ge=0, le=1_000_000, description="Its process index.")
    pid: int = Field(default=0, ge=0, description="Its operating-system process id.")
    step: int | None = Field(
        default=None, ge=0, description="The last step it logged (none yet: null)."
    )
    interval_seconds: float = Field(
        gt=0, le=MAX_HEARTBEAT_INTERVAL_SECONDS, description="Seconds until the next heartbeat."
    )
    time: datetime | None = Field(
        default=None, description="When it was sent; the time of receipt when absent."
    )
    fingerprint: Fingerprint = Field(
        default_factory=dict,
        description="The process's environment in short (versions, XLA flags hash, packages"
        " hash, git commit): hosts of one run that disagree are config drift.",
    )


class RunHeartbeat(Envelope):
    """A heartbeat accepted by ingestion. Subject: ``telemetry.heartbeat.received.<run id>``;
    ``occurred_at`` is the time it was sent (or received, when the sender gave none)."""

    type: Literal["telemetry.heartbeat.received"] = "telemetry.heartbeat.received"
    run_id: RunId = Field(description="The run the process belongs to.")
    host: str = Field(default="", max_length=253, description="The process's host.")
    process_index: int = Field(default=0, ge=0, description="Its process index.")
    pid: int = Field(default=0, ge=0, description="Its operating-system process id.")
    step: int | None = Field(default=None, ge=0, description="The last step it logged.")
    interval_seconds: float = Field(gt=0, description="Seconds until the next heartbeat.")
    received_at: datetime = Field(description="When ingestion received it.")
    fingerprint: Fingerprint = Field(
        default_factory=dict, description="The process's environment in short."
    )

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id


class ProcessHeartbeat(Contract):
    """The latest heartbeat of one process of a run."""

    host: str = Field(description="The process's host.")
    process_index: int = Field(description="Its process index.")
    pid: int = Field(description="Its process id (a new one after a restart).")
    step: int | None = Field(description="The last step it logged.")
    interval_seconds: float = Field(description="Seconds it said would pass until the next.")
    last_seen_time: datetime = Field(description="When its latest heartbeat was sent.")
    first_seen_time: datetime = Field(
        description="Its first heartbeat with this pid (when the process started beating)."
    )
    overdue: bool = Field(
        description="True when more than twice its interval has passed since the latest."
    )


class ListHeartbeatsResponse(Contract):
    """The latest heartbeat of every process of a run, by host then process index."""

    heartbeats: list[ProcessHeartbeat] = Field(default_factory=list)


# --- lifecycle signals -----------------------------------------------------------------------


class SignalKind(enum.StrEnum):
    """Something that happened to a process of a run, outside its metrics."""

    SIGTERM = "SIGTERM"
    """The process was asked to stop (scheduler, preemption, a person)."""
    PREEMPTION_NOTICE = "PREEMPTION_NOTICE"
    """The platform announced a preemption or maintenance event ahead of time."""
    EXCEPTION = "EXCEPTION"
    """An exception escaped the workload's main thread."""
    PROCESS_EXITED = "PROCESS_EXITED"
    """A monitored process ended (its exit code or the signal that killed it)."""


class SignalRequest(Contract):
    """Body of ``POST .../machineLearningRuns/{run}:reportSignal``."""

    kind: SignalKind = Field(description="What happened.")
    host: str = Field(default="", max_length=253, description="The process's host.")
    process_index: int = Field(default=0, ge=0, le=1_000_000, description="Its process index.")
    pid: int = Field(default=0, ge=0, description="Its operating-system process id.")
    step: int | None = Field(default=None, ge=0, description="The last step it logged.")
    time: datetime | None = Field(
        default=None, description="When it happened; the time of receipt when absent."
    )
    exit_code: int | None = Field(default=None, description="Exit status (PROCESS_EXITED).")
    signal: str | None = Field(
        default=None, max_length=20, description="The signal that ended it, e.g. `SIGKILL`."
    )
    error_type: str | None = Field(
        default=None, max_length=200, description="Exception class (EXCEPTION)."
    )
    reason: str = Field(
        default="",
        max_length=100,
        description="A producer's classification, e.g. `oom_killed`, `preempted`.",
    )
    message: str = Field(
        default="",
        max_length=20_000,
        description="The exception text or the tail of the process's output.",
    )


class WorkloadSignalReported(Envelope):
    """A lifecycle signal accepted by ingestion. Subject: ``telemetry.signal.received.<run>``;
    ``occurred_at`` is when it happened."""

    type: Literal["telemetry.signal.received"] = "telemetry.signal.received"
    run_id: RunId = Field(description="The run the process belongs to.")
    signal: SignalRequest = Field(description="The signal as reported.")
    received_at: datetime = Field(description="When ingestion received it.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id
