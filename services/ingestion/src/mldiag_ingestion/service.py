"""Turning a validated write request into bus messages (no HTTP, no NATS client here)."""

import uuid
from array import array
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import structlog
from prometheus_client import Counter
from pydantic import ValidationError
from pydantic_core import TzInfo

from mldiag_ingestion.errors import (
    InvalidBatch,
    InvalidLabels,
    InvalidLogs,
    InvalidMetricName,
    InvalidRunId,
    TimestampInFuture,
    TooManyLabelValues,
    TooManyLogLines,
    TooManyPoints,
)
from mldiag_ingestion.frames import Float64s, FrameWrite, Int64s, SeriesColumns
from mldiag_platform.bus import MessagePublisher
from mldiag_platform.errors import InvalidArgument
from mldiag_schemas.ids import derived_id, has_nul, is_run_id
from mldiag_schemas.logs import (
    MAX_LOG_BYTES_PER_REQUEST,
    MAX_LOG_LINES_PER_REQUEST,
    LogLine,
    LogLinesReceived,
    WriteLogsRequest,
    WriteLogsResponse,
)
from mldiag_schemas.telemetry import (
    MAX_FUTURE_SKEW,
    MAX_LABEL_SETS_PER_METRIC,
    MAX_LISTED_REJECTIONS,
    MAX_POINTS_PER_MESSAGE,
    MAX_STEP,
    MIN_TIME,
    MIN_TIME_US,
    HeartbeatRequest,
    IngestMetrics,
    MetricColumns,
    MetricPointsReceived,
    MetricSeries,
    RejectedPoints,
    RunHeartbeat,
    SignalRequest,
    WorkloadSignalReported,
    WriteMetricsRequest,
    WriteMetricsResponse,
)

log = structlog.get_logger(__name__)

