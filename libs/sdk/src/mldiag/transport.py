"""HTTP to ingestion: posting one encoded batch and classifying what happened.

The only module that knows ingestion's write endpoint and its status codes.
"""

from __future__ import annotations

import enum
import logging
import ssl
from dataclasses import dataclass

import httpx

from mldiag.encoding import content_headers

logger = logging.getLogger("mldiag")

# Not the batch's fault: a wrong token, a missing route (ingestion not deployed yet), a
# timeout or rate limit. The batch stays spooled and is retried, never dead-lettered.
_RETRYABLE_4XX = frozenset({401, 403, 404, 408, 425, 429})


class Outcome(enum.Enum):
    """What became of one attempt to send a batch."""

    SENT = "sent"
    """Stored by the platform (2xx)."""
    REJECTED = "rejected"
    """The platform refused the batch itself (a 4xx): dead-letter it, never retry."""
    UNAVAILABLE = "unavailable"
    """Network error, 5xx or a retryable 4xx: keep it and try again later."""


@dataclass(frozen=True, slots=True)
class Result:
    """An outcome with the detail worth logging."""

    outcome: Outcome
    status: int = 0
    detail: str = ""


def client(token: str, timeout: float, *, verify: ssl.SSLContext | bool = True) -> httpx.Client:
    """An HTTP client with the SDK's auth header and timeout (``verify``: a prepared TLS
    context saves building one, most of a new client's cost)."""
    headers = {"User-Agent": "mldiag-sdk"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(headers=headers, timeout=timeout, verify=verify)


def post_batch(http: httpx.Client, url: str, body: bytes, timeout: float | None = None) -> Result:
    """POST one batch to an ingestion write route (``metrics:write``, ``logs:write``) and
    classify the answer; never raises. The body's own bytes say what it is (a columnar
    frame, gzipped or not, or gzipped JSON as logs and older SDKs' spools hold), and the
    ``Content-Type`` and ``Content-Encoding`` headers follow."""
    try:
        response = http.post(
            url,
            content=body,
            headers=content_headers(body),
            timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
        )
    except httpx.HTTPError as error:
        return Result(Outcome.UNAVAILABLE, detail=f"{type(error).__name__}: {error}")
    status = response.status_code
    if status < 300:
        return Result(Outcome.SENT, status)
    detail = response.text[:2000]
    if 400 <= status < 500 and status not in _RETRYABLE_4XX:
        return Result(Outcome.REJECTED, status, detail)
    return Result(Outcome.UNAVAILABLE, status, detail)


class MetricsWriter:
    """Posts ``metrics:write`` bodies (frames; gzipped JSON from older spools) to ingestion."""

    def __init__(self, http: httpx.Client, ingestion_url: str) -> None:
        self._http = http
        self._base = ingestion_url

    def write(self, run_id: str, body: bytes, timeout: float | None = None) -> Result:
        """Send one batch; never raises."""
        url = f"{self._base}/v1/machineLearningRuns/{run_id}/metrics:write"
        return post_batch(self._http, url, body, timeout)
