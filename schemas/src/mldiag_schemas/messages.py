"""Every bus message type, and how to parse one from the wire."""

import json
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from mldiag_schemas import bus
from mldiag_schemas.analyses import AnalysisCompleted
from mldiag_schemas.envelope import Envelope, upcast
from mldiag_schemas.events import WorkloadEventOpened, WorkloadEventResolved, WorkloadEventUpdated
from mldiag_schemas.monitoring import MonitoringRulesChanged
from mldiag_schemas.profiling import (
    CaptureProfile,
    ProfileCaptureFinished,
    ProfileCaptureRequested,
    ProfilerSessionChanged,
    ProfilerSessionReported,
    XProfInstanceChanged,
)
from mldiag_schemas.runs import (
    RunConfigsReported,
    RunCreated,
    RunDeleted,
    RunPhaseChanged,
    RunUpdated,
)
from mldiag_schemas.telemetry import (
    IngestMetrics,
    MetricPointsReceived,
    RunHeartbeat,
    WorkloadSignalReported,
)

BusMessage = Annotated[
    MetricPointsReceived
    | IngestMetrics
    | RunHeartbeat
    | WorkloadSignalReported
    | RunConfigsReported
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
    | XProfInstanceChanged,
    Field(discriminator="type"),
]
"""Any message on the bus, discriminated by ``type``."""

MESSAGE_TYPES: tuple[type[Envelope], ...] = (
    MetricPointsReceived,
    IngestMetrics,
    RunHeartbeat,
    WorkloadSignalReported,
    RunConfigsReported,
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
)
"""The message classes, in documentation order."""

SUBJECT_OF: dict[type[Envelope], str] = {
    MetricPointsReceived: bus.METRICS_RECEIVED,
    IngestMetrics: bus.METRICS_INGEST,
    RunHeartbeat: bus.HEARTBEAT_RECEIVED,
    WorkloadSignalReported: bus.SIGNAL_RECEIVED,
    RunConfigsReported: bus.CONFIGS_RECEIVED,
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
}
"""Base subject (before namespace and run token) of each message class."""

_CURRENT_VERSIONS = {cls.model_fields["type"].default: cls.SCHEMA_VERSION for cls in MESSAGE_TYPES}
_ADAPTER: TypeAdapter[Any] = TypeAdapter(BusMessage)


def parse_message(raw: bytes) -> Envelope:
    """Parse wire bytes into their message class, upcasting older schema versions.

    Raises ``ValueError`` (pydantic's ``ValidationError`` is one) on anything that is not a
    valid message: such a message is poison and belongs in the dead-letter stream.
    """
    data = json.loads(raw)  # json accepts the NaN / Infinity tokens our contracts write
    if not isinstance(data, dict):
        raise ValueError("a bus message must be a JSON object")
    message: Envelope = _ADAPTER.validate_python(upcast(data, _CURRENT_VERSIONS))
    return message
