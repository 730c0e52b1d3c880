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
from array import array
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError, from_json

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope, upcaster
from mldiag_schemas.ids import RunId, has_nul

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

MAX_STEP = 2**63 - 1
"""Largest step: PostgreSQL's ``bigint``, where steps are stored."""

MAX_PID = 2**31 - 1
"""Largest process id: PostgreSQL's ``integer``, where heartbeats keep it."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

MIN_TIME = _EPOCH
"""Earliest time a point, heartbeat or signal may carry: no training run logged before the
Unix epoch, so an earlier time is a wrong clock or unit (and µs timestamps stay >= 0)."""

MAX_TIME = datetime(9999, 1, 1, tzinfo=UTC)
"""Latest time any telemetry message may carry, a year short of the end of Python's
datetimes so consumers can add intervals and windows to it without overflowing. Ingestion
holds client times to :data:`MAX_FUTURE_SKEW` past receipt, far below it."""

_LABEL_KEY = re.compile(LABEL_KEY_PATTERN)


def to_unix_micros(when: datetime) -> int:
    """Microseconds since the Unix epoch of an aware (or UTC-naive) datetime."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH) // timedelta(microseconds=1)


def from_unix_micros(micros: int) -> datetime:
    """The UTC datetime of a microsecond Unix timestamp."""
    return _EPOCH + timedelta(microseconds=micros)


MIN_TIME_US = to_unix_micros(MIN_TIME)
""":data:`MIN_TIME` in µs since the epoch."""

MAX_TIME_US = to_unix_micros(MAX_TIME)
""":data:`MAX_TIME` in µs since the epoch."""


def time_problem(when: datetime) -> str | None:
    """Why ``when`` cannot be stored (outside :data:`MIN_TIME`..:data:`MAX_TIME` once in UTC,
    naive taken as UTC), or None. Computed without converting, since the conversion itself
    overflows at the ends of the calendar (``0001-01-01T00:00:00+14:00``)."""
    micros = to_unix_micros(when)
    if MIN_TIME_US <= micros <= MAX_TIME_US:
        return None
    return f"time {when.isoformat()} is outside {MIN_TIME.isoformat()} .. {MAX_TIME.isoformat()}"


def _check_time(when: datetime) -> datetime:
    problem = time_problem(when)
    if problem is not None:
        raise PydanticCustomError("time_out_of_range", problem)
    return when


def _check_optional_time(when: datetime | None) -> datetime | None:
    return None if when is None else _check_time(when)


def _check_text(value: str) -> str:
    if has_nul(value):
        raise PydanticCustomError("text_has_nul", "text must not contain NUL (U+0000)")
    return value


StoredTime = Annotated[datetime, AfterValidator(_check_time)]
"""A time within :data:`MIN_TIME`..:data:`MAX_TIME` (what the store and consumers hold)."""

Text = Annotated[str, AfterValidator(_check_text)]
"""Free text as PostgreSQL can store it: anything but NUL."""


def _check_steps(steps: list[int]) -> list[int]:
    # min/max run in C: the whole column is checked without a Python step per point.
    if steps and (min(steps) < 0 or max(steps) > MAX_STEP):
        raise PydanticCustomError(
            "step_out_of_range", "steps must lie within 0 .. {limit}", {"limit": MAX_STEP}
        )
    return steps


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise PydanticCustomError(
            "too_many_labels", "at most {limit} labels per series", {"limit": MAX_LABELS}
        )
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key):  # fullmatch: `$` alone lets a "\n" end pass
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
        if has_nul(value):
            raise PydanticCustomError(
                "invalid_label", "label {key!r}: values must not contain NUL", {"key": key}
            )
    return labels


