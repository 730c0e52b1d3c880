"""Every bus message type, and how to write one to the wire and parse it back.

Metric points travel as a binary columnar frame (:mod:`mldiag_schemas.columnar`), every
other message as JSON; :func:`parse_message` tells them apart by the frame's magic, so old
JSON metric messages (v1 points, v2 columns) still parse.
"""

import json
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from mldiag_schemas import bus, columnar
from mldiag_schemas.analyses import AnalysisCompleted
from mldiag_schemas.envelope import Envelope, upcast
from mldiag_schemas.events import WorkloadEventOpened, WorkloadEventResolved, WorkloadEventUpdated
from mldiag_schemas.logs import LogLinesReceived
from mldiag_schemas.monitoring import MonitoringRulesChanged
from mldiag_schemas.profiling import (
    CaptureProfile,
    ProfileCaptureFinished,
    ProfileCaptureRequested,
    ProfilerSessionChanged,
    ProfilerSessionReported,
    XProfInstanceChanged,
)
from mldiag_schemas.replicas import (
    CustomJobCreated,
    CustomJobStateChanged,
    ExecutorAnnounced,
    ReplicaExited,
    ReplicaStarted,
    StartReplica,
    StopReplica,
)
from mldiag_schemas.runs import (
    RunConfigsReported,
    RunCreated,
    RunDeleted,
    RunPhaseChanged,
    RunUpdated,
)
from mldiag_schemas.telemetry import (
    MAX_STEP,
    MAX_TIME_US,
    MIN_TIME_US,
    IngestMetrics,
    MetricColumns,
    MetricPointsReceived,
    RunHeartbeat,
    WorkloadSignalReported,
)
from mldiag_schemas.tuning import TrialEnded, TuningJobCreated, TuningJobStateChanged

BusMessage = Annotated[
    MetricPointsReceived
    | IngestMetrics
    | RunHeartbeat
    | WorkloadSignalReported
    | RunConfigsReported
    | LogLinesReceived
    | RunCreated
    | RunUpdated
    | RunPhaseChanged
    | RunDeleted
    | MonitoringRulesChanged
    | WorkloadEventOpened
    | WorkloadEventUpdated
    | WorkloadEventResolved
    | AnalysisCompleted
    | ProfileCaptureRequested
    | CaptureProfile
    | ProfileCaptureFinished
    | ProfilerSessionReported
    | ProfilerSessionChanged
    | XProfInstanceChanged
    | CustomJobCreated
    | CustomJobStateChanged
    | StartReplica
    | StopReplica
    | ReplicaStarted
    | ReplicaExited
    | ExecutorAnnounced
    | TuningJobCreated
    | TuningJobStateChanged
    | TrialEnded,
    Field(discriminator="type"),
]
"""Any message on the bus, discriminated by ``type``."""

MESSAGE_TYPES: tuple[type[Envelope], ...] = (
    MetricPointsReceived,
    IngestMetrics,
    RunHeartbeat,
    WorkloadSignalReported,
    RunConfigsReported,
    LogLinesReceived,
    RunCreated,
    RunUpdated,
    RunPhaseChanged,
    RunDeleted,
    MonitoringRulesChanged,
    WorkloadEventOpened,
    WorkloadEventUpdated,
    WorkloadEventResolved,
    AnalysisCompleted,
    ProfileCaptureRequested,
    CaptureProfile,
    ProfileCaptureFinished,
    ProfilerSessionReported,
    ProfilerSessionChanged,
    XProfInstanceChanged,
    CustomJobCreated,
    CustomJobStateChanged,
    StartReplica,
    StopReplica,
    ReplicaStarted,
    ReplicaExited,
    ExecutorAnnounced,
    TuningJobCreated,
    TuningJobStateChanged,
    TrialEnded,
)
"""The message classes, in documentation order."""

