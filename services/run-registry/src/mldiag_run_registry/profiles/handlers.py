"""HTTP routes of a run's profiler sessions and targets (``:report``, lists: the
:class:`ProfilesService`) and of ``:capture`` (the :class:`CapturesService`), and the consumers
of capture requests, session reports and finished captures."""

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.http import ContractResponse, read_body
from mldiag_platform.resources import ParentDep, checked_id, id_path, route
from mldiag_run_registry.profiles.captures import CapturesService
from mldiag_run_registry.profiles.service import ProfilesService
from mldiag_run_registry.resources import RunIdPath
from mldiag_schemas import bus
from mldiag_schemas.auth import Permission
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.operations import Operation
from mldiag_schemas.profiling import (
    SESSION_ID_PATTERN,
    CaptureProfileRequest,
    ListProfilerSessionsResponse,
    ListProfilerTargetsResponse,
    ProfileCaptureFinished,
    ProfileCaptureRequested,
    ProfilerSession,
    ProfilerSessionReport,
    ProfilerSessionReported,
    ProfilerTarget,
    RegisterProfilerTargetRequest,
)

router = APIRouter()

SESSIONS = "/machineLearningRuns/{run_id}/profilerSessions"
TARGETS = "/machineLearningRuns/{run_id}/profilerTargets"


def _service(request: Request) -> ProfilesService:
    service: ProfilesService = request.app.state.profiles
    return service


def _captures(request: Request) -> CapturesService:
    captures: CapturesService = request.app.state.captures
    return captures


ServiceDep = Annotated[ProfilesService, Depends(_service)]
CapturesDep = Annotated[CapturesService, Depends(_captures)]
FilterQuery = Annotated[str, Query(alias="filter")]
PageSizeQuery = Annotated[int | None, Query(alias="pageSize")]
PageTokenQuery = Annotated[str, Query(alias="pageToken")]

_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def _session_id(
    session_id: Annotated[str, id_path("The session id.", SESSION_ID_PATTERN)],
) -> str:
    rule = "letters, digits, '.', '_' and '-', 1 to 128, starting alphanumeric"
    return checked_id(session_id, "session_id", _SESSION_ID, rule=rule)


SessionIdPath = Annotated[str, Depends(_session_id)]


@route(
    router,
    "POST",
    SESSIONS + ":report",
    Permission.PROFILER_SESSIONS_CREATE,
    body=ProfilerSessionReport,
    response=ProfilerSession,
)
async def report_session(
    run_id: RunIdPath, request: Request, parent: ParentDep, service: ServiceDep
) -> Response:
    """Merge one host's part of a session; answers the session after the merge."""
    body = await read_body(request, ProfilerSessionReport)
    session = await service.report(parent.project, parent.location, run_id, body)
    return ContractResponse(session)


@route(
    router,
    "POST",
    SESSIONS + ":capture",
    Permission.PROFILER_SESSIONS_CREATE,
    body=CaptureProfileRequest,
    response=Operation,
)
async def capture(
    run_id: RunIdPath, request: Request, parent: ParentDep, captures: CapturesDep
) -> Response:
    """Capture the run's targets; answers the pending capture operation (its target is the
    session), done once the xprof-provisioner has captured."""
    body = await read_body(request, CaptureProfileRequest)
    operation = await captures.capture(parent.project, parent.location, run_id, body)
    return ContractResponse(operation)


@route(
    router,
    "GET",
    SESSIONS,
    Permission.PROFILER_SESSIONS_LIST,
    response=ListProfilerSessionsResponse,
)
async def list_sessions(
    run_id: RunIdPath,
    parent: ParentDep,
    service: ServiceDep,
    filter_text: FilterQuery = "",
    page_size: PageSizeQuery = None,
    page_token: PageTokenQuery = "",
) -> Response:
    """The run's sessions, newest first (``filter``: kind, phase, autoCaptured, createTime)."""
    page = await service.list_sessions(
        parent.project,
        parent.location,
        run_id,
        filter_text=filter_text,
        requested_size=page_size,
        page_token=page_token,
    )
    return ContractResponse(page)


@route(
    router,
    "GET",
    SESSIONS + "/{session_id}",
    Permission.PROFILER_SESSIONS_GET,
    response=ProfilerSession,
)
async def get_session(
    run_id: RunIdPath, session_id: SessionIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """One session (404 ``session_not_found``)."""
    session = await service.get_session(parent.project, parent.location, run_id, session_id)
    return ContractResponse(session)


@route(
    router,
    "POST",
    TARGETS,
    Permission.PROFILER_TARGETS_CREATE,
    body=RegisterProfilerTargetRequest,
    response=ProfilerTarget,
)
async def register_target(
    run_id: RunIdPath, request: Request, parent: ParentDep, service: ServiceDep
) -> Response:
    """Register a process's profiler server (again after a restart: same host and index)."""
    body = await read_body(request, RegisterProfilerTargetRequest)
    target = await service.register_target(parent.project, parent.location, run_id, body)
    return ContractResponse(target)


@route(
    router, "GET", TARGETS, Permission.PROFILER_TARGETS_LIST, response=ListProfilerTargetsResponse
)
async def list_targets(run_id: RunIdPath, parent: ParentDep, service: ServiceDep) -> Response:
    """The run's profiler targets."""
    targets = await service.list_targets(parent.project, parent.location, run_id)
    return ContractResponse(targets)


CAPTURE_REQUESTS_CONSUMER = ConsumerSpec(
    stream=bus.PROFILING,
    subject=bus.PROFILE_CAPTURE_REQUESTED + ".*",
    durable=bus.REGISTRY_CAPTURE_REQUESTS_DURABLE,
    message_type=ProfileCaptureRequested,
    batch_size=20,
)
"""The analyzer's requests for a profile of a run."""

SESSIONS_CONSUMER = ConsumerSpec(
    stream=bus.PROFILING,
    # The whole stream, in order, on one durable: a capture's host reports then come before
    # its finish, so the operation's response holds every host's part. Other profiling
    # messages (commands, our own announcements, instances) are skipped by the handler.
    subject=bus.PROFILING.subjects[0],
    durable=bus.REGISTRY_SESSIONS_DURABLE,
    message_type=Envelope,
    batch_size=50,
)
"""The provisioner's session reports and finished captures."""


class ProfilesBusHandler:
    """Applies each message on its own, in order (each is its own transaction)."""

    def __init__(self, service: ProfilesService, captures: CapturesService) -> None:
        self._service = service
        self._captures = captures

    async def on_capture_requests(
        self, deliveries: list[Delivery[ProfileCaptureRequested]]
    ) -> None:
        """Start the captures asked for (a redelivered request starts nothing)."""
        for delivery in deliveries:
            await self._captures.on_capture_requested(delivery.message)

    async def on_sessions(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Merge session reports and finish captures; other message types are ignored."""
        for delivery in deliveries:
            message = delivery.message
            if isinstance(message, ProfilerSessionReported):
                await self._service.on_session_reported(message)
            elif isinstance(message, ProfileCaptureFinished):
                await self._captures.on_capture_finished(message)