class MetricSeries(Contract):
    """Points of one metric on one host (and process / label set), as parallel arrays.

    A series that breaks a rule here (name, host, labels, process index, column lengths) is
    refused as a whole. Steps and times are checked point by point by ingestion, which
    refuses only the points out of range (see :class:`RejectedPoints`).
    """

    name: str = Field(pattern=METRIC_NAME_PATTERN, description="Metric name, e.g. `loss`.")
    steps: list[int] = Field(
        description=f"Training step of each point, 0 to {MAX_STEP} (PostgreSQL's bigint)."
    )
    values: list[float] = Field(description="Value of each point; NaN and ±Inf are kept.")
    times: list[datetime] | None = Field(
        default=None,
        description="Time of each point, from 1970-01-01T00:00:00Z to a day past receipt"
        " (a naive time is UTC); stamped on receipt when absent.",
    )
    host: Text = Field(
        default="",
        max_length=MAX_HOST_LENGTH,
        description="Host that recorded the points (no NUL).",
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
        return self


MAX_LISTED_REJECTIONS = 100
"""Most entries an answer lists in ``rejected`` (and point indexes in one entry); the
counts stay exact."""


class RejectedPoints(Contract):
    """Points of one series that were refused for one reason (a whole series, or some of its
    points by index); the rest of the request is accepted and stored."""

    series_index: int = Field(description="Index of the series in the request's `series`.")
    name: str = Field(description="The series' metric name as sent (empty when unreadable).")
    point_indexes: list[int] | None = Field(
        default=None,
        description="Indexes of the refused points in the series' arrays (at most"
        f" {MAX_LISTED_REJECTIONS} listed); null when the whole series was refused.",
    )
    rejected_points: int = Field(description="How many points this entry refuses.")
    code: str = Field(
        description="Why, as a stable code: `invalid_metric_name`, `invalid_labels`,"
        " `invalid_series` (the whole series); `step_out_of_range`, `time_out_of_range`,"
        " `timestamp_in_future` (points)."
    )
    reason: str = Field(description="Why, for people.")


class WriteMetricsRequest(Contract):
    """Body of `POST .../machineLearningRuns/{run}/metrics:write`."""

    batch_id: uuid.UUID | None = Field(
        default=None,
        description="Client idempotency key: retrying a request with the same id stores once.",
    )
    series: list[MetricSeries] = Field(description="The points, grouped by metric and host.")

    _refused: tuple[RejectedPoints, ...] = PrivateAttr(default=())

    def point_count(self) -> int:
        """How many points the request carries."""
        return sum(len(series.steps) for series in self.series)

    @property
    def refused_series(self) -> tuple[RejectedPoints, ...]:
        """The series :meth:`parse_keeping_good_series` left out (indexes as sent)."""
        return self._refused

    def series_indexes(self) -> list[int]:
        """Each kept series' index in the request as sent (series were left out before it)."""
        refused = {rejection.series_index for rejection in self._refused}
        total = len(self.series) + len(refused)
        return [index for index in range(total) if index not in refused]

    @classmethod
    def parse_keeping_good_series(cls, data: bytes | dict[str, Any]) -> Self:
        """Validate a write (JSON bytes or parsed), leaving out each series that breaks a rule
        and listing it in :attr:`refused_series`; raise ``ValidationError`` only when the
        request itself is malformed (not JSON, no ``series`` list, a bad ``batchId``).

        Valid requests take the fast path (one pass over the JSON); the second pass that
        sorts good series from bad ones runs only when some series is bad.
        """
        try:
            if isinstance(data, bytes):
                return cls.model_validate_json(data)
            return cls.model_validate(data)
        except ValidationError as exc:
            bad: dict[int, list[ErrorDetails]] = {}
            for error in exc.errors():
                location = error["loc"]
                if len(location) < 2 or location[0] != "series" or type(location[1]) is not int:
                    raise
                bad.setdefault(location[1], []).append(error)
            parsed = from_json(data) if isinstance(data, bytes) else data
            sent = parsed.get("series") if isinstance(parsed, dict) else None
            if not isinstance(sent, list):
                raise
            kept = [series for index, series in enumerate(sent) if index not in bad]
            model = cls.model_validate({**parsed, "series": kept})
            model._refused = tuple(
                _refusal(index, sent[index], bad[index]) for index in sorted(bad)
            )
            return model


def _refusal(index: int, series: object, errors: list[ErrorDetails]) -> RejectedPoints:
    """Why a whole series was refused, by its first problem."""
    first = errors[0]
    field = first["loc"][2] if len(first["loc"]) > 2 else ""
    if field == "name":
        code = "invalid_metric_name"
    elif field == "labels" or first["type"] in ("too_many_labels", "invalid_label"):
        code = "invalid_labels"
    else:
        code = "invalid_series"
    where = ".".join(str(part) for part in first["loc"][2:])
    name = series.get("name") if isinstance(series, dict) else None
    steps = series.get("steps") if isinstance(series, dict) else None
    return RejectedPoints(
        series_index=index,
        name=name[:200] if isinstance(name, str) else "",
        rejected_points=len(steps) if isinstance(steps, list) else 0,
        code=code,
        reason=f"{where}: {first['msg']}" if where else first["msg"],
    )


class WriteMetricsResponse(Contract):
    """Answer of a metrics write, sent once JetStream has stored every accepted point.

    Points are refused one series or one point at a time; what is accepted is stored even
    when some of the request is refused (a request with nothing to store gets a 400 instead).
    """

    batch_id: uuid.UUID = Field(description="The batch id (the client's, or a new one).")
    accepted_points: int = Field(description="How many points were accepted (and stored).")
    rejected_points: int = Field(default=0, description="How many points were refused.")
    rejected: list[RejectedPoints] = Field(
        default_factory=list,
        description=f"What was refused and why (the first {MAX_LISTED_REJECTIONS} entries).",
    )


class IngestMetrics(Envelope):
    """A command to ingest a metrics write, for publishers inside the cluster.

    Subject: ``telemetry.metrics.ingest.<run id>`` on the TELEMETRY stream, so JetStream's
    publish ack means the write is stored. ingestion validates it exactly like an HTTP write
    and publishes the same :class:`MetricPointsReceived` chunks: bad series and points are
    left out (and logged), the rest is stored; a write with nothing good in it is
    dead-lettered with the reason. Without a ``batchId`` in the request the ``eventId`` is
    the batch id, so a redelivery publishes the same chunk ids.
    """

    type: Literal["telemetry.metrics.ingest"] = "telemetry.metrics.ingest"
    run_id: RunId = Field(description="The run the points belong to.")
    request: WriteMetricsRequest = Field(description="The write, as the HTTP body would be.")

    # occurredAt stands in for the time of receipt: the time of points sent without one.
    _occurred_at_bounded = field_validator("occurred_at")(_check_time)

    @field_validator("request", mode="wrap")
    @classmethod
    def _keep_good_series(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # As over HTTP, one bad series must not take the good ones down with it.
        if isinstance(value, dict):
            return WriteMetricsRequest.parse_keeping_good_series(value)
        return handler(value)

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

    # A message read from a binary frame (mldiag_schemas.columnar) holds its columns as
    # array.array ('q' steps and times, 'd' values) rather than lists: they index, slice,
    # iterate and len() like lists, and np.asarray takes them without a per-point step.
    # Their ranges are checked all the same (messages.parse_message). (A comment, not the
    # docstring: the docstring is the contract's published description.)

    name: str = Field(pattern=METRIC_NAME_PATTERN, description="Metric name.")
    host: Text = Field(
        default="", max_length=MAX_HOST_LENGTH, description="Host that recorded the points."
    )
    process_index: int | None = Field(
        default=None, ge=0, le=MAX_PROCESS_INDEX, description="Process on the host."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="The series' labels.")
    steps: list[int] = Field(description=f"Step of each point, 0 to {MAX_STEP}.")
    values: list[float] = Field(description="Value of each point; NaN and ±Inf are kept.")
    times_unix_us: list[int] | None = Field(
        default=None,
        description="Time of each point in µs since the epoch (1970 to the year 9999);"
        " absent: the message's `occurredAt` (the time of receipt) for every point.",
    )

    # The store and the detector take these as they come: nothing out of range gets past here.
    _labels_bounded = field_validator("labels")(_check_labels)
    _steps_bounded = field_validator("steps")(_check_steps)

    @field_validator("times_unix_us")
    @classmethod
    def _times_bounded(cls, times: list[int] | None) -> list[int] | None:
        if times and (min(times) < MIN_TIME_US or max(times) > MAX_TIME_US):
            raise PydanticCustomError(
                "time_out_of_range",
                "times must lie within {low} .. {high} µs since the epoch",
                {"low": MIN_TIME_US, "high": MAX_TIME_US},
            )
        return times

    @model_validator(mode="after")
    def _columns_align(self) -> Self:
        if len(self.values) != len(self.steps):
            raise ValueError("steps and values must have the same length")
        if self.times_unix_us is not None and len(self.times_unix_us) != len(self.steps):
            raise ValueError("timesUnixUs and steps must have the same length")
        return self

    # Columns read from a frame are array.array; JSON and model_dump want lists. A model
    # serializer without a return annotation leaves the JSON Schema as it was.
    @model_serializer(mode="wrap")
    def _arrays_as_lists(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]  # noqa: ANN202
        steps: Any = self.steps  # typed list[...], but array.array when read from a frame
        values: Any = self.values
        times: Any = self.times_unix_us
        if isinstance(steps, array) or isinstance(values, array) or isinstance(times, array):
            return handler(
                self.model_copy(
                    update={
                        "steps": _as_list(steps),
                        "values": _as_list(values),
                        "times_unix_us": _as_list(times),
                    }
                )
            )
        return handler(self)


def _as_list(column: Any) -> Any:
    return column.tolist() if isinstance(column, array) else column


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

    # occurredAt is every point's time when a series has no times of its own.
    _occurred_at_bounded = field_validator("occurred_at")(_check_time)

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
    points = data.get("points")
    if not isinstance(points, list):  # not v1 after all: let validation name what is missing
        return data
    del data["points"]
    for point in points:
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
        Annotated[Text, StringConstraints(max_length=100)],
        Annotated[Text, StringConstraints(max_length=500)],
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

    host: Text = Field(default="", max_length=MAX_HOST_LENGTH, description="The process's host.")
    process_index: int = Field(
        default=0, ge=0, le=MAX_PROCESS_INDEX, description="Its process index."
    )
    pid: int = Field(default=0, ge=0, le=MAX_PID, description="Its operating-system process id.")
    step: int | None = Field(
        default=None, ge=0, le=MAX_STEP, description="The last step it logged (none yet: null)."
    )
    interval_seconds: float = Field(
        gt=0, le=MAX_HEARTBEAT_INTERVAL_SECONDS, description="Seconds until the next heartbeat."
    )
    time: StoredTime | None = Field(
        default=None,
        description="When it was sent (1970 on, at most a day past receipt); the time of"
        " receipt when absent.",
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
    host: Text = Field(default="", max_length=MAX_HOST_LENGTH, description="The process's host.")
    process_index: int = Field(
        default=0, ge=0, le=MAX_PROCESS_INDEX, description="Its process index."
    )
    pid: int = Field(default=0, ge=0, le=MAX_PID, description="Its operating-system process id.")
    step: int | None = Field(
        default=None, ge=0, le=MAX_STEP, description="The last step it logged."
    )
    interval_seconds: float = Field(
        gt=0,
        le=MAX_HEARTBEAT_INTERVAL_SECONDS,  # finite: the detector adds it to times
        description="Seconds until the next heartbeat.",
    )
    received_at: StoredTime = Field(description="When ingestion received it.")
    fingerprint: Fingerprint = Field(
        default_factory=dict, description="The process's environment in short."
    )

    _occurred_at_bounded = field_validator("occurred_at")(_check_time)

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
    host: Text = Field(default="", max_length=MAX_HOST_LENGTH, description="The process's host.")
    process_index: int = Field(
        default=0, ge=0, le=MAX_PROCESS_INDEX, description="Its process index."
    )
    pid: int = Field(default=0, ge=0, le=MAX_PID, description="Its operating-system process id.")
    step: int | None = Field(
        default=None, ge=0, le=MAX_STEP, description="The last step it logged."
    )
    time: StoredTime | None = Field(
        default=None,
        description="When it happened (1970 on, at most a day past receipt); the time of"
        " receipt when absent.",
    )
    exit_code: int | None = Field(
        default=None,
        ge=-(2**31),
        le=2**32 - 1,
        description="Exit status (PROCESS_EXITED): POSIX's 0-255, a negated signal number,"
        " or a Windows status (32 bits).",
    )
    signal: Text | None = Field(
        default=None, max_length=20, description="The signal that ended it, e.g. `SIGKILL`."
    )
    error_type: Text | None = Field(
        default=None, max_length=200, description="Exception class (EXCEPTION)."
    )
    reason: Text = Field(
        default="",
        max_length=100,
        description="A producer's classification, e.g. `oom_killed`, `preempted`.",
    )
    message: Text = Field(
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
    received_at: StoredTime = Field(description="When ingestion received it.")

    _occurred_at_bounded = field_validator("occurred_at")(_check_time)

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id
