"""Small typed clients of the platform's REST APIs: the run-registry (runs, metrics,
operations, events, goodput, rule overrides, profiler sessions and targets) and the
xprof-provisioner (XProf instances).

Answers are the API's JSON bodies as plain dicts, exactly as sent (NaN and ±Inf kept), so
a caller can print them unchanged; the SDK does not depend on the platform's schema models.
Failures raise one of two errors: :class:`ApiError` when the API answered with an error,
:class:`ApiUnreachable` when nothing answered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, ClassVar, Self
from urllib.parse import urlencode

import httpx

DEFAULT_API_URL = "http://127.0.0.1:8080"
"""Where ``mldiag up`` serves the run-registry API."""

DEFAULT_XPROF_URL = "http://127.0.0.1:8084"
"""Where ``mldiag up`` serves the xprof-provisioner (XProf instances and their links)."""

DEFAULT_PROJECT = "default"
"""The project the short resource form (``/v1/machineLearningRuns``) stands for."""

DEFAULT_LOCATION = "local"
"""The location the short resource form stands for."""

JsonObject = dict[str, Any]
"""A decoded JSON object, as the API sent it."""


class ApiClientError(Exception):
    """Base of the errors :class:`RegistryClient` raises."""


class ApiError(ApiClientError):
    """The API answered with an error: ``{"error": {"code", "message", "details"}}``."""

    def __init__(
        self, status: int, code: str, message: str, details: list[Any] | None = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        """The HTTP status."""
        self.code = code
        """The stable error code (``run_not_found``, ``etag_mismatch``, ...)."""
        self.message = message
        """What went wrong, for a person."""
        self.details = details or []
        """Structured details, when the API gives any."""


class ApiUnreachable(ApiClientError):
    """Nothing answered at the API's URL (refused, timed out, name not resolved)."""

    def __init__(self, url: str, detail: str, *, service: str = "run-registry") -> None:
        super().__init__(f"cannot reach the mldiag API at {url}: {detail}")
        self.url = url
        """The base URL tried."""
        self.detail = detail
        """What the transport said."""
        self.service = service
        """Which API it was: ``run-registry`` or ``xprof-provisioner``."""