SUBJECT_OF: dict[type[Envelope], str] = {
    MetricPointsReceived: bus.METRICS_RECEIVED,
    IngestMetrics: bus.METRICS_INGEST,
    RunHeartbeat: bus.HEARTBEAT_RECEIVED,
    WorkloadSignalReported: bus.SIGNAL_RECEIVED,
    RunConfigsReported: bus.CONFIGS_RECEIVED,
    LogLinesReceived: bus.LOGS_RECEIVED,
    RunCreated: bus.RUN_CREATED,
    RunUpdated: bus.RUN_UPDATED,
    RunPhaseChanged: bus.RUN_PHASE_CHANGED,
    RunDeleted: bus.RUN_DELETED,
    MonitoringRulesChanged: bus.MONITORING_RULES_CHANGED,
    WorkloadEventOpened: bus.WORKLOAD_EVENT_OPENED,
    WorkloadEventUpdated: bus.WORKLOAD_EVENT_UPDATED,
    WorkloadEventResolved: bus.WORKLOAD_EVENT_RESOLVED,
    AnalysisCompleted: bus.ANALYSIS_COMPLETED,
    ProfileCaptureRequested: bus.PROFILE_CAPTURE_REQUESTED,
    CaptureProfile: bus.CAPTURE_PROFILE,
    ProfileCaptureFinished: bus.PROFILE_CAPTURE_FINISHED,
    ProfilerSessionReported: bus.PROFILER_SESSION_REPORTED,
    ProfilerSessionChanged: bus.PROFILER_SESSION_CHANGED,
    XProfInstanceChanged: bus.XPROF_INSTANCE_CHANGED,
    CustomJobCreated: bus.JOB_CREATED,
    CustomJobStateChanged: bus.JOB_STATE_CHANGED,
    StartReplica: bus.START_REPLICA,
    StopReplica: bus.STOP_REPLICA,
    ReplicaStarted: bus.REPLICA_STARTED,
    ReplicaExited: bus.REPLICA_EXITED,
    ExecutorAnnounced: bus.EXECUTOR_ANNOUNCED,
    TuningJobCreated: bus.TUNING_JOB_CREATED,
    TuningJobStateChanged: bus.TUNING_JOB_STATE_CHANGED,
    TrialEnded: bus.TRIAL_ENDED,
}
"""Base subject (before namespace and run token) of each message class."""

_CURRENT_VERSIONS = {cls.model_fields["type"].default: cls.SCHEMA_VERSION for cls in MESSAGE_TYPES}
_ADAPTER: TypeAdapter[Any] = TypeAdapter(BusMessage)


def content_type_of(message: Envelope) -> str:
    """The media type :func:`encode_message` writes ``message`` in."""
    if isinstance(message, MetricPointsReceived):
        return columnar.CONTENT_TYPE
    return columnar.JSON_CONTENT_TYPE


def encode_message(message: Envelope) -> bytes:
    """The wire bytes of ``message``: a columnar frame for :class:`MetricPointsReceived`
    (its envelope and series fields in the header, the points as packed columns), JSON for
    every other message."""
    if not isinstance(message, MetricPointsReceived):
        return message.model_dump_json().encode()
    header = message.model_dump(mode="json", exclude={"series"})
    # Built by hand: MetricColumns' serializer would turn every column into a list first.
    header["series"] = [
        {
            "name": columns.name,
            "host": columns.host,
            "processIndex": columns.process_index,
            "labels": columns.labels,
        }
        for columns in message.series
    ]
    return columnar.encode_frame(
        header,
        [(columns.steps, columns.values, columns.times_unix_us) for columns in message.series],
    )


def parse_message(raw: bytes) -> Envelope:
    """Parse wire bytes into their message class, upcasting older schema versions.

    A columnar frame (it starts with ``MLDC``) becomes a :class:`MetricPointsReceived`
    whose columns are ``array.array``; anything else is read as JSON.

    Readers are tolerant: a field this version does not know (a newer publisher's) is
    ignored, so services can be upgraded one at a time. HTTP requests stay strict; only the
    bus is read this way.

    Raises ``ValueError`` (pydantic's ``ValidationError`` is one) on anything that is not a
    valid message, whatever went wrong inside (nesting too deep for the parser, an upcaster
    meeting a shape it does not expect): such a message is poison and belongs in the
    dead-letter stream.
    """
    if columnar.is_frame(raw):
        return _parse_frame(raw)
    try:
        data = json.loads(raw)  # json accepts the NaN / Infinity tokens our contracts write
    except RecursionError as exc:
        raise ValueError("the message nests too deep to read") from exc
    if not isinstance(data, dict):
        raise ValueError("a bus message must be a JSON object")
    try:
        return _validate_tolerantly(upcast(data, _CURRENT_VERSIONS))
    except ValueError:
        raise
    except Exception as exc:  # KeyError in an upcaster, RecursionError in validation...
        raise ValueError(f"cannot read the message: {type(exc).__name__}: {exc}") from exc


