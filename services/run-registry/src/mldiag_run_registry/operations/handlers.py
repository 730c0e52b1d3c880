"""HTTP routes of operations (AIP-151: get, list, wait, cancel, delete)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from mldiag_platform.http import EMPTY_OBJECT, ContractResponse, read_body
from mldiag_platform.resources import ParentDep, checked_id, id_path, route
from mldiag_run_registry.operations.errors import InvalidOperationId
from mldiag_run_registry.operations.service import OperationsService, parse_timeout
from mldiag_schemas.auth import Permission
from mldiag_schemas.operations import ListOperationsResponse, Operation, WaitOperationRequest

router = APIRouter()

_EMPTY = b"{}"


def _service(request: Request) -> OperationsService:
    service: OperationsService = request.app.state.operations
    return service


ServiceDep = Annotated[OperationsService, Depends(_service)]


def _operation_id(operation_id: Annotated[str, id_path("The operation id.")]) -> str:
    return checked_id(operation_id, "operation_id", error=InvalidOperationId)


OperationIdPath = Annotated[str, Depends(_operation_id)]


@route(router, "GET", "/operations", Permission.OPERATIONS_LIST, response=ListOperationsResponse)
async def list_operations(
    parent: ParentDep,
    service: ServiceDep,
    page_size: Annotated[int | None, Query(alias="pageSize")] = None,
    page_token: Annotated[str, Query(alias="pageToken")] = "",
    filter_text: Annotated[str, Query(alias="filter")] = "",
) -> Response:
    """List operations, newest first; ``filter=done = true`` narrows."""
    page = await service.list_operations(
        parent.project, parent.location, page_size, page_token, filter_text
    )
    return ContractResponse(page)


@route(router, "GET", "/operations/{operation_id}", Permission.OPERATIONS_GET, response=Operation)
async def get_operation(
    operation_id: OperationIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Get one operation."""
    return ContractResponse(await service.get(parent.project, parent.location, operation_id))


@route(
    router,
    "POST",
    "/operations/{operation_id}:wait",
    Permission.OPERATIONS_GET,
    body=WaitOperationRequest,
    response=Operation,
)
async def wait_operation(
    operation_id: OperationIdPath, request: Request, parent: ParentDep, service: ServiceDep
) -> Response:
    """Wait until the operation is done or the timeout (body ``{"timeout": "5s"}``) passes."""
    body = await read_body(request, WaitOperationRequest)
    timeout = parse_timeout(body.timeout or request.query_params.get("timeout"))
    operation = await service.wait(parent.project, parent.location, operation_id, timeout)
    return ContractResponse(operation)


@route(
    router,
    "POST",
    "/operations/{operation_id}:cancel",
    Permission.OPERATIONS_CANCEL,
    responses=EMPTY_OBJECT,
)
async def cancel_operation(
    operation_id: OperationIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Cancel a running operation (409 ``operation_already_done`` when it has finished)."""
    await service.cancel(parent.project, parent.location, operation_id)
    return Response(_EMPTY, media_type="application/json")


@route(
    router,
    "DELETE",
    "/operations/{operation_id}",
    Permission.OPERATIONS_DELETE,
    responses=EMPTY_OBJECT,
)
async def delete_operation(
    operation_id: OperationIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Forget an operation."""
    await service.delete(parent.project, parent.location, operation_id)
    return Response(_EMPTY, media_type="application/json")
