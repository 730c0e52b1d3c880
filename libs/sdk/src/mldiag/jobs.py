"""A small client of the training API: custom jobs (Vertex v1 ``customJobs``), their
replicas, their logs and package uploads.

Like :mod:`mldiag.api_client`, answers are the API's JSON bodies as plain dicts. The training
API speaks Vertex's error dialect (``{"error": {"code": 404, "status": "NOT_FOUND", ...}}``);
its errors are raised as :class:`~mldiag.api_client.ApiError` whose ``code`` is mldiag's
stable reason (``not_found``, ``invalid_argument``, ...), so callers handle both APIs alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mldiag._training import SERVICE, TrainingClient, parse_resource_name, vertex_error
from mldiag.api_client import JsonObject, stream_body

TERMINAL_STATES = frozenset(
    {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"}
)
"""States a job never leaves."""

CUSTOM_JOBS = "customJobs"
"""The collection of custom jobs (and the key of their list page)."""


def parse_job_name(reference: str) -> tuple[str | None, str | None, str]:
    """``(project, location, id)`` of a job id or a full name
    (``projects/p/locations/l/customJobs/123``; project and location ``None`` for an id)."""
    return parse_resource_name(reference, CUSTOM_JOBS)


class JobsClient(TrainingClient):
    """Calls the training API at ``base_url`` (the one base URL of the platform).

    ``project`` and ``location`` select the long form ``/v1/projects/{p}/locations/{l}/``;
    with neither, the short ``/v1/`` form (the default project and location).
    """

    _collection = CUSTOM_JOBS

    # jobs

    def create_job(self, body: JsonObject) -> JsonObject:
        """Create a custom job (``displayName``, ``jobSpec``, ``labels``); answers it."""
        return self._create(body)

    def get_job(self, reference: str) -> JsonObject:
        """One job, by id or full name."""
        return self._get(reference)

    def list_jobs(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
        page_token: str = "",
    ) -> JsonObject:
        """One page of jobs: ``{"customJobs": [...], "nextPageToken": ...}``."""
        return self._list(
            filter=filter, order_by=order_by, page_size=page_size, page_token=page_token
        )

    def iter_jobs(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
    ) -> Iterator[JsonObject]:
        """Every job, following pages."""
        return self._iter(filter=filter, order_by=order_by, page_size=page_size)

    def cancel_job(self, reference: str) -> JsonObject:
        """Ask a job to stop (``:cancel``); it becomes CANCELLING, then CANCELLED."""
        return self._cancel(reference)

    def delete_job(self, reference: str) -> JsonObject:
        """Delete an ended job."""
        return self._delete(reference)

    def list_replicas(self, reference: str) -> JsonObject:
        """Every replica's current attempt (``{"replicas": [...]}``)."""
        return self._json("GET", self._path(reference, "/replicas"))

    def wait_job(
        self, reference: str, *, poll_seconds: float = 1.0, timeout: float | None = None
    ) -> JsonObject:
        """Poll until the job is in a terminal state (or ``timeout`` passes); the last read."""
        return self._wait(reference, TERMINAL_STATES, poll_seconds=poll_seconds, timeout=timeout)

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
        return self._json("GET", self._path(reference, "/logs:list"))

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
        return self._send("GET", self._path(reference, "/logs"), params=params).content

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
        path = self._path(reference, "/logs")
        yield from stream_body(self._http, path, params, vertex_error, SERVICE)


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
