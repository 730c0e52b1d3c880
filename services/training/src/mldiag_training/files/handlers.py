"""HTTP routes of the files room: replicas' logs and package uploads (mldiag extensions of
the Vertex API, under the same parents).

``GET …/customJobs/{id}/logs`` answers ``text/plain``: the bytes of one replica attempt's
stdout, stderr or both (stdout first, then stderr), as stored now. With ``follow=true`` the
answer is a chunked ``text/plain`` stream that goes on sending new bytes as they land and
ends when the attempt ends (without ``attempt``, when the job ends: later attempts follow,
each announced by a ``==> workerpool0-0 attempt 1 <==`` line); for an ended job it ends at
once. Headers say what was read: ``Mldiag-Log-Replica``, ``Mldiag-Log-Attempt``,
``Mldiag-Log-Ended`` (``true``: nothing more will be written) and, for one stream,
``Mldiag-Log-Next-Offset`` (pass as ``offset`` to read on).

``POST /upload/v1/…/packages?name=trainer-0.1.tar.gz`` takes the package's bytes as the
body and stores them by content; answers :class:`UploadedPackage`.
"""

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse

from mldiag_platform.auth import requires
from mldiag_platform.http import ContractResponse, stopping_event
from mldiag_platform.resources import PARENT_PREFIXES, ParentDep
from mldiag_schemas.auth import Permission
from mldiag_schemas.files import ListJobLogsResponse, UploadedPackage
from mldiag_training.files.errors import InvalidLogRange
from mldiag_training.files.service import LogRead, LogsService, PackagesService, parse_streams
from mldiag_training.resources import JobIdPath, checked_id, route

router = APIRouter()

UPLOAD_PREFIX = "/upload"
"""Uploads live under Google's media-upload prefix, so the app (and an edge) can give them
their own body limit (see the app's ``body_limits``)."""

_TEXT = "text/plain; charset=utf-8"
_STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _logs(request: Request) -> LogsService:
    logs: LogsService = request.app.state.logs
    return logs


def _packages(request: Request) -> PackagesService:
    packages: PackagesService = request.app.state.packages
    return packages


LogsDep = Annotated[LogsService, Depends(_logs)]
PackagesDep = Annotated[PackagesService, Depends(_packages)]


def _offset(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidLogRange(
            f"offset {value[:40]!r} is not an integer",
            details=[{"field": "offset", "problem": "a byte offset; negative: from the end"}],
        ) from None


def _headers(plan: LogRead, *, follow: bool) -> dict[str, str]:
    target = plan.target
    headers = {
        "Mldiag-Log-Replica": target.replica,
        "Mldiag-Log-Attempt": str(target.attempt),
        "Mldiag-Log-Ended": "true" if target.ended else "false",
        **_STREAM_HEADERS,
    }
    if len(plan.ranges) == 1 and not follow:
        headers["Mldiag-Log-Next-Offset"] = str(plan.next_offset)
    return headers


def _banner(replica: str, attempt: int) -> bytes:
    return f"==> {replica} attempt {attempt} <==\n".encode()


@route(
    router,
    "GET",
    "/customJobs/{job_id}/logs",
    Permission.CUSTOM_JOBS_GET,
    responses={
        200: {
            "description": "The output as text.",
            "content": {_TEXT: {"schema": {"type": "string"}}},
        }
    },
)
async def read_logs(
    job_id: JobIdPath,
    request: Request,
    parent: ParentDep,
    logs: LogsDep,
    replica: Annotated[str | None, Query(description="workerpool{p}-{i} [workerpool0-0]")] = None,
    attempt: Annotated[int | None, Query(ge=0, description="The attempt [the latest].")] = None,
    stream: Annotated[str, Query(description="stdout, stderr or both [both].")] = "both",
    offset: Annotated[
        str | None, Query(description="Start here (one stream); negative: the last bytes.")
    ] = None,
    follow: Annotated[bool, Query(description="Keep sending new bytes until the end.")] = False,
) -> Response:
    """A replica attempt's output as text; with ``follow=true``, streamed as it lands."""
    target = await logs.target(parent.project, parent.location, job_id, replica, attempt)
    plan = await logs.plan_read(target, parse_streams(stream), _offset(offset))
    headers = _headers(plan, follow=follow)
    if not follow:
        return StreamingResponse(logs.read(plan), media_type=_TEXT, headers=headers)
    server_stopping = stopping_event(request.app)

    async def stopping() -> bool:
        return server_stopping.is_set() or await request.is_disconnected()

    body: AsyncIterator[bytes] = logs.follow(plan, stopping, _banner)
    return StreamingResponse(body, media_type=_TEXT, headers=headers)


@route(
    router,
    "GET",
    "/customJobs/{job_id}/logs:list",
    Permission.CUSTOM_JOBS_GET,
    response=ListJobLogsResponse,
)
async def list_logs(job_id: JobIdPath, parent: ParentDep, logs: LogsDep) -> Response:
    """Every stored log of the job: replica, attempt, stream, size and URI."""
    return ContractResponse(await logs.list_logs(parent.project, parent.location, job_id))


_OCTETS = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string"}}},
    }
}


async def upload_package(
    request: Request,
    parent: ParentDep,
    packages: PackagesDep,
    name: Annotated[str, Query(description="The file name, e.g. trainer-0.1.tar.gz.")],
) -> Response:
    """Store a Python package (the raw body) by content; answers where it is."""
    # Packages are stored by content for every parent; the parent is only checked.
    checked_id(parent.project, "project")
    checked_id(parent.location, "location")
    packages.check_name(name)  # before reading a byte
    answer = await packages.upload(name, request.stream())
    return ContractResponse(answer)


for _prefix in PARENT_PREFIXES:
    router.add_api_route(
        UPLOAD_PREFIX + _prefix + "/packages",
        upload_package,
        methods=["POST"],
        dependencies=[requires(Permission.CUSTOM_JOBS_CREATE)],
        responses={200: {"model": UploadedPackage}},
        openapi_extra=_OCTETS,
    )
