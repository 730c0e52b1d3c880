"""A small client of the training API: custom jobs (Vertex v1 ``customJobs``), their
replicas, their logs and package uploads.

Like :mod:`mldiag.api_client`, answers are the API's JSON bodies as plain dicts. The training
API speaks Vertex's error dialect (``{"error": {"code": 404, "status": "NOT_FOUND", ...}}``);
its errors are raised as :class:`~mldiag.api_client.ApiError` whose ``code`` is mldiag's
stable reason (``not_found``, ``invalid_argument``, ...), so callers handle both APIs alike.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from mldiag.api_client import (
    DEFAULT_API_URL,
    DEFAULT_LOCATION,
    DEFAULT_PROJECT,
    ApiError,
    ApiUnreachable,
    JsonObject,
    _Client,
    _drop_empty,
    _http_client,
)

TERMINAL_STATES = frozenset(
    {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"}
)
"""States a job never leaves."""

SERVICE = "training"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def parse_job_name(reference: str) -> tuple[str | None, str | None, str]:
    """``(project, location, id)`` of a job id or a full name
    (``projects/p/locations/l/customJobs/123``; project and location ``None`` for an id)."""
    parts = reference.strip().strip("/").split("/")
    if len(parts) == 6 and (parts[0], parts[2], parts[4]) == (
        "projects",
        "locations",
        "customJobs",
    ):
        return parts[1], parts[3], parts[5]
    return None, None, parts[-1]


def _vertex_error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        text = " ".join(response.text.split())[:200] or response.reason_phrase
        return ApiError(response.status_code, f"http_{response.status_code}", text)
    found = error.get("details")
    details: list[Any] = found if isinstance(found, list) else []
    reason = next(
        (
            str(d["reason"])
            for d in details
            if isinstance(d, dict) and d.get("@type") == _ERROR_INFO and d.get("reason")
        ),
        None,
    )
    code = error.get("code")
    stable = reason or str(error.get("status") or code or "unknown").lower()
    return ApiError(response.status_code, stable, str(error.get("message", "")), details)


class JobsClient(_Client):
    """Calls the training API at ``base_url`` (the one base URL of the platform).

    ``project`` and ``location`` select the long form ``/v1/projects/{p}/locations/{l}/``;
    with neither, the short ``/v1/`` form (the default project and location).
    """

    _service = SERVICE

    def __init__(
        self,
        base_url: str = DEFAULT_API_URL,
        *,
        token: str | None = None,
        project: str | None = None,
        location: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        """The API's base URL, without a trailing slash."""
        self.project = project
        self.location = location
        self._http = _http_client(self.base_url, token, timeout, transport)

    def _error(self, response: httpx.Response) -> ApiError:
        return _vertex_error(response)

    def _prefix(self, project: str | None = None, location: str | None = None) -> str:
        project, location = project or self.project, location or self.location
        if project or location:
            location = location or DEFAULT_LOCATION
            return f"/v1/projects/{project or DEFAULT_PROJECT}/locations/{location}"
        return "/v1"

    def _job_path(self, reference: str, suffix: str = "") -> str:
        project, location, job_id = parse_job_name(reference)
        return f"{self._prefix(project, location)}/customJobs/{job_id}{suffix}"

    # jobs

    def create_job(self, body: JsonObject) -> JsonObject:
        """Create a custom job (``displayName``, ``jobSpec``, ``labels``); answers it."""
        return self._json("POST", f"{self._prefix()}/customJobs", json=body)

    def get_job(self, reference: str) -> JsonObject:
        """One job, by id or full name."""
        return self._json("GET", self._job_path(reference))

    def list_jobs(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
        page_token: str = "",
    ) -> JsonObject:
        """One page of jobs: ``{"customJobs": [...], "nextPageToken": ...}``."""
        params = {
            "filter": filter,
            "orderBy": order_by,
            "pageSize": page_size or "",
            "pageToken": page_token,
        }
        return self._json("GET", f"{self._prefix()}/customJobs", params=params)

    def iter_jobs(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
    ) -> Iterator[JsonObject]:
        """Every job, following pages."""
        token = ""
        while True:
            page = self.list_jobs(
                filter=filter, order_by=order_by, page_size=page_size, page_token=token
            )
            yield from page.get("customJobs", [])
            token = page.get("nextPageToken", "")
            if not token:
                return

    def cancel_job(self, reference: str) -> JsonObject:
        """Ask a job to stop (``:cancel``); it becomes CANCELLING, then CANCELLED."""
        return self._json("POST", self._job_path(reference, ":cancel"), json={})

    def delete_job(self, reference: str) -> JsonObject:
        """Delete an ended job."""
        return self._json("DELETE", self._job_path(reference))

    def list_replicas(self, reference: str) -> JsonObject:
        """Every replica's current attempt (``{"replicas": [...]}``)."""
        return self._json("GET", self._job_path(reference, "/replicas"))

    def wait_job(
        self, reference: str, *, poll_seconds: float = 1.0, timeout: float | None = None
    ) -> JsonObject:
        """Poll until the job is in a terminal state (or ``timeout`` passes); the last read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get_job(reference)
            if job.get("state") in TERMINAL_STATES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                return job
            time.sleep(poll_seconds)

    # packages

    def upload_package(
        self, name: str, data: bytes | Path, *, project: str | None = None
    ) -> JsonObject:
        """Store a package (a wheel or sdist: bytes, or a file streamed from disk); answers
        ``{"uri", "sha256", "sizeBytes"}``; put ``uri`` in ``packageUris``."""
        path = "/upload" + self._prefix(project) + "/packages"
        headers = {"Content-Type": "application/octet-stream"}
        if isinstance(data, Path):
            with data.open("rb") as file:
                return self._json(
                    "POST", path, params={"name": name}, content=file, headers=headers
                )
        return self._json("POST", path, params={"name": name}, content=data, headers=headers)

    # logs

    def list_logs(self, reference: str) -> JsonObject:
        """Every stored log of the job (``{"logs": [{replica, attempt, stream, ...}]}``)."""
        return self._json("GET", self._job_path(reference, "/logs:list"))

    def read_logs(
        self,
        reference: str,
        *,
        replica: str = "",
        attempt: int | None = None,
        stream: str = "both",
        offset: int | None = None,
    ) -> bytes:
        """A replica attempt's output as stored now (stdout, then stderr, for ``both``)."""
        params = _log_params(replica, attempt, stream, offset, follow=False)
        return self._send("GET", self._job_path(reference, "/logs"), params=params).content

    def follow_logs(
        self,
        reference: str,
        *,
        replica: str = "",
        attempt: int | None = None,
        stream: str = "both",
        offset: int | None = None,
    ) -> Iterator[bytes]:
        """A replica's output as it lands, until its attempt (without ``attempt``: its
        job) ends."""
        params = _log_params(replica, attempt, stream, offset, follow=True)
        path = self._job_path(reference, "/logs")
        timeout = httpx.Timeout(None, connect=self._http.timeout.connect)
        try:
            with self._http.stream(
                "GET", path, params=_drop_empty(params), timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _vertex_error(response)
                yield from response.iter_raw()
        except httpx.TransportError as error:
            detail = str(error) or type(error).__name__
            raise ApiUnreachable(self.base_url, detail, service=SERVICE) from error


def _log_params(
    replica: str, attempt: int | None, stream: str, offset: int | None, *, follow: bool
) -> dict[str, object]:
    params: dict[str, object] = {"replica": replica, "stream": stream}
    if attempt is not None:
        params["attempt"] = attempt
    if offset is not None:
        params["offset"] = offset
    if follow:
        params["follow"] = "true"
    return params
