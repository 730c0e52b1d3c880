"""HTTP routes of a project's retention policy and of the purge of a deleted run."""

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from mldiag_platform.http import ContractResponse, parse_body, query_param
from mldiag_platform.resources import ParentDep, route
from mldiag_run_registry.resources import RunIdPath
from mldiag_run_registry.retention.errors import InvalidRetentionPolicy
from mldiag_run_registry.retention.service import RetentionService, RunPurger
from mldiag_schemas.auth import Permission
from mldiag_schemas.retention import PurgedRun, RetentionPolicy, UpdateRetentionPolicyRequest

router = APIRouter()


def _service(request: Request) -> RetentionService:
    service: RetentionService = request.app.state.retention
    return service


def _purger(request: Request) -> RunPurger:
    purger: RunPurger = request.app.state.purger
    return purger


ServiceDep = Annotated[RetentionService, Depends(_service)]
PurgerDep = Annotated[RunPurger, Depends(_purger)]


@route(router, "GET", "/retentionPolicy", Permission.RETENTION_GET, response=RetentionPolicy)
async def get_policy(parent: ParentDep, service: ServiceDep) -> Response:
    """The project's retention policy (its defaults if it never set one)."""
    return ContractResponse(await service.get_policy(parent.project, parent.location))


@route(
    router,
    "PATCH",
    "/retentionPolicy",
    Permission.RETENTION_UPDATE,
    body=UpdateRetentionPolicyRequest,
    response=RetentionPolicy,
)
async def update_policy(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """Change the project's policy (admins): the fields ``updateMask`` names, else those
    sent."""
    body = parse_body(UpdateRetentionPolicyRequest, await request.body(), InvalidRetentionPolicy)
    mask = query_param(request, "updateMask", "update_mask")
    policy = await service.update_policy(parent.project, parent.location, body, mask)
    return ContractResponse(policy)


@route(
    router,
    "POST",
    "/machineLearningRuns/{run_id}:purge",
    Permission.RUNS_PURGE,
    response=PurgedRun,
)
async def purge_run(run_id: RunIdPath, parent: ParentDep, purger: PurgerDep) -> Response:
    """Purge a deleted run now (admins): everything recorded against it, then the run; what
    was removed. A live run is refused (``run_not_deleted``); a purged one is not found."""
    return ContractResponse(await purger.purge_deleted(parent.project, parent.location, run_id))