def _error_from(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        details = error.get("details")
        return ApiError(
            response.status_code,
            error["code"],
            str(error.get("message", "")),
            details if isinstance(details, list) else None,
        )
    text = " ".join(response.text.split())[:200] or response.reason_phrase
    return ApiError(response.status_code, f"http_{response.status_code}", text)


def _drop_empty(params: Mapping[str, object]) -> dict[str, str | int]:
    return {
        key: value
        for key, value in params.items()
        if isinstance(value, str | int) and value != "" and not isinstance(value, bool)
    }


def stream_body(
    http: httpx.Client,
    path: str,
    params: Mapping[str, object],
    error: Callable[[httpx.Response], Exception],
    service: str,
) -> Iterator[bytes]:
    """The body of ``GET path`` as it comes, with no read timeout (a long stream's bytes
    keep coming). An error answer raises ``error(response)`` before the first byte; a
    transport failure raises :class:`ApiUnreachable` naming ``service``."""
    timeout = httpx.Timeout(None, connect=http.timeout.connect)
    try:
        with http.stream("GET", path, params=_drop_empty(params), timeout=timeout) as response:
            if response.status_code >= 400:
                response.read()
                raise error(response)
            yield from response.iter_raw()
    except httpx.TransportError as failure:
        detail = str(failure) or type(failure).__name__
        url = str(http.base_url).rstrip("/")  # as the client was given it
        raise ApiUnreachable(url, detail, service=service) from failure


def _http_client(
    base_url: str, token: str | None, timeout: float, transport: httpx.BaseTransport | None
) -> httpx.Client:
    headers = {"User-Agent": "mldiag-cli", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=base_url, headers=headers, timeout=timeout, transport=transport)


class _Client:
    """An HTTP client of one service: a context manager that closes its connections, and
    the one way its calls are sent and their answers read."""

    base_url: str
    _http: httpx.Client
    _service: ClassVar[str] = "run-registry"
    """Which API it calls (named by :class:`ApiUnreachable`)."""

    def _error(self, response: httpx.Response) -> ApiError:
        """The error an answer of 400 or more stands for, in the API's error dialect."""
        return _error_from(response)

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """One call (empty ``params`` left out): the answer, :class:`ApiError` or
        :class:`ApiUnreachable`."""
        try:
            response = self._http.request(method, path, params=_drop_empty(params or {}), **kwargs)
        except httpx.TransportError as error:
            detail = str(error) or type(error).__name__
            raise ApiUnreachable(self.base_url, detail, service=self._service) from error
        if response.status_code >= 400:
            raise self._error(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> JsonObject:
        """One call whose answer is a JSON object (``{}`` for a bodiless 2xx)."""
        response = self._send(method, path, **kwargs)
        if not response.content:
            return {}  # a bodiless 2xx (204): nothing to show
        try:
            answer = response.json()
        except ValueError as error:
            raise ApiError(response.status_code, "invalid_response", str(error)) from error
        if not isinstance(answer, dict):
            raise ApiError(response.status_code, "invalid_response", "not a JSON object")
        return answer

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()


class _ScopedClient(_Client):
    """A client whose collections sit under ``/v1/`` (the default project and location) or,
    when ``project`` or ``location`` is given, under ``/v1/projects/{p}/locations/{l}/``."""

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
        if project or location:
            self._prefix = (
                f"/v1/projects/{project or DEFAULT_PROJECT}"
                f"/locations/{location or DEFAULT_LOCATION}"
            )
        else:
            self._prefix = "/v1"
        self._http = _http_client(self.base_url, token, timeout, transport)


class RegistryClient(_ScopedClient):
    """Calls the run-registry API at ``base_url``.

    ``token`` is sent as a Bearer token when set. ``project`` and ``location`` select the
    long resource form ``/v1/projects/{p}/locations/{l}/...``; when neither is given the
    short form (the default project and location) is used. ``transport`` lets tests and
    embedders route requests elsewhere. Use it as a context manager, or call :meth:`close`.
    """

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        body: JsonObject | None = None,
        scoped: bool = True,
    ) -> JsonObject:
        prefix = self._prefix if scoped else "/v1"
        return self._json(method, prefix + path, params=params, json=body)

    # runs

    def create_run(self, body: JsonObject) -> JsonObject:
        """Create a run; answers the done operation whose ``response`` is the run."""
        return self._call("POST", "/machineLearningRuns", body=body)

    def list_runs(
        self,
        *,
        filter: str = "",  # the API's own parameter name
        order_by: str = "",
        page_size: int | None = None,
        page_token: str = "",
    ) -> JsonObject:
        """One page of runs: ``{"machineLearningRuns": [...], "nextPageToken"}``."""
        params = {
            "filter": filter,
            "orderBy": order_by,
            "pageSize": page_size,
            "pageToken": page_token,
        }
        return self._call("GET", "/machineLearningRuns", params=params)

    def iter_runs(
        self,
        *,
        filter: str = "",  # the API's own parameter name
        order_by: str = "",
        page_size: int | None = None,
    ) -> Iterator[JsonObject]:
        """Every run the query matches, following ``nextPageToken``."""
        token = ""
        while True:
            page = self.list_runs(
                filter=filter, order_by=order_by, page_size=page_size, page_token=token
            )
            yield from page.get("machineLearningRuns", [])
            token = page.get("nextPageToken") or ""
            if not token:
                return

    def get_run(self, run_id: str) -> JsonObject:
        """The run ``run_id``."""
        return self._call("GET", f"/machineLearningRuns/{run_id}")

    def update_run(self, run_id: str, body: JsonObject, *, update_mask: str = "") -> JsonObject:
        """Update a run; ``body`` carries the ``etag`` read. Answers a done operation."""
        return self._call(
            "PATCH",
            f"/machineLearningRuns/{run_id}",
            params={"updateMask": update_mask},
            body=body,
        )

    def delete_run(self, run_id: str, *, etag: str = "") -> JsonObject:
        """Soft-delete a run (checking ``etag`` when given). Answers a done operation."""
        return self._call("DELETE", f"/machineLearningRuns/{run_id}", params={"etag": etag})

    def purge_run(self, run_id: str) -> JsonObject:
        """Remove a soft-deleted run for good: its metrics, events, logs, profiles and the run
        itself. Answers what was removed; ``run_not_deleted`` for a live run."""
        return self._call("POST", f"/machineLearningRuns/{run_id}:purge")

    # metrics

    def export_metric(
        self,
        run_id: str,
        metric: str,
        export_format: str = "csv",
        *,
        start_step: int | None = None,
        end_step: int | None = None,
    ) -> Iterator[bytes]:
        """A whole metric (every series) as CSV or JSON Lines, as the registry streams it
        (``GET …/metrics:export``): bounded memory, however long the metric.

        Raises the API's error (``run_not_found``, ``invalid_export_format`` …) before the
        first byte, or :class:`ApiUnreachable`.
        """
        params = {
            "metric": metric,
            "format": export_format,
            "startStep": start_step,
            "endStep": end_step,
        }
        path = f"{self._prefix}/machineLearningRuns/{run_id}/metrics:export"
        yield from stream_body(self._http, path, params, self._error, self._service)

    def list_metrics(self, run_id: str) -> JsonObject:
        """The run's metric names with point counts and highest steps."""
        return self._call("GET", f"/machineLearningRuns/{run_id}/metrics")

    def run_configs(self, run_id: str) -> JsonObject:
        """The run's configs flattened to dotted keys, one entry per leaf."""
        return self._call("GET", f"/machineLearningRuns/{run_id}/configs")

    def diff_configs(self, base: str, other: str, *, include_unchanged: bool = False) -> JsonObject:
        """How run ``other``'s configs differ from run ``base``'s, key by flattened key."""
        params = {"base": base, "other": other, "includeUnchanged": str(include_unchanged).lower()}
        return self._call("GET", "/machineLearningRuns:diffConfigs", params=params)

    def latest_metrics(self, run_id: str) -> JsonObject:
        """The latest value of every series of the run."""
        return self._call("GET", f"/machineLearningRuns/{run_id}/metrics:latest")

    def read_metric(
        self, run_id: str, metric: str, *, page_size: int | None = None, page_token: str = ""
    ) -> JsonObject:
        """One page of a metric's raw points, in step order."""
        return self._call(
            "GET",
            f"/machineLearningRuns/{run_id}/metrics/{metric}",
            params={"pageSize": page_size, "pageToken": page_token},
        )

    def downsample_metric(
        self, run_id: str, metric: str, *, buckets: int, group_by: str = ""
    ) -> JsonObject:
        """A metric downsampled to at most ``buckets`` step buckets per line."""
        return self._call(
            "GET",
            f"/machineLearningRuns/{run_id}/metrics/{metric}",
            params={"buckets": buckets, "groupBy": group_by},
        )

    def compare_metrics(
        self, run_ids: list[str], metric: str, *, buckets: int | None = None, group_by: str = ""
    ) -> JsonObject:
        """One metric of several runs on shared step buckets."""
        return self._call(
            "GET",
            "/machineLearningRuns:compareMetrics",
            params={
                "runs": ",".join(run_ids),
                "metric": metric,
                "buckets": buckets,
                "groupBy": group_by,
            },
        )

    def run_goodput(self, run_id: str) -> JsonObject:
        """The run's productive time against its wall time, and the buckets of lost time."""
        return self._call("GET", f"/machineLearningRuns/{run_id}:goodput")

    # workload logs

    def list_logs(
        self,
        run: str,
        *,
        grep: str = "",
        since: str = "",
        until: str = "",
        host: str | None = None,
        stream: str = "",
        min_severity: str = "",
        page_size: int | None = None,
        page_token: str = "",
    ) -> JsonObject:
        """One page of a run's log lines, oldest first: ``{"entries": [...],
        "nextPageToken"}``. ``run`` is its id or full name; the token stays set at the end
        while lines can still come (ask again with it to follow)."""
        params = {
            "grep": grep,
            "since": since,
            "until": until,
            "host": host,
            "stream": stream,
            "minSeverity": min_severity,
            "pageSize": page_size,
            "pageToken": page_token,
        }
        if "/" in run:
            return self._call("GET", "/" + run.strip("/") + "/logs", params=params, scoped=False)
        return self._call("GET", f"/machineLearningRuns/{run}/logs", params=params)

    # workload events and rule overrides

    def list_events(
        self,
        *,
        run_id: str | None = None,
        filter: str = "",  # the API's own parameter name
        page_size: int | None = None,
        page_token: str = "",
    ) -> JsonObject:
        """One page of workload events, newest first: ``{"events": [...], "nextPageToken"}``;
        those of one run with ``run_id``, else of every run of the project."""
        path = f"/machineLearningRuns/{run_id}/monitoredEvents" if run_id else "/monitoredEvents"
        params = {"filter": filter, "pageSize": page_size, "pageToken": page_token}
        return self._call("GET", path, params=params)

    def iter_events(
        self,
        *,
        run_id: str | None = None,
        filter: str = "",  # the API's own parameter name
        page_size: int | None = None,
    ) -> Iterator[JsonObject]:
        """Every event the query matches, following ``nextPageToken``."""
        token = ""
        while True:
            page = self.list_events(
                run_id=run_id, filter=filter, page_size=page_size, page_token=token
            )
            yield from page.get("events", [])
            token = page.get("nextPageToken") or ""
            if not token:
                return

    def get_event(self, event: str, *, run_id: str | None = None) -> JsonObject:
        """One event, by its full name (``projects/.../monitoredEvents/{id}``) or by its id
        and ``run_id``."""
        if "/" in event:
            return self._call("GET", "/" + event.strip("/"), scoped=False)
        if not run_id:
            raise ValueError("an event id needs its run (or give the event's full name)")
        return self._call("GET", f"/machineLearningRuns/{run_id}/monitoredEvents/{event}")

    def get_monitoring_rules(self) -> JsonObject:
        """The project's overrides of the detection rules: ``{"name", "rules": {...}}``."""
        return self._call("GET", "/monitoringRules")

    def set_monitoring_rules(self, rules: JsonObject) -> JsonObject:
        """Replace the project's overrides (``rules``: rule name → override)."""
        return self._call("PATCH", "/monitoringRules", body={"rules": rules})

    # profiles

    def list_profiler_sessions(
        self, run_id: str, *, page_size: int | None = None, page_token: str = ""
    ) -> JsonObject:
        """One page of the run's profiler sessions, newest first:
        ``{"profilerSessions": [...], "nextPageToken"}``."""
        return self._call(
            "GET",
            f"/machineLearningRuns/{run_id}/profilerSessions",
            params={"pageSize": page_size, "pageToken": page_token},
        )

    def iter_profiler_sessions(
        self, run_id: str, *, page_size: int | None = None
    ) -> Iterator[JsonObject]:
        """Every profiler session of the run, following ``nextPageToken``."""
        token = ""
        while True:
            page = self.list_profiler_sessions(run_id, page_size=page_size, page_token=token)
            yield from page.get("profilerSessions", [])
            token = page.get("nextPageToken") or ""
            if not token:
                return

    def get_profiler_session(self, run_id: str, session_id: str) -> JsonObject:
        """One profiler session of the run, with its hosts."""
        return self._call("GET", f"/machineLearningRuns/{run_id}/profilerSessions/{session_id}")

    def capture_profile(self, run_id: str, body: JsonObject) -> JsonObject:
        """Start an on-demand capture (``CaptureProfileRequest``); answers the operation,
        done once the capture finished (its ``response`` is then the session)."""
        return self._call(
            "POST", f"/machineLearningRuns/{run_id}/profilerSessions:capture", body=body
        )

    def list_profiler_targets(self, run_id: str) -> JsonObject:
        """The run's profiler servers: ``{"profilerTargets": [...]}``."""
        return self._call("GET", f"/machineLearningRuns/{run_id}/profilerTargets")

    # operations

    def list_operations(
        self,
        *,
        filter: str = "",  # the API's own parameter name
        page_size: int | None = None,
        page_token: str = "",
    ) -> JsonObject:
        """One page of operations, newest first: ``{"operations": [...], "nextPageToken"}``."""
        return self._call(
            "GET",
            "/operations",
            params={"filter": filter, "pageSize": page_size, "pageToken": page_token},
        )

    def get_operation(self, operation_id: str) -> JsonObject:
        """The operation ``operation_id``."""
        return self._call("GET", f"/operations/{operation_id}")

    def wait_operation(self, operation_id: str, *, timeout: str = "") -> JsonObject:
        """Wait until the operation is done (``timeout`` like ``"5s"``; the API caps it)."""
        body = {"timeout": timeout} if timeout else {}
        return self._call("POST", f"/operations/{operation_id}:wait", body=body)

    def cancel_operation(self, operation_id: str) -> JsonObject:
        """Cancel the operation (409 ``operation_already_done`` for a finished one)."""
        return self._call("POST", f"/operations/{operation_id}:cancel")

    def delete_operation(self, operation_id: str) -> JsonObject:
        """Forget the operation (the run it touched stays)."""
        return self._call("DELETE", f"/operations/{operation_id}")

    # API tokens (not scoped to a project)

    def create_token(
        self, role: str, *, display_name: str = "", ttl_seconds: int | None = None
    ) -> JsonObject:
        """A new token: ``{"token": {...}, "secret": "mldiag_..."}`` (the only time it shows)."""
        body: JsonObject = {"role": role, "displayName": display_name}
        if ttl_seconds is not None:
            body["ttlSeconds"] = ttl_seconds
        return self._call("POST", "/apiTokens", body=body, scoped=False)

    def list_tokens(self) -> JsonObject:
        """Every token, without secrets: ``{"apiTokens": [...]}``."""
        return self._call("GET", "/apiTokens", scoped=False)

    def revoke_token(self, token_id: str) -> JsonObject:
        """Revoke a token everywhere; answers it, REVOKED."""
        return self._call("DELETE", f"/apiTokens/{token_id}", scoped=False)


class XProfClient(_Client):
    """Calls the xprof-provisioner at ``base_url`` (XProf instances serving runs' sessions).

    ``token`` is sent as a Bearer token when set; ``transport`` lets tests route requests
    elsewhere. Errors are those of :class:`RegistryClient`.
    """

    _service = "xprof-provisioner"

    def __init__(
        self,
        base_url: str = DEFAULT_XPROF_URL,
        *,
        token: str | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        """The provisioner's base URL, without a trailing slash."""
        self._http = _http_client(self.base_url, token, timeout, transport)

    def _call(self, method: str, path: str, body: JsonObject | None = None) -> JsonObject:
        return self._json(method, path, json=body)

    def create_instance(self, run_ids: list[str]) -> JsonObject:
        """An instance serving the sessions of ``run_ids`` (a new one, or the one serving
        them already); answers the ``XProfInstance``."""
        return self._call("POST", "/v1/xprofInstances", {"runIds": run_ids})

    def list_instances(self) -> JsonObject:
        """Every instance: ``{"xprofInstances": [...]}``."""
        return self._call("GET", "/v1/xprofInstances")

    def delete_instance(self, instance_id: str) -> JsonObject:
        """Stop an instance and drop its copy of the sessions; answers it, STOPPED."""
        return self._call("DELETE", f"/v1/xprofInstances/{instance_id}")


def xprof_link(base_url: str, run_id: str, session_id: str) -> str:
    """``<provisioner>/xprof/open?run=R&session=S``: opens a session in XProf through the
    provisioner (a session's shareable link)."""
    return f"{base_url.rstrip('/')}/xprof/open?{urlencode({'run': run_id, 'session': session_id})}"
