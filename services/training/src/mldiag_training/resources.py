"""How the training API's resources are addressed: the parent (project, location), the ids
in paths, and the two forms of every route.

Every route is served twice: under its full resource name
(``/v1/projects/{project}/locations/{location}/customJobs/...``) and under the short
``/v1/customJobs/...`` form, which means the default project and location. Any location
that is a resource id works (``local``, or a Vertex region such as ``us-central1``: the
Vertex SDK refuses anything else before it sends a request).
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel

from mldiag_platform.auth import requires
from mldiag_platform.http import json_body
from mldiag_schemas.auth import Permission
from mldiag_schemas.ids import DEFAULT_LOCATION, DEFAULT_PROJECT, RESOURCE_ID_PATTERN
from mldiag_training.errors import InvalidResourceId

PARENT_PREFIXES = ("/v1/projects/{project}/locations/{location}", "/v1")

_RESOURCE_ID = re.compile(RESOURCE_ID_PATTERN)
_RULE = "lower-case letters, digits and '-', 1 to 63, starting and ending alphanumeric"


def checked_id(value: str, field: str) -> str:
    """``value`` if it is a resource id (whole), else INVALID_ARGUMENT naming ``field``."""
    if _RESOURCE_ID.fullmatch(value) is None:
        problem = f"is not a valid id: use {_RULE}"
        raise InvalidResourceId(
            f"invalid {field} {value[:80]!r}: {problem}",
            details=[{"field": field, "problem": problem}],
        )
    return value


def _id_path(description: str) -> Any:
    # Documented; checked by the dependency (FastAPI's own check answers a generic body).
    return Path(description=description, json_schema_extra={"pattern": RESOURCE_ID_PATTERN})


@dataclass(frozen=True)
class Parent:
    """The project and location a request addresses."""

    project: str
    location: str


def _parent(request: Request) -> Parent:
    params = request.path_params
    return Parent(params.get("project", DEFAULT_PROJECT), params.get("location", DEFAULT_LOCATION))


def _check_parent(
    project: Annotated[str, _id_path("The project id (`default` in the short form).")],
    location: Annotated[str, _id_path("The location: `local` or a region (`us-central1`).")],
) -> None:
    checked_id(project, "project")
    checked_id(location, "location")


ParentDep = Annotated[Parent, Depends(_parent)]
"""The addressed parent (checked by :func:`route`)."""


def _job_id(job_id: Annotated[str, _id_path("The custom job's id (digits).")]) -> str:
    return checked_id(job_id, "job_id")


JobIdPath = Annotated[str, Depends(_job_id)]
"""The job id of the path, checked."""


def route(
    router: APIRouter,
    method: str,
    path: str,
    permission: Permission,
    body: type[BaseModel] | None = None,
    response: type[BaseModel] | None = None,
) -> Callable[[Any], Any]:
    """Register a handler under both the full and the short parent, open only to callers
    whose role grants ``permission``; ``body`` and ``response`` document its JSON."""

    def register(func: Any) -> Any:
        for prefix in PARENT_PREFIXES:
            dependencies = [requires(permission)]
            if "{project}" in prefix:
                dependencies.append(Depends(_check_parent))
            router.add_api_route(
                prefix + path,
                func,
                methods=[method],
                dependencies=dependencies,
                openapi_extra=json_body(body) if body else None,
                responses={200: {"model": response}} if response else None,
            )
        return func

    return register
