"""How the registry's HTTP resources are addressed: the parent (project, location) and the
two forms of every route.

Every run route is served twice: under its full resource name
(``/v1/projects/{project}/locations/{location}/machineLearningRuns/...``) and under the
short ``/v1/machineLearningRuns/...`` form, which means the default project and location.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from mldiag_platform.auth import requires
from mldiag_schemas.auth import Permission
from mldiag_schemas.ids import DEFAULT_LOCATION, DEFAULT_PROJECT

PARENT_PREFIXES = ("/v1/projects/{project}/locations/{location}", "/v1")


@dataclass(frozen=True)
class Parent:
    """The project and location a request addresses."""

    project: str
    location: str


def _parent(request: Request) -> Parent:
    params = request.path_params
    return Parent(params.get("project", DEFAULT_PROJECT), params.get("location", DEFAULT_LOCATION))


ParentDep = Annotated[Parent, Depends(_parent)]
"""Inject the addressed parent into a route."""


def route(
    router: APIRouter, method: str, path: str, permission: Permission, status_code: int = 200
) -> Callable[[Any], Any]:
    """Register a handler on ``router`` under both the full and the short parent, open only
    to callers whose role grants ``permission``.
    """

    def register(func: Any) -> Any:
        for prefix in PARENT_PREFIXES:
            router.add_api_route(
                prefix + path,
                func,
                methods=[method],
                status_code=status_code,
                dependencies=[requires(permission)],
            )
        return func

    return register
