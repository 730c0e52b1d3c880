"""What a share link opens: parsing the shared resource, and holding every call to it.

Each kind of link admits an explicit list of routes (by their path template), so a route
added later is closed to share links until someone opens it here on purpose.
"""

import re
import uuid
from dataclasses import dataclass

from fastapi import Request

from mldiag_platform.resources import PARENT_PREFIXES
from mldiag_run_registry.shares.errors import InvalidShareResource, OutsideShareScope
from mldiag_schemas.auth import Permission
from mldiag_schemas.ids import (
    DEFAULT_LOCATION,
    DEFAULT_PROJECT,
    RESOURCE_ID_PATTERN,
    RUN_ID_PATTERN,
)
from mldiag_schemas.profiling import SESSION_ID_PATTERN
from mldiag_schemas.sharing import ShareScopeKind

SHARED_PERMISSIONS = frozenset(
    {Permission.RUNS_GET, Permission.PROFILER_SESSIONS_GET, Permission.PROFILER_SESSIONS_LIST}
)
"""All a share link can ever do: read. Which routes it reads is up to its kind."""

_NAME = re.compile(
    r"^(?:projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/)?"
    r"machineLearningRuns/(?P<run>[^/]+)"
    r"(?:/monitoredEvents/(?P<event>[^/]+)|/profilerSessions/(?P<session>[^/]+))?$"
)
_RUN_ID = re.compile(RUN_ID_PATTERN)
_RESOURCE_ID = re.compile(RESOURCE_ID_PATTERN)
_SESSION_ID = re.compile(SESSION_ID_PATTERN)

_RUN = "/machineLearningRuns/{run_id}"
_EVENT = "/machineLearningRuns/{run_id}/monitoredEvents/{event_id}"
_ANALYSES = "/machineLearningRuns/{run_id}/analyses"
_SESSION = "/machineLearningRuns/{run_id}/profilerSessions/{session_id}"
_CLOSED_TO_RUN_LINKS = ("/machineLearningRuns/{run_id}/profilerTargets",)
"""Under a run but not about its results: where its workers listen."""


@dataclass(frozen=True)
class SharedResource:
    """One run, event or profiler session, by its parts."""

    project: str
    location: str
    kind: ShareScopeKind
    run_id: str
    event_id: uuid.UUID | None = None
    session_id: str | None = None

    @property
    def name(self) -> str:
        """The full resource name."""
        name = (
            f"projects/{self.project}/locations/{self.location}/machineLearningRuns/{self.run_id}"
        )
        if self.event_id is not None:
            return f"{name}/monitoredEvents/{self.event_id}"
        if self.session_id is not None:
            return f"{name}/profilerSessions/{self.session_id}"
        return name


def parse_resource(text: str, project: str, location: str) -> SharedResource:
    """The resource ``text`` names, full or relative to ``project``/``location``."""
    match = _NAME.match(text.strip().strip("/"))
    if match is None:
        raise InvalidShareResource(
            f"cannot share {text!r}: name a run (machineLearningRuns/RUN), an event"
            " (machineLearningRuns/RUN/monitoredEvents/EVENT) or a profiler session"
            " (machineLearningRuns/RUN/profilerSessions/SESSION)"
        )
    if match["project"] is not None:
        project, location = match["project"], match["location"]
        for part, value in (("project", project), ("location", location)):
            if not _RESOURCE_ID.fullmatch(value):
                raise InvalidShareResource(f"{value!r} is not a {part} id")
    run_id, event, session = match["run"], match["event"], match["session"]
    # fullmatch: the patterns end in `$`, which `match` lets pass before a final newline
    if not _RUN_ID.fullmatch(run_id):
        raise InvalidShareResource(f"{run_id!r} is not a run id")
    if event is not None:
        try:
            event_id = uuid.UUID(event)
        except ValueError:
            raise InvalidShareResource(f"{event!r} is not an event id (a UUID)") from None
        return SharedResource(project, location, ShareScopeKind.EVENT, run_id, event_id=event_id)
    if session is not None:
        if not _SESSION_ID.fullmatch(session):
            raise InvalidShareResource(f"{session!r} is not a profiler session id")
        return SharedResource(
            project, location, ShareScopeKind.PROFILER_SESSION, run_id, session_id=session
        )
    return SharedResource(project, location, ShareScopeKind.RUN, run_id)


def _template(request: Request) -> str:
    route = request.scope.get("route")
    path: str = getattr(route, "path", "")
    for prefix in PARENT_PREFIXES:
        if path.startswith(prefix + "/"):
            return path[len(prefix) :]
    return path


@dataclass(frozen=True)
class ShareScope:
    """Holds a share link's caller to its resource."""

    resource: SharedResource
    permissions: frozenset[Permission] = SHARED_PERMISSIONS

    def admit(self, permission: Permission, request: Request) -> None:
        """Raise ``outside_share_scope`` unless the call reads the shared resource."""
        if not self._admits(request):
            raise OutsideShareScope(
                f"this share link opens {self.resource.name} only ({permission.value} on"
                f" {request.url.path} is outside it)",
                details=[{"resource": self.resource.name, "path": request.url.path}],
            )

    def _admits(self, request: Request) -> bool:
        shared = self.resource
        params = request.path_params
        if (
            params.get("project", DEFAULT_PROJECT) != shared.project
            or params.get("location", DEFAULT_LOCATION) != shared.location
            or params.get("run_id") != shared.run_id
        ):
            return False
        template = _template(request)
        if template == _RUN:
            return True  # the header of every shared page
        match shared.kind:
            case ShareScopeKind.RUN:
                return template.startswith(_RUN) and template not in _CLOSED_TO_RUN_LINKS
            case ShareScopeKind.EVENT:
                event = str(shared.event_id)
                return (template == _EVENT and params.get("event_id") == event) or (
                    template == _ANALYSES and request.query_params.get("event") == event
                )
            case ShareScopeKind.PROFILER_SESSION:
                return template == _SESSION and params.get("session_id") == shared.session_id
