"""HTTP route of a run's goodput."""

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from mldiag_platform.http import ContractResponse
from mldiag_platform.resources import ParentDep, route
from mldiag_run_registry.goodput.service import GoodputService
from mldiag_run_registry.resources import RunIdPath
from mldiag_schemas.auth import Permission
from mldiag_schemas.goodput import GoodputResponse

router = APIRouter()
"""Included before the runs' router: ``{run_id}`` alone would also match ``x:goodput``."""


def _service(request: Request) -> GoodputService:
    service: GoodputService = request.app.state.goodput
    return service


ServiceDep = Annotated[GoodputService, Depends(_service)]


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}:goodput",
    Permission.RUNS_GET,
    response=GoodputResponse,
)
async def goodput(run_id: RunIdPath, parent: ParentDep, service: ServiceDep) -> Response:
    """The run's productive time against its wall time, and the buckets of lost time."""
    return ContractResponse(await service.goodput(parent.project, parent.location, run_id))
