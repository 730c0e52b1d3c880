"""HTTP routes of the run resource."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from mldiag_platform.http import ContractResponse, read_body
from mldiag_run_registry.resources import ParentDep, route
from mldiag_run_registry.runs.service import RunService
from mldiag_schemas.runs import CreateRunRequest

router = APIRouter()


def _service(request: Request) -> RunService:
    service: RunService = request.app.state.runs
    return service


ServiceDep = Annotated[RunService, Depends(_service)]


@route(router, "POST", "/machineLearningRuns", status_code=201)
async def create_run(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """Create a run."""
    body = await read_body(request, CreateRunRequest)
    run = await service.create_run(parent.project, parent.location, body)
    return ContractResponse(run, status_code=201)


@route(router, "GET", "/machineLearningRuns")
async def list_runs(
    parent: ParentDep,
    service: ServiceDep,
    page_size: Annotated[int | None, Query(alias="pageSize")] = None,
    page_token: Annotated[str, Query(alias="pageToken")] = "",
) -> Response:
    """List runs, newest first."""
    page = await service.list_runs(parent.project, parent.location, page_size, page_token)
    return ContractResponse(page)


@route(router, "GET", "/machineLearningRuns/{run_id}")
async def get_run(run_id: str, parent: ParentDep, service: ServiceDep) -> Response:
    """Get one run."""
    return ContractResponse(await service.get_run(parent.project, parent.location, run_id))
