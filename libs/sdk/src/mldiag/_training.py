"""What the training API's clients share: its error dialect, its resource names and a base
client over one collection (create, get, list pages, cancel, delete, wait).

:mod:`mldiag.jobs` (custom jobs) and :mod:`mldiag.training_api` (tuning jobs, pipelines,
models) build on it; the training API speaks Vertex's dialect for every collection.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx

from mldiag.api_client import (
    DEFAULT_API_URL,
    DEFAULT_LOCATION,
    DEFAULT_PROJECT,
    ApiError,
    JsonObject,
    _Client,
    _http_client,
)

SERVICE = "training"
"""The service named in :class:`~mldiag.api_client.ApiUnreachable` for the training API."""
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def parse_resource_name(reference: str, collection: str) -> tuple[str | None, str | None, str]:
    """``(project, location, id)`` of an id or a full name
    (``projects/p/locations/l/<collection>/<id>``; project and location ``None`` for an id).

    A model's id keeps its ``@version`` or ``@alias`` (``123@2``, ``123@default``).
    """
    parts = reference.strip().strip("/").split("/")
    if len(parts) == 6 and (parts[0], parts[2], parts[4]) == (
        "projects",
        "locations",
        collection,
    ):
        return parts[1], parts[3], parts[5]
    return None, None, parts[-1]


def vertex_error(response: httpx.Response) -> ApiError:
    """The :class:`~mldiag.api_client.ApiError` of a Vertex-dialect error answer
    (``{"error": {"code", "status", "message", "details"}}``); its ``code`` is the
    google.rpc ``ErrorInfo`` reason, else the lower-cased status."""
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


class TrainingClient(_Client):
    """A client of one of the training API's collections (``_collection``): the base URL,
    the resource forms and the error dialect.

    ``project`` and ``location`` select the long form ``/v1/projects/{p}/locations/{l}/``;
    with neither, the short ``/v1/`` form (the default project and location).
    """

    _service = SERVICE
    _collection: ClassVar[str]

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
        return vertex_error(response)

    def _prefix(self, project: str | None = None, location: str | None = None) -> str:
        project, location = project or self.project, location or self.location
        if project or location:
            location = location or DEFAULT_LOCATION
            return f"/v1/projects/{project or DEFAULT_PROJECT}/locations/{location}"
        return "/v1"

    def _path(self, reference: str, suffix: str = "") -> str:
        project, location, resource_id = parse_resource_name(reference, self._collection)
        return f"{self._prefix(project, location)}/{self._collection}/{resource_id}{suffix}"

    def _page(
        self, path: str, *, filter: str, order_by: str, page_size: int | None, page_token: str
    ) -> JsonObject:
        params = {
            "filter": filter,
            "orderBy": order_by,
            "pageSize": page_size or "",
            "pageToken": page_token,
        }
        return self._json("GET", path, params=params)

    def _every(
        self, path: str, key: str, *, filter: str, order_by: str, page_size: int | None
    ) -> Iterator[JsonObject]:
        token = ""
        while True:
            page = self._page(
                path, filter=filter, order_by=order_by, page_size=page_size, page_token=token
            )
            yield from page.get(key, [])
            token = page.get("nextPageToken", "")
            if not token:
                return

    def _create(self, body: JsonObject) -> JsonObject:
        return self._json("POST", f"{self._prefix()}/{self._collection}", json=body)

    def _get(self, reference: str) -> JsonObject:
        return self._json("GET", self._path(reference))

    def _list(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
        page_token: str = "",
    ) -> JsonObject:
        return self._page(
            f"{self._prefix()}/{self._collection}",
            filter=filter,
            order_by=order_by,
            page_size=page_size,
            page_token=page_token,
        )

    def _iter(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
    ) -> Iterator[JsonObject]:
        return self._every(
            f"{self._prefix()}/{self._collection}",
            self._collection,
            filter=filter,
            order_by=order_by,
            page_size=page_size,
        )

    def _cancel(self, reference: str) -> JsonObject:
        return self._json("POST", self._path(reference, ":cancel"), json={})

    def _delete(self, reference: str, suffix: str = "") -> JsonObject:
        return self._json("DELETE", self._path(reference, suffix))

    def _wait(
        self,
        reference: str,
        terminal: frozenset[str],
        *,
        poll_seconds: float,
        timeout: float | None,
    ) -> JsonObject:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            resource = self._get(reference)
            if resource.get("state") in terminal:
                return resource
            if deadline is not None and time.monotonic() >= deadline:
                return resource
            time.sleep(poll_seconds)
