"""How the training API's resources are addressed: the platform's two forms of every route
(:mod:`mldiag_platform.resources`), with every id refused as ``invalid_resource_id``.

Any location that is a resource id works (``local``, or a Vertex region such as
``us-central1``: the Vertex SDK refuses anything else before it sends a request).
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from mldiag_platform import resources
from mldiag_schemas.auth import Permission
from mldiag_training.errors import InvalidResourceId


def checked_id(value: str, field: str) -> str:
    """``value`` if it is a resource id (whole), else ``invalid_resource_id`` naming
    ``field``."""
    return resources.checked_id(value, field, error=InvalidResourceId)


def _job_id(job_id: Annotated[str, resources.id_path("The custom job's id (digits).")]) -> str:
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
    return resources.route(
        router,
        method,
        path,
        permission,
        body=body or (),
        response=response,
        id_error=InvalidResourceId,
    )
