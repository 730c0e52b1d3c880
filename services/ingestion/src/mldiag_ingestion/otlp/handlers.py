"""OTLP's doors: the gRPC ``MetricsService`` and ``LogsService``, and ``POST /v1/metrics`` /
``POST /v1/logs`` (HTTP/protobuf).

The only OTLP module that knows about gRPC or HTTP; every door answers only once JetStream
has stored what it accepted. Each needs a token that may write what it carries (metrics, or
configs for logs, which also carry log lines), in the ``authorization`` header or gRPC metadata
(``OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer <token>``).
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import grpc
import structlog
from fastapi import APIRouter, Request, Response
from google.protobuf.message import DecodeError, Message
from grpc import StatusCode
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsPartialSuccess,
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from mldiag_ingestion.errors import InvalidBatch
from mldiag_ingestion.handlers import _read_body, doors
from mldiag_ingestion.otlp.errors import InvalidOtlp
from mldiag_ingestion.otlp.service import ExportResult, OtlpIngestion
from mldiag_platform.auth import Principal, TokenDirectory, requires
from mldiag_platform.errors import MldiagError, PermissionDenied, Unauthenticated
from mldiag_schemas.auth import Permission
from mldiag_schemas.errors import ErrorBody

log = structlog.get_logger(__name__)

router = APIRouter()

PROTOBUF = "application/x-protobuf"
METRICS_SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"


MessageT = TypeVar("MessageT", bound=Message)


def _parse(kind: type[MessageT], raw: bytes) -> MessageT:
    request: MessageT = kind()
    try:
        request.ParseFromString(raw)
    except DecodeError:
        raise InvalidOtlp(f"the body is not an OTLP {kind.__name__} in protobuf") from None
    return request


@dataclass(frozen=True)
class _Signal:
    """What differs between OTLP's metrics and logs: permission, export and response."""

    name: str
    permission: Permission
    export: Callable[[OtlpIngestion, bytes, datetime, Principal], Awaitable[ExportResult]]
    """Parses the protobuf body (``InvalidOtlp`` when it is not) and exports it, if the
    caller may write every run it names (and configs, when it carries them)."""
    response: Callable[[ExportResult], Message]


def _metrics_response(result: ExportResult) -> Message:
    if not result.rejected_points:
        return ExportMetricsServiceResponse()
    return ExportMetricsServiceResponse(
        partial_success=ExportMetricsPartialSuccess(
            rejected_data_points=result.rejected_points, error_message=result.error_message
        )
    )


def _logs_response(result: ExportResult) -> Message:
    if not result.rejected_points:
        return ExportLogsServiceResponse()
    return ExportLogsServiceResponse(
        partial_success=ExportLogsPartialSuccess(
            rejected_log_records=result.rejected_points, error_message=result.error_message
        )
    )


async def _export_metrics(
    otlp: OtlpIngestion, raw: bytes, at: datetime, principal: Principal
) -> ExportResult:
    return await otlp.export(_parse(ExportMetricsServiceRequest, raw), at, principal.admit_run)


async def _export_logs(
    otlp: OtlpIngestion, raw: bytes, at: datetime, principal: Principal
) -> ExportResult:
    def admit_configs() -> None:
        principal.require(Permission.CONFIGS_WRITE)

    request = _parse(ExportLogsServiceRequest, raw)
    return await otlp.export_logs(request, at, principal.admit_run, admit_configs)


# Log lines are telemetry, as on logs:write: the door asks for writeMetrics, which run-scoped
# tokens hold; an export that also carries configs records needs writeConfigs besides.
METRICS = _Signal("metrics", Permission.METRICS_WRITE, _export_metrics, _metrics_response)
LOGS = _Signal("logs", Permission.METRICS_WRITE, _export_logs, _logs_response)


async def _export_http(request: Request, signal: _Signal, principal: Principal) -> Response:
    door = doors(request)
    otlp, limit = door.otlp, door.max_request_bytes
    if otlp is None:  # not reached: OTLP's routes are served only with OTLP on
        raise RuntimeError("OTLP is turned off")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != PROTOBUF:
        raise InvalidOtlp(f"Content-Type {content_type!r}: send {PROTOBUF} (OTLP/HTTP protobuf)")
    try:
        body = await _read_body(request, limit)
    except InvalidBatch as exc:  # bad gzip: in OTLP's words
        raise InvalidOtlp(exc.message) from None
    result = await signal.export(otlp, body, datetime.now(UTC), principal)
    return Response(signal.response(result).SerializeToString(), media_type=PROTOBUF)


