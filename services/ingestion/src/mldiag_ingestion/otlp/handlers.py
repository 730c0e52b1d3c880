"""OTLP's two doors: the gRPC ``MetricsService`` and ``POST /v1/metrics`` (HTTP/protobuf).

The only OTLP module that knows about gRPC or HTTP; both answer only once JetStream has
stored the points. Both need a token that may write metrics, in the ``authorization``
header or gRPC metadata (``OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer <token>``).
"""

from datetime import UTC, datetime

import grpc
import structlog
from fastapi import APIRouter, Request, Response
from google.protobuf.message import DecodeError
from grpc import StatusCode
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsPartialSuccess,
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from mldiag_ingestion.errors import InvalidBatch
from mldiag_ingestion.handlers import _read_body
from mldiag_ingestion.otlp.errors import InvalidOtlp
from mldiag_ingestion.otlp.service import ExportResult, OtlpIngestion
from mldiag_platform.auth import TokenDirectory, requires
from mldiag_platform.errors import MldiagError, PermissionDenied, Unauthenticated
from mldiag_schemas.auth import Permission

log = structlog.get_logger(__name__)

router = APIRouter()

PROTOBUF = "application/x-protobuf"
METRICS_SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"


def _parse(raw: bytes) -> ExportMetricsServiceRequest:
    request = ExportMetricsServiceRequest()
    try:
        request.ParseFromString(raw)
    except DecodeError:
        raise InvalidOtlp(
            "the body is not an OTLP ExportMetricsServiceRequest in protobuf"
        ) from None
    return request


def _response(result: ExportResult) -> ExportMetricsServiceResponse:
    if not result.rejected_points:
        return ExportMetricsServiceResponse()
    return ExportMetricsServiceResponse(
        partial_success=ExportMetricsPartialSuccess(
            rejected_data_points=result.rejected_points, error_message=result.error_message
        )
    )


@router.post("/v1/metrics", dependencies=[requires(Permission.METRICS_WRITE)])
async def export_metrics(request: Request) -> Response:
    """OTLP/HTTP with protobuf bodies (gzip allowed); JSON OTLP is not accepted."""
    otlp: OtlpIngestion = request.app.state.otlp
    limit: int = request.app.state.settings.max_request_bytes
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != PROTOBUF:
        raise InvalidOtlp(f"Content-Type {content_type!r}: send {PROTOBUF} (OTLP/HTTP protobuf)")
    try:
        body = await _read_body(request, limit)
    except InvalidBatch as exc:  # bad gzip: in OTLP's words
        raise InvalidOtlp(exc.message) from None
    result = await otlp.export(_parse(body), datetime.now(UTC))
    return Response(_response(result).SerializeToString(), media_type=PROTOBUF)


class MetricsServicer:
    """``MetricsService/Export`` over gRPC; errors become status codes, never crashes."""

    def __init__(self, otlp: OtlpIngestion, tokens: TokenDirectory) -> None:
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
            await self._tokens.authorize(
                authorization if isinstance(authorization, str) else None,
                Permission.METRICS_WRITE,
            )
        except Unauthenticated as exc:
            await context.abort(StatusCode.UNAUTHENTICATED, f"{exc.code}: {exc.message}")
        except PermissionDenied as exc:
            await context.abort(StatusCode.PERMISSION_DENIED, f"{exc.code}: {exc.message}")
        try:
            result = await self._otlp.export(_parse(raw), datetime.now(UTC))
        except MldiagError as exc:
            status = StatusCode.UNAVAILABLE if exc.retryable else StatusCode.INVALID_ARGUMENT
            log.warning("otlp.grpc_rejected", code=exc.code, message=exc.message)
            await context.abort(status, f"{exc.code}: {exc.message}")
        return bytes(_response(result).SerializeToString())

    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler that serves this servicer (no generated stubs needed)."""
        return grpc.method_handlers_generic_handler(
            METRICS_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self.export)}
        )


def create_grpc_server(
    otlp: OtlpIngestion, tokens: TokenDirectory, max_message_bytes: int
) -> grpc.aio.Server:
    """A gRPC server with the metrics service (the caller binds a port and starts it)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
        ]
    )
    server.add_generic_rpc_handlers((MetricsServicer(otlp, tokens).handler(),))
    return server