def _parse_frame(raw: bytes) -> MetricPointsReceived:
    """A frame's message: the header validated as the JSON message with empty columns (so
    every rule and the tolerance of unknown fields are the JSON path's), then the columns
    put in place after checking their ranges with min()/max() (in C, no per-point object)."""
    layout = columnar.read_layout(raw)  # FrameError is a ValueError
    header = layout.header
    metas = header["series"]
    shells = []
    for meta in metas:
        shell = {key: value for key, value in meta.items() if key not in ("count", "times")}
        shell["steps"], shell["values"] = [], []
        shells.append(shell)
    try:
        message = _validate_tolerantly({**header, "series": shells})
    except ValueError:
        raise
    except Exception as exc:  # RecursionError in validation...
        raise ValueError(f"cannot read the message: {type(exc).__name__}: {exc}") from exc
    if not isinstance(message, MetricPointsReceived):
        raise ValueError(f"a {message.type!r} message cannot travel as a columnar frame")
    series: list[MetricColumns] = []
    for index, (columns, place) in enumerate(zip(message.series, layout.series, strict=True)):
        steps = columnar.read_column(raw, place.steps_at, place.count, "q")
        values = columnar.read_column(raw, place.values_at, place.count, "d")
        times = None
        if place.times_at is not None:
            times = columnar.read_column(raw, place.times_at, place.count, "q")
        if not columnar.int64s_within(steps, MAX_STEP):
            raise ValueError(f"series {index}: steps must lie within 0 .. {MAX_STEP}")
        # MIN_TIME_US is the epoch, 0: the lower bound int64s_within checks
        if times is not None and not columnar.int64s_within(times, MAX_TIME_US):
            raise ValueError(
                f"series {index}: times must lie within {MIN_TIME_US} .. {MAX_TIME_US} µs"
            )
        series.append(
            columns.model_copy(update={"steps": steps, "values": values, "times_unix_us": times})
        )
    return message.model_copy(update={"series": series})


_UNKNOWN_FIELD = "extra_forbidden"
_MAX_PRUNES = 3
"""Passes of dropping unknown fields; nested unions can hide a field for one pass."""


def _validate_tolerantly(data: dict[str, Any]) -> Envelope:
    """Validate ``data``, dropping the fields the contracts do not know.

    The contracts forbid unknown fields (so HTTP bodies with typos are refused); here the
    fields pydantic reports as unknown are removed and validation runs again. The common,
    exact case costs one validation.
    """
    for _ in range(_MAX_PRUNES):
        try:
            message: Envelope = _ADAPTER.validate_python(data)
        except ValidationError as exc:
            unknown = [error["loc"] for error in exc.errors() if error["type"] == _UNKNOWN_FIELD]
            # loc[0] is the discriminator's tag, not a key of the message
            dropped = [_drop(data, loc[1:]) for loc in unknown]  # every one, no short cut
            if not any(dropped):
                raise
        else:
            return message
    return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]


def _drop(data: Any, loc: tuple[int | str, ...]) -> bool:
    """Remove the value at ``loc`` from nested dicts and lists; whether it was there.

    A step naming no key of a dict is skipped: pydantic puts the member's name of a
    non-discriminated union in the path.
    """
    for position, step in enumerate(loc):
        last = position == len(loc) - 1
        if isinstance(data, dict):
            if step not in data:
                continue
            if last:
                del data[step]
                return True
            data = data[step]
        elif isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data):
            data = data[step]
        else:
            return False
    return False