def _protobuf_body(message: str) -> dict[str, Any]:
    """``openapi_extra`` declaring the protobuf body the route reads by hand."""
    schema = {"type": "string", "format": "binary", "description": f"An OTLP {message}."}
    return {"requestBody": {"required": True, "content": {PROTOBUF: {"schema": schema}}}}


_OTLP_ERRORS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The OTLP Export…ServiceResponse (partial success, if any).",
        "content": {PROTOBUF: {"schema": {"type": "string", "format": "binary"}}},
    },
    **{status: {"model": ErrorBody} for status in (400, 401, 403, 413)},
}


# The runs are in the body: a token held to one run is checked against each (403 otherwise).
_METRICS_WRITER = Annotated[Principal, requires(METRICS.permission, runs_in_body=True)]
_LOGS_WRITER = Annotated[Principal, requires(LOGS.permission, runs_in_body=True)]


@router.post(
    "/v1/metrics",
    openapi_extra=_protobuf_body("ExportMetricsServiceRequest"),
    responses=_OTLP_ERRORS,
)
async def export_metrics(request: Request, principal: _METRICS_WRITER) -> Response:
    """OTLP/HTTP metrics with protobuf bodies (gzip allowed); JSON OTLP is not accepted."""
    return await _export_http(request, METRICS, principal)


@router.post(
    "/v1/logs",
    openapi_extra=_protobuf_body("ExportLogsServiceRequest"),
    responses=_OTLP_ERRORS,
)
async def export_logs(request: Request, principal: _LOGS_WRITER) -> Response:
    """OTLP/HTTP logs with protobuf bodies: configs records (the official SDK's) and log
    lines of runs."""
    return await _export_http(request, LOGS, principal)


class ExportServicer:
    """One signal's ``Export`` over gRPC; errors become status codes, never crashes."""

    def __init__(self, signal: _Signal, otlp: OtlpIngestion, tokens: TokenDirectory) -> None:
        self._signal = signal
        self._otlp = otlp
        self._tokens = tokens

    async def export(self, raw: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        """Export one request; INVALID_ARGUMENT for a client mistake, UNAVAILABLE to retry.

        The body arrives as bytes and is parsed here, so a payload that is not protobuf gets
        INVALID_ARGUMENT rather than the INTERNAL a failing deserializer would give.
        """
        metadata = dict(context.invocation_metadata() or ())
        authorization = metadata.get("authorization")
        try:
            principal = await self._tokens.authorize(
                authorization if isinstance(authorization, str) else None,
                self._signal.permission,
            )
        except Unauthenticated as exc:
            await context.abort(StatusCode.UNAUTHENTICATED, f"{exc.code}: {exc.message}")
        except PermissionDenied as exc:
            await context.abort(StatusCode.PERMISSION_DENIED, f"{exc.code}: {exc.message}")
        try:
            result = await self._signal.export(self._otlp, raw, datetime.now(UTC), principal)
        except PermissionDenied as exc:  # another run, or configs without writeConfigs
            await context.abort(StatusCode.PERMISSION_DENIED, f"{exc.code}: {exc.message}")
        except MldiagError as exc:
            status = StatusCode.UNAVAILABLE if exc.retryable else StatusCode.INVALID_ARGUMENT
            log.warning(
                "otlp.grpc_rejected", signal=self._signal.name, code=exc.code, message=exc.message
            )
            await context.abort(status, f"{exc.code}: {exc.message}")
        return bytes(self._signal.response(result).SerializeToString())

    def handler(self, service: str) -> grpc.GenericRpcHandler:
        """The generic handler that serves this servicer (no generated stubs needed)."""
        return grpc.method_handlers_generic_handler(
            service, {"Export": grpc.unary_unary_rpc_method_handler(self.export)}
        )


def create_grpc_server(
    otlp: OtlpIngestion, tokens: TokenDirectory, max_message_bytes: int
) -> grpc.aio.Server:
    """A gRPC server with the metrics and logs services (the caller binds and starts it)."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_message_bytes)])
    server.add_generic_rpc_handlers(
        (
            ExportServicer(METRICS, otlp, tokens).handler(METRICS_SERVICE),
            ExportServicer(LOGS, otlp, tokens).handler(LOGS_SERVICE),
        )
    )
    return server
