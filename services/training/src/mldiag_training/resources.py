"""How the training API's resources are addressed: the platform's two forms of every route
(:mod:`mldiag_platform.resources`), with every id refused as ``invalid_resource_id``.

Any location that is a resource id works (``local``, or a Vertex region such as
``us-central1``: the Vertex SDK refuses anything else before it sends a request).
"""

from collections.abc import Callable
from typing import Annotated, Any, NamedTuple, TypeVar, cast

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from mldiag_platform import resources
from mldiag_platform.http import page_size_param, query_param
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


T = TypeVar("T")


def app_service(name: str, kind: type[T]) -> Callable[[Request], T]:  # noqa: ARG001 - types T
    """A dependency answering the service the app keeps as ``app.state.<name>`` (``kind``
    only types it: the app sets it up once, in its lifespan)."""

    def service(request: Request) -> T:
        return cast(T, getattr(request.app.state, name))

    service.__name__ = f"{name}_service"
    return service


class ListQuery(NamedTuple):
    """A list route's query parameters, in the order of the services' list methods'
    ``requested_size, page_token, filter_text, order_by``."""

    page_size: int | None
    page_token: str
    filter: str
    order_by: str


def list_query(request: Request) -> ListQuery:
    """``pageSize``, ``pageToken``, ``filter`` and ``orderBy`` (camelCase or snake_case),
    or ``invalid_page_size`` for a size that is no number."""
    return ListQuery(
        page_size_param(request),
        query_param(request, "pageToken", "page_token") or "",
        request.query_params.get("filter", ""),
        query_param(request, "orderBy", "order_by") or "",
    )


def route(
    router: APIRouter,
    method: str,
    path: str,
    permission: Permission,
    body: type[BaseModel] | None = None,
    response: type[BaseModel] | None = None,
    responses: dict[int | str, dict[str, Any]] | None = None,
) -> Callable[[Any], Any]:
    """Register a handler under both the full and the short parent, open only to callers
    whose role grants ``permission``; ``body`` and ``response`` document its JSON,
    ``responses`` any other answer (FastAPI's ``responses=``)."""
    return resources.route(
        router,
        method,
        path,
        permission,
        body=body or (),
        response=response,
        responses=responses,
        id_error=InvalidResourceId,
    )