CHUNK_ID_NAMESPACE = uuid.UUID("a4c1d7a2-6f0e-4a9b-8f43-9f2b8f1c3d10")
HEARTBEAT_ID_NAMESPACE = uuid.UUID("5b0e2f1c-8d3a-4e7b-9c61-2a4f6d8e0b13")
SIGNAL_ID_NAMESPACE = uuid.UUID("c3e8a1d4-2b7f-4f60-a9d5-7e1b3c5f8a21")
LOG_CHUNK_ID_NAMESPACE = uuid.UUID("6d2b9e4f-1a7c-4e35-8b0d-3f5a7c9e1b24")
MAX_METRIC_MESSAGE_BYTES = 768 * 1024
"""The most one :class:`MetricPointsReceived` frame may hold (estimated from its series'
names and labels and 24 bytes a point): below NATS's default 1 MiB ``max_payload``."""
MAX_LOG_MESSAGE_BYTES = 768 * 1024
"""The most JSON one :class:`LogLinesReceived` may hold: below NATS's default 1 MiB
``max_payload`` with room for headers. A batch that serialises larger (4 MB of text is
allowed) is published in chunks."""
POINTS = Counter(
    "mldiag_ingest_points",
    "Metric points in writes, by outcome: accepted (published) or rejected (refused and listed"
    " in the answer; a request refused whole counts as a 4xx, not here).",
    ["outcome"],
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INT64_MAX = 2**63 - 1
_MICROSECOND = timedelta(microseconds=1)


class IngestionService:
    """Accepts metric writes: checks limits, chunks them, publishes, waits for the acks."""

    def __init__(
        self,
        publisher: MessagePublisher,
        max_points_per_request: int,
        max_label_sets_per_metric: int = MAX_LABEL_SETS_PER_METRIC,
        max_future_skew: timedelta = MAX_FUTURE_SKEW,
    ) -> None:
        self._publisher = publisher
        self._max_points = max_points_per_request
        self._max_label_sets = max_label_sets_per_metric
        self._max_skew = max_future_skew

    async def write_metrics(
        self, run_id: str, request: WriteMetricsRequest, received_at: datetime
    ) -> WriteMetricsResponse:
        """Publish the request's good points; return only once JetStream has stored them all.

        Series the request left out while parsing and points out of range (steps, times) are
        refused and listed in the answer; everything else is published, so whatever the
        answer counts as accepted is stored. Every check runs before anything is published,
        so a request refused as a whole (limits) leaves nothing behind. A request with
        nothing good in it publishes nothing: see :func:`refuse_if_nothing_accepted`.
        """
        _check_run_id(run_id)
        refused = list(request.refused_series)
        count = request.point_count() + sum(rejection.rejected_points for rejection in refused)
        self._check_limits(count, request.series)
        columns: list[MetricColumns] = []
        for index, series in zip(request.series_indexes(), request.series, strict=True):
            kept, rejections = self._columns(index, series, received_at)
            refused.extend(rejections)
            if kept.steps:
                columns.append(kept)
        return await self._publish(run_id, request.batch_id, columns, refused, received_at)

    async def write_metric_frame(
        self, run_id: str, write: FrameWrite, received_at: datetime
    ) -> WriteMetricsResponse:
        """:meth:`write_metrics` for a write sent as a binary frame: the same limits, the
        same refusals (series and points, same codes and indexes), the same messages, with
        the points checked and sliced in numpy rather than one Python object each."""
        _check_run_id(run_id)
        refused = list(write.refused)
        self._check_limits(write.total_points, write.series)
        latest = _micros(received_at + self._max_skew)
        columns: list[MetricColumns] = []
        for index, series, points in zip(write.indexes, write.series, write.columns, strict=True):
            kept, rejections = self._frame_columns(index, series, points, latest)
            refused.extend(rejections)
            if kept is not None:
                columns.append(kept)
        return await self._publish(run_id, write.batch_id, columns, refused, received_at)

    def _check_limits(self, count: int, series: Sequence[MetricSeries]) -> None:
        if count > self._max_points:
            raise TooManyPoints(
                f"{count} points in one request; the limit is {self._max_points}: split it"
            )
        self._check_label_sets(series)

    async def _publish(
        self,
        run_id: str,
        batch_id: uuid.UUID | None,
        columns: list[MetricColumns],
        refused: list[RejectedPoints],
        received_at: datetime,
    ) -> WriteMetricsResponse:
        """Publish the kept columns in chunks; the answer once JetStream has them all."""
        refused.sort(key=lambda rejection: rejection.series_index)
        accepted = sum(len(kept.steps) for kept in columns)
        rejected_points = sum(rejection.rejected_points for rejection in refused)
        batch_id = batch_id or uuid.uuid4()
        messages = [
            MetricPointsReceived.model_construct(
                # Derived ids: a client retrying with the same batch id publishes duplicates
                # that JetStream drops and the registry ignores.
                event_id=derived_id(CHUNK_ID_NAMESPACE, str(batch_id), str(index)),
                occurred_at=received_at,
                run_id=run_id,
                batch_id=batch_id,
                chunk=index,
                series=chunk,
            )
            for index, chunk in enumerate(_chunks(columns, MAX_POINTS_PER_MESSAGE))
        ]
        if messages:
            await self._publisher.publish_many(messages)
        POINTS.labels("accepted").inc(accepted)
        POINTS.labels("rejected").inc(rejected_points)
        return WriteMetricsResponse(
            batch_id=batch_id,
            accepted_points=accepted,
            rejected_points=rejected_points,
            rejected=refused[:MAX_LISTED_REJECTIONS],
        )

    async def ingest(self, command: IngestMetrics, now: datetime) -> WriteMetricsResponse:
        """Handle a write published on the bus: the same checks and messages as over HTTP.

        Its event id stands in for a missing batch id and its time (never later than now)
        for the time of receipt, so a redelivered command publishes identical chunks.
        """
        request = command.request
        if request.batch_id is None:
            request = request.model_copy(update={"batch_id": command.event_id})
        result = await self.write_metrics(command.run_id, request, min(command.occurred_at, now))
        refuse_if_nothing_accepted(result)
        if result.rejected_points:
            log.warning(
                "ingestion.ingest.points_rejected",
                run_id=command.run_id,
                event_id=str(command.event_id),
                accepted=result.accepted_points,
                rejected=result.rejected_points,
                first=result.rejected[0].model_dump(mode="json"),
            )
        return result

    async def heartbeat(
        self, run_id: str, request: HeartbeatRequest, received_at: datetime
    ) -> RunHeartbeat:
        """Publish a process's heartbeat; return once JetStream has it.

        Its id derives from the process and the time it was sent, so a retried heartbeat is
        published once.
        """
        _check_run_id(run_id)
        sent_at = self._client_time("heartbeat", request.time, received_at)
        identity = (run_id, request.host, str(request.process_index), str(request.pid))
        heartbeat = RunHeartbeat(
            event_id=derived_id(HEARTBEAT_ID_NAMESPACE, *identity, sent_at.isoformat()),
            occurred_at=sent_at,
            run_id=run_id,
            host=request.host,
            process_index=request.process_index,
            pid=request.pid,
            step=request.step,
            interval_seconds=request.interval_seconds,
            received_at=received_at,
            fingerprint=request.fingerprint,
        )
        await self._publisher.publish_many([heartbeat])
        return heartbeat

    async def report_signal(
        self, run_id: str, request: SignalRequest, received_at: datetime
    ) -> WorkloadSignalReported:
        """Publish a lifecycle signal of a process; return once JetStream has it.

        Its id derives from the process, the kind and the time it happened, so a client's
        retry is published once (a signal without a time is stamped on receipt, and each
        attempt then counts as its own).
        """
        _check_run_id(run_id)
        occurred_at = self._client_time("signal", request.time, received_at)
        identity = (
            run_id,
            request.kind.value,
            request.host,
            str(request.process_index),
            str(request.pid),
            occurred_at.isoformat(),
        )
        if request.time is not None:  # as read: a naive time made UTC, for consumers' sake
            request = request.model_copy(update={"time": occurred_at})
        reported = WorkloadSignalReported(
            event_id=derived_id(SIGNAL_ID_NAMESPACE, *identity),
            occurred_at=occurred_at,
            run_id=run_id,
            signal=request,
            received_at=received_at,
        )
        await self._publisher.publish_many([reported])
        return reported

    async def write_logs(
        self, run_id: str, request: WriteLogsRequest, received_at: datetime
    ) -> WriteLogsResponse:
        """Publish a batch of log lines; return once JetStream has stored all of them.

        The batch is one :class:`LogLinesReceived` whose event id is the batch id, so a
        retried request is dropped by JetStream's dedupe (and ignored downstream). A batch
        too large for one bus message goes out in chunks with ids derived from the batch id
        and the chunk's index, as stable across retries. Every line is checked before
        anything is published: a refused request leaves nothing behind.
        """
        _check_run_id(run_id)
        lines = request.lines
        if len(lines) > MAX_LOG_LINES_PER_REQUEST:
            raise TooManyLogLines(
                f"{len(lines)} lines in one request; the limit is {MAX_LOG_LINES_PER_REQUEST}:"
                " split it"
            )
        size = 0
        for index, line in enumerate(lines):
            if problem := _unstorable(line):
                raise InvalidLogs(
                    f"line {index}: {problem}",
                    details=[{"field": f"lines.{index}", "problem": problem}],
                )
            size += len(line.text.encode())
        if size > MAX_LOG_BYTES_PER_REQUEST:
            raise TooManyLogLines(
                f"{size} bytes of text in one request; the limit is"
                f" {MAX_LOG_BYTES_PER_REQUEST}: split it"
            )
        if lines and any(line.time.tzinfo is None for line in lines):
            lines = [_utc_line(line) for line in lines]  # a naive client time is taken as UTC
        batch_id = request.batch_id or uuid.uuid4()
        if lines:
            await self._publisher.publish_many(_log_messages(run_id, batch_id, lines, received_at))
        return WriteLogsResponse(accepted=len(lines))

    def _client_time(self, what: str, sent: datetime | None, received_at: datetime) -> datetime:
        """A client's time of a heartbeat or signal (UTC if naive), or the time of receipt;
        one too far past receipt is a wrong clock, refused."""
        if sent is None:
            return received_at
        if sent.tzinfo is None:
            sent = sent.replace(tzinfo=UTC)
        if sent > received_at + self._max_skew:
            raise TimestampInFuture(
                f"{what} time {sent.isoformat()} is more than {self._max_skew} after"
                " receipt: check the client's clock",
                details=[{"field": "time"}],
            )
        return sent

    def _check_label_sets(self, request: Sequence[MetricSeries]) -> None:
        # The per-request half of the cardinality bound; the registry holds the per-run half.
        seen: dict[str, set[tuple[object, ...]]] = {}
        for series in request:
            key = (series.host, series.process_index, *sorted(series.labels.items()))
            sets = seen.setdefault(series.name, set())
            sets.add(key)
            if len(sets) > self._max_label_sets:
                raise TooManyLabelValues(
                    f"metric {series.name!r} has more than {self._max_label_sets} distinct"
                    " label sets (host, processIndex, labels) in one request",
                    details=[{"metric": series.name, "limit": self._max_label_sets}],
                )

    def _columns(
        self, index: int, series: MetricSeries, received_at: datetime
    ) -> tuple[MetricColumns, list[RejectedPoints]]:
        """The series' points the store can hold, and the ones refused (by reason).

        The bus contract checks the ranges of whole columns (min/max, in C); only a series
        it refuses, or with a time past receipt, pays for a Python pass over its points.
        """
        times = None if series.times is None else _all_micros(series.times)
        latest = _micros(received_at + self._max_skew)
        if not times or max(times) <= latest:
            try:
                return self._columns_of(series, series.steps, series.values, times), []
            except ValidationError as exc:
                # The series' own fields were checked when parsing: only points are left.
                if any(error["type"] not in _POINT_ERRORS for error in exc.errors()):
                    raise
        reasons: dict[int, str] = {}
        for point, step in enumerate(series.steps):
            if not 0 <= step <= MAX_STEP:
                reasons[point] = "step_out_of_range"
        for point, micros in enumerate(times or ()):
            if point not in reasons and micros < MIN_TIME_US:
                reasons[point] = "time_out_of_range"
            elif point not in reasons and micros > latest:
                reasons[point] = "timestamp_in_future"
        rejections = [
            self._rejection(index, series, code, [p for p, c in reasons.items() if c == code])
            for code in ("step_out_of_range", "time_out_of_range", "timestamp_in_future")
            if code in reasons.values()
        ]
        kept = [point for point in range(len(series.steps)) if point not in reasons]
        columns = self._columns_of(
            series,
            [series.steps[point] for point in kept],
            [series.values[point] for point in kept],
            None if times is None else [times[point] for point in kept],
        )
        return columns, rejections

    def _frame_columns(
        self, index: int, series: MetricSeries, points: SeriesColumns, latest: int
    ) -> tuple[MetricColumns | None, list[RejectedPoints]]:
        """A frame series' storable points (None: none) and the ones refused, by reason.

        The JSON path's rules in numpy: a negative step is out of range (int64 cannot hold
        one past PostgreSQL's bigint), then a time before the epoch, then one past receipt
        plus the allowed skew; each point is refused for the first rule it breaks.
        """
        steps, values, times = points.steps, points.values, points.times
        if not len(steps):
            return None, []
        clean = steps.min() >= 0 and (times is None or (times.min() >= 0 and times.max() <= latest))
        if clean:
            return self._frame_columns_of(series, steps, values, times), []
        bad_step = steps < 0
        masks = [("step_out_of_range", bad_step)]
        broken = bad_step
        if times is not None:
            early = (times < MIN_TIME_US) & ~broken
            broken = broken | early
            late = (times > latest) & ~broken
            broken = broken | late
            masks += [("time_out_of_range", early), ("timestamp_in_future", late)]
        rejections = [
            self._rejection(index, series, code, np.flatnonzero(mask).tolist(), int(count))
            for code, mask in masks
            if (count := np.count_nonzero(mask))
        ]
        keep = ~broken
        if not keep.any():
            return None, rejections
        kept = self._frame_columns_of(
            series, steps[keep], values[keep], None if times is None else times[keep]
        )
        return kept, rejections

    @staticmethod
    def _frame_columns_of(
        series: MetricSeries, steps: Int64s, values: Float64s, times: Int64s | None
    ) -> MetricColumns:
        # Checked here in numpy as the contract would: built without validating it again.
        # array.array columns, as a reader of a frame gets them (one copy each).
        return MetricColumns.model_construct(
            name=series.name,
            host=series.host,
            process_index=series.process_index,
            labels=series.labels,
            steps=_array("q", steps),
            values=_array("d", values),
            times_unix_us=None if times is None else _array("q", times),
        )

    @staticmethod
    def _columns_of(
        series: MetricSeries, steps: list[int], values: list[float], times: list[int] | None
    ) -> MetricColumns:
        return MetricColumns(
            name=series.name,
            host=series.host,
            process_index=series.process_index,
            labels=series.labels,
            steps=steps,
            values=values,
            times_unix_us=times,
        )

    def _rejection(
        self,
        index: int,
        series: MetricSeries,
        code: str,
        points: list[int],
        count: int | None = None,
    ) -> RejectedPoints:
        reason = {
            "step_out_of_range": f"steps must lie within 0 .. {MAX_STEP}",
            "time_out_of_range": f"times must not be before {MIN_TIME.isoformat()}",
            "timestamp_in_future": f"times must not be more than {self._max_skew} after"
            " receipt: check the client's clock",
        }[code]
        return RejectedPoints(
            series_index=index,
            name=series.name,
            point_indexes=points[:MAX_LISTED_REJECTIONS],
            rejected_points=len(points) if count is None else count,
            code=code,
            reason=reason,
        )


_POINT_ERRORS = frozenset({"step_out_of_range", "time_out_of_range"})
"""The bus contract's errors that a point, not its series, is to blame for."""

_ERROR_BY_CODE: dict[str, type[InvalidArgument]] = {
    "invalid_metric_name": InvalidMetricName,
    "invalid_labels": InvalidLabels,
    "timestamp_in_future": TimestampInFuture,
}


def refuse_if_nothing_accepted(result: WriteMetricsResponse) -> None:
    """Raise when a write refused points and accepted none: the caller's mistake, a 400
    (or a dead letter on the bus) naming every refusal, by the code of the first."""
    if result.accepted_points or not result.rejected:
        return
    first = result.rejected[0]
    error = _ERROR_BY_CODE.get(first.code, InvalidBatch)
    raise error(
        f"nothing in the write can be stored: series {first.series_index} ({first.name!r}):"
        f" {first.reason}",
        details=[rejection.model_dump(mode="json") for rejection in result.rejected],
    )


def _check_run_id(run_id: str) -> None:
    if not is_run_id(run_id):
        raise InvalidRunId(
            f"invalid run id {run_id!r}: use lower-case letters, digits and '-' (max 63)"
        )


def _unstorable(line: LogLine) -> str:
    """Why the registry could not store ``line`` (``""`` when it can)."""
    if has_nul(line.text) or has_nul(line.host):  # PostgreSQL's text cannot hold NUL
        return "the text or host holds a NUL character (U+0000)"
    if (line.pid or 0) > _INT64_MAX or (line.process_index or 0) > _INT64_MAX:
        return "pid and processIndex must fit in 64 bits"
    if line.time.tzinfo is not None:
        try:
            line.time.astimezone(UTC)
        except OverflowError:  # 0001-01-01T00:00:00+14:00 has no UTC equivalent
            return "the time has no UTC equivalent"
    return ""


def _utc_line(line: LogLine) -> LogLine:
    if line.time.tzinfo is not None:
        return line
    return line.model_copy(update={"time": line.time.replace(tzinfo=UTC)})


def _log_messages(
    run_id: str, batch_id: uuid.UUID, lines: list[LogLine], received_at: datetime
) -> list[LogLinesReceived]:
    """The batch as one message, or as chunks when it is too large for one."""
    whole = LogLinesReceived(event_id=batch_id, occurred_at=received_at, run_id=run_id, lines=lines)
    # An upper bound first (a character escaped in JSON takes at most 6 bytes, the other
    # fields of a line about 300): most batches need no trial serialisation.
    bound = sum(6 * len(line.text) + 6 * len(line.host) for line in lines) + 300 * len(lines)
    if bound + 1024 <= MAX_LOG_MESSAGE_BYTES or (
        len(whole.model_dump_json()) <= MAX_LOG_MESSAGE_BYTES
    ):
        return [whole]
    room = MAX_LOG_MESSAGE_BYTES - 1024  # the envelope's own fields
    chunks: list[list[LogLine]] = [[]]
    used = 0
    for line in lines:
        size = len(line.model_dump_json(by_alias=True)) + 1
        if chunks[-1] and used + size > room:
            chunks.append([])
            used = 0
        chunks[-1].append(line)
        used += size
    return [
        LogLinesReceived(
            event_id=derived_id(LOG_CHUNK_ID_NAMESPACE, str(batch_id), str(index)),
            occurred_at=received_at,
            run_id=run_id,
            lines=chunk,
        )
        for index, chunk in enumerate(chunks)
    ]


def _all_micros(times: list[datetime]) -> list[int]:
    # Subtracting datetimes that share one tzinfo object skips two utcoffset() calls per
    # point (half the cost of a write); that is exact for fixed offsets, which is all JSON
    # parsing produces.
    tz = times[0].tzinfo if times else None
    epoch = _EPOCH.astimezone(tz) if isinstance(tz, timezone | TzInfo) else _EPOCH
    try:
        return [(time - epoch) // _MICROSECOND for time in times]
    except TypeError:  # some are naive: per point, taking naive as UTC
        return [_micros(time) for time in times]


def _micros(when: datetime) -> int:
    if when.tzinfo is None:  # a naive client time is taken as UTC
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH) // _MICROSECOND


def _array(typecode: str, column: Int64s | Float64s) -> Any:
    packed = array(typecode)
    # frombytes takes a buffer of bytes: the array's memory seen as such (no copy)
    packed.frombytes(np.ascontiguousarray(column).view(np.uint8).data)
    return packed


_POINT_BYTES = 24
"""A point's bytes in a frame (step, value, time)."""


def _meta_bytes(columns: MetricColumns) -> int:
    """An upper bound of a series' header entry in a frame (JSON escapes a character of a
    name, host or label into at most 6 bytes)."""
    labels = sum(len(key) + len(value) for key, value in columns.labels.items())
    return 6 * (len(columns.name) + len(columns.host) + labels) + 100 + 8 * len(columns.labels)


def _chunks(series: list[MetricColumns], size: int) -> Iterator[list[MetricColumns]]:
    """Split the series into messages of at most ``size`` points, slicing long series, and
    of at most :data:`MAX_METRIC_MESSAGE_BYTES` (many small series of long names and labels
    would otherwise make a message of 5,000 points larger than NATS takes)."""
    chunk: list[MetricColumns] = []
    room = size
    budget = MAX_METRIC_MESSAGE_BYTES
    for columns in series:
        start = 0
        total = len(columns.steps)
        meta = _meta_bytes(columns)
        while start < total:
            if chunk and meta + _POINT_BYTES > budget:
                yield chunk
                chunk, room, budget = [], size, MAX_METRIC_MESSAGE_BYTES
            take = min(room, total - start, max((budget - meta) // _POINT_BYTES, 1))
            budget -= meta + take * _POINT_BYTES
            end = start + take
            whole = start == 0 and end == total
            chunk.append(
                columns
                if whole
                else columns.model_copy(
                    update={
                        "steps": columns.steps[start:end],
                        "values": columns.values[start:end],
                        "times_unix_us": None
                        if columns.times_unix_us is None
                        else columns.times_unix_us[start:end],
                    }
                )
            )
            start = end
            room -= take
            if room == 0 or budget < _POINT_BYTES:
                yield chunk
                chunk, room, budget = [], size, MAX_METRIC_MESSAGE_BYTES
    if chunk:
        yield chunk
