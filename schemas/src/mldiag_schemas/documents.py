"""Generate the committed contract documents: JSON Schemas and an AsyncAPI 3.0 document.

``python -m mldiag_schemas`` rewrites ``schemas/contracts/``; a test regenerates them and
fails when they differ, so a contract never changes by accident.
"""

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mldiag_schemas import bus
from mldiag_schemas.alerts import (
    AlertRule,
    ListAlertRulesResponse,
    ListNotificationChannelsResponse,
    ListNotificationDeliveriesResponse,
    Notification,
    NotificationChannel,
    TestChannelResponse,
)
from mldiag_schemas.analyses import ListAnalysesResponse
from mldiag_schemas.auth import Caller, CreatedToken, CreateTokenRequest, ListTokensResponse
from mldiag_schemas.errors import ErrorBody
from mldiag_schemas.events import ListEventsResponse, WorkloadEvent
from mldiag_schemas.files import ListJobLogsResponse, UploadedPackage
from mldiag_schemas.goodput import GoodputResponse
from mldiag_schemas.jobs import (
    CustomJob,
    ListCustomJobsResponse,
    ListReplicasResponse,
    VertexErrorBody,
)
from mldiag_schemas.logs import ListLogsResponse, WriteLogsRequest, WriteLogsResponse
from mldiag_schemas.messages import MESSAGE_TYPES, SUBJECT_OF
from mldiag_schemas.models import (
    ListModelsResponse,
    ListModelVersionsResponse,
    MergeVersionAliasesRequest,
    Model,
    ModelOperation,
    UploadModelRequest,
)
from mldiag_schemas.monitoring import ProjectMonitoringRules
from mldiag_schemas.operations import ListOperationsResponse, Operation, WaitOperationRequest
from mldiag_schemas.pipelines import ListTrainingPipelinesResponse, TrainingPipeline
from mldiag_schemas.profiling import (
    CaptureProfileRequest,
    ListProfilerSessionsResponse,
    ListProfilerTargetsResponse,
    ListXProfInstancesResponse,
    ProfilerSession,
    ProfilerSessionReport,
    ProfilerTarget,
    RegisterProfilerTargetRequest,
    StartXProfRequest,
    XProfInstance,
)
from mldiag_schemas.retention import PurgedRun, RetentionPolicy, UpdateRetentionPolicyRequest
from mldiag_schemas.runs import (
    ConfigsDiffResponse,
    CreateRunRequest,
    FlatConfigsResponse,
    ListRunsResponse,
    Run,
    SelfHostedRun,
    SelfHostedRunRequest,
    UpdateRunRequest,
)
from mldiag_schemas.sharing import (
    CreatedShareLink,
    CreateShareLinkRequest,
    ListShareLinksResponse,
    RunUpdate,
)
from mldiag_schemas.telemetry import (
    CompareMetricsResponse,
    DownsampleMetricResponse,
    HeartbeatRequest,
    LatestMetricsResponse,
    ListHeartbeatsResponse,
    ListMetricsResponse,
    ReadMetricSeriesResponse,
    WriteMetricsRequest,
    WriteMetricsResponse,
)
from mldiag_schemas.tuning import HyperparameterTuningJob, ListHyperparameterTuningJobsResponse

