"""HTTP routes of ingestion and its bus consumer: the only module that knows about either."""

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.types import DecoratedCallable
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from mldiag_ingestion.errors import (
    BodyTooLarge,
    InvalidBatch,
    InvalidHeartbeat,
    InvalidLogs,
    InvalidSignal,
    TooManyLogLines,
    UnsupportedEncoding,
    refused_write,
)
from mldiag_ingestion.frames import parse_frame_write
from mldiag_ingestion.otlp.service import OtlpIngestion
from mldiag_ingestion.service import IngestionService, refuse_if_nothing_accepted
from mldiag_platform.auth import requires
from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.errors import InvalidArgument
from mldiag_platform.http import ContractResponse, parse_body
from mldiag_schemas import bus, columnar
from mldiag_schemas.auth import Permission
from mldiag_schemas.errors import ErrorBody
from mldiag_schemas.ids import is_resource_id
from mldiag_schemas.logs import MAX_LOG_LINES_PER_REQUEST, WriteLogsRequest, WriteLogsResponse
from mldiag_schemas.telemetry import (
    HeartbeatRequest,
    IngestMetrics,
    SignalRequest,
    WriteMetricsRequest,
    WriteMetricsResponse,
)

router = APIRouter()


@dataclass(frozen=True)
class Doors:
    """What ingestion's routes use, set once on ``app.state.doors`` by the app: one typed
    value rather than loose attributes of ``app.state``."""

    service: IngestionService
    max_request_bytes: int
    """The most a request body may hold, inflated."""
    otlp: OtlpIngestion | None = None
    """OTLP's exports (None when OTLP is turned off, and its routes are not served)."""


def doors(request: Request) -> Doors:
    """The :class:`Doors` of the app serving ``request``."""
    found: Doors = request.app.state.doors
    return found


RUN_PATH = "/v1/projects/{project}/locations/{location}/machineLearningRuns/{run_id}"
SHORT_RUN_PATH = "/v1/machineLearningRuns/{run_id}"


_WRITE_METRICS = [requires(Permission.METRICS_WRITE)]


