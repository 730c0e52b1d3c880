"""HTTP routes of custom jobs (Vertex v1) and their replicas (an mldiag extension).

Query parameters are accepted in camelCase (``pageSize``) and snake_case (``page_size``);
``$alt`` is ignored and ``enum-encoding=int`` answers enums as numbers (see ``vertex``).
"""

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from mldiag_platform.http import EMPTY_OBJECT
from mldiag_platform.resources import ParentDep
from mldiag_schemas.auth import Permission
from mldiag_schemas.jobs import (
    CustomJob,
    JobOperation,
    ListCustomJobsResponse,
    ListReplicasResponse,
)
from mldiag_training.jobs.service import JobsService
from mldiag_training.jobs.validation import parse_custom_job
from mldiag_training.resources import JobIdPath, app_service, list_query, route
from mldiag_training.vertex import VertexResponse

router = APIRouter()


ServiceDep = Annotated[JobsService, Depends(app_service("jobs", JobsService))]


@route(
    router,
    "POST",
    "/customJobs",
    Permission.CUSTOM_JOBS_CREATE,
    body=CustomJob,
    response=CustomJob,
)
async def create_custom_job(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """Create a custom job (QUEUED); answers the job. Output-only fields sent are ignored."""
    body = parse_custom_job(await request.body())
    job = await service.create(parent.project, parent.location, body)
    return VertexResponse(job, request)


@route(router, "GET", "/customJobs", Permission.CUSTOM_JOBS_LIST, response=ListCustomJobsResponse)
async def list_custom_jobs(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """List jobs (newest first unless ``orderBy``), filtered by ``filter`` (AIP-160:
    ``state=JOB_STATE_RUNNING``, ``display_name="x"``, ``labels.k=v``, ``create_time>"…"``,
    joined with AND, OR, NOT)."""
    page = await service.list_jobs(
        parent.project,
        parent.location,
        *list_query(request),
    )
    return VertexResponse(page, request)


@route(router, "GET", "/customJobs/{job_id}", Permission.CUSTOM_JOBS_GET, response=CustomJob)
async def get_custom_job(
    request: Request, job_id: JobIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Get one job."""
    job = await service.get(parent.project, parent.location, job_id)
    return VertexResponse(job, request)


@route(
    router,
    "POST",
    "/customJobs/{job_id}:cancel",
    Permission.CUSTOM_JOBS_CANCEL,
    responses=EMPTY_OBJECT,
)
async def cancel_custom_job(job_id: JobIdPath, parent: ParentDep, service: ServiceDep) -> Response:
    """Cancel a job (it goes CANCELLING, then CANCELLED once its replicas have stopped);
    answers ``{}``. An ended job is FAILED_PRECONDITION."""
    await service.cancel(parent.project, parent.location, job_id)
    return Response(b"{}", media_type="application/json")


@route(
    router, "DELETE", "/customJobs/{job_id}", Permission.CUSTOM_JOBS_DELETE, response=JobOperation
)
async def delete_custom_job(
    request: Request, job_id: JobIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Delete an ended job (FAILED_PRECONDITION otherwise); answers the done operation."""
    name = await service.delete(parent.project, parent.location, job_id)
    return VertexResponse(JobOperation(name=name), request)


@route(
    router,
    "GET",
    "/customJobs/{job_id}/replicas",
    Permission.CUSTOM_JOBS_GET,
    response=ListReplicasResponse,
)
async def list_replicas(
    request: Request, job_id: JobIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Every replica's current attempt (mldiag extension: Vertex does not show replicas)."""
    replicas = await service.replicas(parent.project, parent.location, job_id)
    return VertexResponse(replicas, request)