RESOURCE_TYPES: tuple[type[BaseModel], ...] = (
    CreateRunRequest,
    Run,
    ListRunsResponse,
    UpdateRunRequest,
    SelfHostedRunRequest,
    SelfHostedRun,
    FlatConfigsResponse,
    ConfigsDiffResponse,
    Operation,
    ListOperationsResponse,
    WaitOperationRequest,
    WriteMetricsRequest,
    WriteMetricsResponse,
    ReadMetricSeriesResponse,
    ListMetricsResponse,
    DownsampleMetricResponse,
    LatestMetricsResponse,
    CompareMetricsResponse,
    HeartbeatRequest,
    ListHeartbeatsResponse,
    WorkloadEvent,
    ListEventsResponse,
    ListAnalysesResponse,
    GoodputResponse,
    ProjectMonitoringRules,
    RetentionPolicy,
    UpdateRetentionPolicyRequest,
    PurgedRun,
    ProfilerSession,
    ListProfilerSessionsResponse,
    ProfilerSessionReport,
    CaptureProfileRequest,
    ProfilerTarget,
    RegisterProfilerTargetRequest,
    ListProfilerTargetsResponse,
    StartXProfRequest,
    XProfInstance,
    ListXProfInstancesResponse,
    CreateTokenRequest,
    CreatedToken,
    ListTokensResponse,
    Caller,
    CreateShareLinkRequest,
    CreatedShareLink,
    ListShareLinksResponse,
    RunUpdate,
    ErrorBody,
    CustomJob,
    ListCustomJobsResponse,
    ListReplicasResponse,
    HyperparameterTuningJob,
    ListHyperparameterTuningJobsResponse,
    Model,
    UploadModelRequest,
    ModelOperation,
    ListModelsResponse,
    ListModelVersionsResponse,
    TrainingPipeline,
    ListTrainingPipelinesResponse,
    MergeVersionAliasesRequest,
    VertexErrorBody,
    UploadedPackage,
    ListJobLogsResponse,
    WriteLogsRequest,
    WriteLogsResponse,
    ListLogsResponse,
    NotificationChannel,
    ListNotificationChannelsResponse,
    AlertRule,
    ListAlertRulesResponse,
    Notification,
    ListNotificationDeliveriesResponse,
    TestChannelResponse,
)
"""HTTP request and response bodies."""


def json_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schema of every message and resource, by class name."""
    models = (*MESSAGE_TYPES, *RESOURCE_TYPES)
    return {
        model.__name__: model.model_json_schema(by_alias=True, mode="serialization")
        for model in models
    }


def asyncapi() -> dict[str, Any]:
    """An AsyncAPI 3.0 document of the bus: channels, their messages and the streams."""
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for model in MESSAGE_TYPES:
        name = model.__name__
        subject = SUBJECT_OF[model]
        messages[name] = {
            "name": name,
            "title": model.model_fields["type"].default,
            "summary": (model.__doc__ or "").strip().splitlines()[0],
            "contentType": "application/json",
            "headers": {
                "type": "object",
                "properties": {
                    "Nats-Msg-Id": {"type": "string", "description": "= eventId (dedupe)"}
                },
            },
            "payload": {"$ref": f"#/components/schemas/{name}"},
        }
        channels[name] = {
            "address": "{namespace}." + subject + ".{runId}",
            "parameters": {
                "namespace": {"description": "Installation namespace (default mldiag)."},
                "runId": {"description": "The run the message is about."},
            },
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
        }
        operations[f"receive{name}"] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{name}"},
        }
    schemas = {model.__name__: _inline_defs(model) for model in MESSAGE_TYPES}
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "mldiag bus",
            "version": "0.1.0",
            "description": "NATS JetStream subjects of mldiag. Streams: "
            + ", ".join(f"{s.name} ({', '.join(s.subjects)})" for s in bus.ALL_STREAMS),
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": schemas},
    }


def _inline_defs(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(
        by_alias=True, mode="serialization", ref_template="#/components/schemas/{model}"
    )
    schema.pop("$defs", None)
    return schema


def render() -> dict[str, str]:
    """File name → content of every contract document."""
    files = {
        f"jsonschema/{name}.json": json.dumps(schema, indent=2, sort_keys=True) + "\n"
        for name, schema in json_schemas().items()
    }
    files["asyncapi.json"] = json.dumps(asyncapi(), indent=2, sort_keys=True) + "\n"
    return files


def write(directory: Path) -> list[Path]:
    """Write every document under ``directory``; return the paths written."""
    written = []
    for relative, content in render().items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(path)
    return written