_FRAME_BODY = {
    "schema": {
        "type": "string",
        "format": "binary",
        "description": "The same write as a binary columnar frame: `MLDC`, version 1, a u32"
        " little-endian header length, a JSON header `{batchId?, series: [{name, host?,"
        " processIndex?, labels?, count, times}]}`, then per series little-endian int64"
        " steps, float64 values and (when `times`) int64 µs times. See docs/wire-format.md."
        " Gzip with `Content-Encoding: gzip` is accepted.",
    }
}
"""The request body of a metrics write sent as a frame (``application/x-mldiag-columns``)."""


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` as the JSON body, which the routes read by hand
    (gzip, byte limits, their own error codes); nested models are inlined, since a
    ``#/$defs/...`` reference would point into the OpenAPI document, not the schema. A
    metrics write also takes a columnar frame."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    content: dict[str, Any] = {"application/json": {"schema": inline(schema)}}
    if model is WriteMetricsRequest:
        content[columnar.CONTENT_TYPE] = _FRAME_BODY
    return {"requestBody": {"required": True, "content": content}}


_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 413)
}


def _post(
    path: str, status: int, body: type[BaseModel], answer: type[BaseModel] | None = None
) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """A write route: its permission, its declared body, its answers."""
    responses: dict[int | str, dict[str, Any]] = dict(_ERRORS)
    if answer is not None:
        responses[status] = {"model": answer}
    return router.post(
        path,
        status_code=status,
        dependencies=_WRITE_METRICS,
        openapi_extra=_json_body(body),
        responses=responses,
    )


def _check_parent(project: str, location: str) -> None:
    for kind, value in (("project", project), ("location", location)):
        if not is_resource_id(value):
            raise InvalidArgument(
                f"invalid {kind} id {value[:80]!r}: use lower-case letters, digits and '-'"
                " (max 63)",
                details=[{"field": kind}],
            )


@_post(RUN_PATH + "/metrics:write", 202, WriteMetricsRequest, WriteMetricsResponse)
async def write_metrics(request: Request, project: str, location: str, run_id: str) -> Response:
    """Accept a batch of metric points; 202 once JetStream has stored every accepted point."""
    _check_parent(project, location)
    return await _write_metrics(request, run_id)


@_post(SHORT_RUN_PATH + "/metrics:write", 202, WriteMetricsRequest, WriteMetricsResponse)
async def write_metrics_short(request: Request, run_id: str) -> Response:
    """Accept a batch of metric points (run in the default project and location)."""
    return await _write_metrics(request, run_id)


async def _write_metrics(request: Request, run_id: str) -> Response:
    door = doors(request)
    raw = await _read_body(request, door.max_request_bytes)
    # The content type picks the reader; a frame is also known by its magic (JSON never
    # starts with MLDC), so a client that forgets the header is still understood.
    if _media_type(request) == columnar.CONTENT_TYPE or columnar.is_frame(raw):
        frame = parse_frame_write(raw)
        result = await door.service.write_metric_frame(run_id, frame, datetime.now(UTC))
    else:
        write = _parse_write(raw)
        result = await door.service.write_metrics(run_id, write, datetime.now(UTC))
    refuse_if_nothing_accepted(result)
    return ContractResponse(result, status_code=202)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


@_post(RUN_PATH + "/logs:write", 202, WriteLogsRequest, WriteLogsResponse)
async def write_logs(request: Request, project: str, location: str, run_id: str) -> Response:
    """Accept a batch of log lines; 202 once JetStream has stored all of them."""
    _check_parent(project, location)
    return await _write_logs(request, run_id)


@_post(SHORT_RUN_PATH + "/logs:write", 202, WriteLogsRequest, WriteLogsResponse)
async def write_logs_short(request: Request, run_id: str) -> Response:
    """Accept a batch of log lines (run in the default project and location)."""
    return await _write_logs(request, run_id)


async def _write_logs(request: Request, run_id: str) -> Response:
    door = doors(request)
    write = _parse_logs(await _read_body(request, door.max_request_bytes))
    result = await door.service.write_logs(run_id, write, datetime.now(UTC))
    return ContractResponse(result, status_code=202)


def _problems(exc: ValidationError) -> tuple[list[dict[str, str]], ErrorDetails]:
    """The first 20 problems of a refused body as error details, and the first one (whose
    rule picks the error code)."""
    problems = exc.errors()[:20]
    details = [
        {"field": ".".join(str(part) for part in problem["loc"]), "problem": problem["msg"]}
        for problem in problems
    ]
    return details, problems[0]


def _parse_logs(raw: bytes) -> WriteLogsRequest:
    """Validate a log write; a refusal names the first line at fault (``line <i>``).

    Not :func:`parse_body`: its walk over every field of every line costs more than the
    parsing itself, and the service checks what it would (NUL, integer and time ranges)
    in one pass over the lines.
    """
    try:
        return WriteLogsRequest.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        details, first = _problems(exc)
        where = [str(part) for part in first["loc"]]
        if where == ["lines"] and first["type"] == "too_long":
            raise TooManyLogLines(
                f"more than {MAX_LOG_LINES_PER_REQUEST} lines in one request: split it",
                details=details,
            ) from None
        if len(where) >= 2 and where[0] == "lines" and where[1].isdigit():
            field = f" ({'.'.join(where[2:])})" if where[2:] else ""
            raise InvalidLogs(f"line {where[1]}{field}: {first['msg']}", details=details) from None
        name = ".".join(where) or "the WriteLogsRequest body"
        raise InvalidLogs(f"{name}: {first['msg']}", details=details) from None


@_post(RUN_PATH + ":heartbeat", 204, HeartbeatRequest)
async def heartbeat(request: Request, project: str, location: str, run_id: str) -> Response:
    """A process of the run is alive; 204 once JetStream has the heartbeat."""
    _check_parent(project, location)
    return await _heartbeat(request, run_id)


@_post(SHORT_RUN_PATH + ":heartbeat", 204, HeartbeatRequest)
async def heartbeat_short(request: Request, run_id: str) -> Response:
    """A process of the run is alive (run in the default project and location)."""
    return await _heartbeat(request, run_id)


async def _heartbeat(request: Request, run_id: str) -> Response:
    raw = await _read_body(request, _HEARTBEAT_BYTES)
    body = parse_body(HeartbeatRequest, raw, InvalidHeartbeat)
    await doors(request).service.heartbeat(run_id, body, datetime.now(UTC))
    return Response(status_code=204)


@_post(RUN_PATH + ":reportSignal", 204, SignalRequest)
async def report_signal(request: Request, project: str, location: str, run_id: str) -> Response:
    """A lifecycle signal of a process (SIGTERM, preemption notice, exception, exit); 204 once
    JetStream has it."""
    _check_parent(project, location)
    return await _report_signal(request, run_id)


@_post(SHORT_RUN_PATH + ":reportSignal", 204, SignalRequest)
async def report_signal_short(request: Request, run_id: str) -> Response:
    """A lifecycle signal of a process (run in the default project and location)."""
    return await _report_signal(request, run_id)


async def _report_signal(request: Request, run_id: str) -> Response:
    raw = await _read_body(request, _SIGNAL_BYTES)
    body = parse_body(SignalRequest, raw, InvalidSignal)
    await doors(request).service.report_signal(run_id, body, datetime.now(UTC))
    return Response(status_code=204)


_HEARTBEAT_BYTES = 64 * 1024
"""A heartbeat is a few fields and a fingerprint of at most 64 short entries (about 40 KB at
the very most); anything larger is a mistake."""

_SIGNAL_BYTES = 256 * 1024
"""A signal's message holds at most 20,000 characters (up to 6 bytes each, escaped)."""


def _parse_write(raw: bytes) -> WriteMetricsRequest:
    """Validate the body, leaving bad series out (the service lists them); a malformed
    request is refused whole, its first failing rule picking the code (docs/metrics.md)."""
    try:
        return WriteMetricsRequest.parse_keeping_good_series(raw or b"{}")
    except ValidationError as exc:
        raise refused_write(exc) from None


async def _read_body(request: Request, limit: int) -> bytes:
    """Read at most ``limit`` bytes (after gunzip) without buffering more than that."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"body of {declared} bytes is over the {limit}-byte limit")
    encoding = request.headers.get("content-encoding", "identity").lower()
    if encoding not in ("identity", "gzip"):
        raise UnsupportedEncoding(f"Content-Encoding {encoding!r}: use gzip or none")
    inflater = zlib.decompressobj(wbits=31) if encoding == "gzip" else None
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        if inflater is not None:
            try:
                chunk = inflater.decompress(chunk, limit - size + 1)  # noqa: PLW2901
            except zlib.error:
                raise InvalidBatch("the body is not valid gzip") from None
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"body is over the {limit}-byte limit")
        parts.append(chunk)
    return b"".join(parts)


INGEST_CONSUMER = ConsumerSpec(
    stream=bus.TELEMETRY,
    subject=bus.METRICS_INGEST + ".*",
    durable=bus.INGESTION_INGEST_DURABLE,
    message_type=IngestMetrics,
    batch_size=20,
)
"""Metric writes published by in-cluster producers (JetStream, at least once)."""


class IngestBusHandler:
    """Validates and republishes each write command; a rule broken is dead-lettered."""

    def __init__(self, service: IngestionService) -> None:
        self._service = service

    async def on_ingest(self, deliveries: list[Delivery[IngestMetrics]]) -> None:
        """Handle a batch in order (each returns once its chunks are stored)."""
        for delivery in deliveries:
            await self._service.ingest(delivery.message, datetime.now(UTC))
