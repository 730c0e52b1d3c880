"""HTTP routes of ingestion: the only module that knows about HTTP."""

import zlib
from datetime import UTC, datetime

from fastapi import APIRouter, Request, Response

from mldiag_ingestion.errors import BodyTooLarge, InvalidBatch, UnsupportedEncoding
from mldiag_ingestion.service import IngestionService
from mldiag_platform.http import ContractResponse, parse_body
from mldiag_schemas.telemetry import WriteMetricsRequest

router = APIRouter()

RUN_PATH = "/v1/projects/{project}/locations/{location}/machineLearningRuns/{run_id}"
SHORT_RUN_PATH = "/v1/machineLearningRuns/{run_id}"


@router.post(RUN_PATH + "/metrics:write", status_code=202)
@router.post(SHORT_RUN_PATH + "/metrics:write", status_code=202)
async def write_metrics(request: Request, run_id: str) -> Response:
    """Accept a batch of metric points; 202 once JetStream has stored every point."""
    service: IngestionService = request.app.state.service
    limit: int = request.app.state.settings.max_request_bytes
    body = await _read_body(request, limit)
    write = parse_body(WriteMetricsRequest, body, InvalidBatch)
    result = await service.write_metrics(run_id, write, datetime.now(UTC))
    return ContractResponse(result, status_code=202)


async def _read_body(request: Request, limit: int) -> bytes:
    """Read at most ``limit`` bytes (after gunzip) without buffering more than that."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
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
