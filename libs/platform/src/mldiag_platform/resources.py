"""How a Vertex-style HTTP API addresses its resources: the parent (project, location), the
ids in paths, and the two forms of every route.

Every route is served twice: under its full resource name
(``/v1/projects/{project}/locations/{location}/<collection>/...``) and under the short
``/v1/<collection>/...`` form, which means the default project and location. Any location
that is a resource id works (``local``, or a region such as ``us-central1``).

Every id in a path is checked against its grammar (``mldiag_schemas.ids``) before a handler
runs, and refused with a 400 naming the parameter: an id reaches tables, NATS subjects and
storage paths. The pattern is also written into the OpenAPI document. Each service names
the error its ids are refused with and adds the dependencies of its own resource ids.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Union

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel

from mldiag_platform.auth import requires
from mldiag_platform.errors import InvalidArgument
from mldiag_platform.http import json_body
from mldiag_schemas.auth import Permission
from mldiag_schemas.ids import DEFAULT_LOCATION, DEFAULT_PROJECT, RESOURCE_ID_PATTERN

PARENT_PREFIXES = ("/v1/projects/{project}/locations/{location}", "/v1")
"""The full and the short parent every route is served under."""

_RESOURCE_ID = re.compile(RESOURCE_ID_PATTERN)
RESOURCE_ID_RULE = "lower-case letters, digits and '-', 1 to 63, starting and ending alphanumeric"
""":data:`~mldiag_schemas.ids.RESOURCE_ID_PATTERN` in words, for error messages."""


def checked_id(
    value: str,
    field: str,
    pattern: re.Pattern[str] = _RESOURCE_ID,
    error: type[InvalidArgument] = InvalidArgument,
    rule: str = RESOURCE_ID_RULE,
) -> str:
    """``value`` if it follows ``pattern`` (whole, so no trailing newline slips through),
    else ``error`` naming ``field``."""
    if pattern.fullmatch(value) is None:
        problem = f"is not a valid id: use {rule}"
        raise error(
            f"invalid {field} {value[:80]!r}: {problem}",
            details=[{"field": field, "problem": problem}],
        )
    return value


def id_path(description: str, pattern: str = RESOURCE_ID_PATTERN) -> Any:
    """A path parameter whose pattern is documented; the dependency reading it checks it
    (FastAPI's own check would answer a generic code where the APIs have named ones)."""
    return Path(description=description, json_schema_extra={"pattern": pattern})


@dataclass(frozen=True)
class Parent:
    """The project and location a request addresses."""

    project: str
    location: str


def _parent(request: Request) -> Parent:
    params = request.path_params
    return Parent(params.get("project", DEFAULT_PROJECT), params.get("location", DEFAULT_LOCATION))


ParentDep = Annotated[Parent, Depends(_parent)]
"""Inject the addressed parent into a route (checked by :func:`route`)."""


def _parent_check(error: type[InvalidArgument]) -> Callable[[str, str], None]:
    def check_parent(
        project: Annotated[str, id_path("The project id (`default` in the short form).")],
        location: Annotated[str, id_path("The location id: `local` or a region (`us-central1`).")],
    ) -> None:
        checked_id(project, "project", error=error)
        checked_id(location, "location", error=error)

    return check_parent


def route(
    router: APIRouter,
    method: str,
    path: str,
    permission: Permission,
    *,
    status_code: int | None = None,
    body: type[BaseModel] | tuple[type[BaseModel], ...] = (),
    response: type[BaseModel] | tuple[type[BaseModel], ...] | None = None,
    responses: dict[int | str, dict[str, Any]] | None = None,
    id_error: type[InvalidArgument] = InvalidArgument,
) -> Callable[[Any], Any]:
    """Register a handler on ``router`` under both the full and the short parent, open only
    to callers whose role grants ``permission``.

    ``body`` documents the JSON body the handler reads (a tuple: any of them) and
    ``response`` the JSON it answers (a tuple: any of them), at ``status_code`` (200 unless
    given); ``responses`` documents other answers (FastAPI's ``responses=``: a stream, an
    error only this route gives). A project or location that is not a resource id is
    refused with ``id_error``.
    """
    bodies = body if isinstance(body, tuple) else (body,)
    check_parent = _parent_check(id_error)
    documented = dict(responses or {})
    if response is not None:
        models = response if isinstance(response, tuple) else (response,)
        documented[status_code or 200] = {"model": Union[models]}  # noqa: UP007  # a runtime tuple

    def register(func: Any) -> Any:
        for prefix in PARENT_PREFIXES:
            dependencies = [requires(permission)]
            if "{project}" in prefix:
                dependencies.append(Depends(check_parent))
            router.add_api_route(
                prefix + path,
                func,
                methods=[method],
                status_code=status_code,
                dependencies=dependencies,
                openapi_extra=json_body(*bodies) if bodies else None,
                responses=documented or None,
            )
        return func

    return register
