"""Profiler sessions and targets of runs (no SQL, no bus client here).

Sessions are merged from per-host reports (:mod:`.merge`): an SDK's ``:report`` call and the
xprof-provisioner's ``ProfilerSessionReported`` go through the same merge, and every merge
that changed the session announces it (``ProfilerSessionChanged``) through the outbox. The
session is served with its link into managed XProf; targets are the profiler servers a run's
processes register. Captures, which create sessions, are :mod:`.captures`.
"""

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from mldiag_platform.errors import InvalidArgument, InvalidPageToken
from mldiag_platform.listing.filtering import FieldSpec, Kind, field_table, parse_filter
from mldiag_platform.listing.paging import (
    INT32_MAX,
    decode_token,
    encode_token,
    page_size,
    token_text,
    token_time,
)
from mldiag_platform.outbox import Flusher
from mldiag_run_registry.lookup import RunFinder, RunLookup
from mldiag_run_registry.profiles.errors import SessionNotFound, TimestampInFuture
from mldiag_run_registry.profiles.merge import SessionState, merge_report
from mldiag_run_registry.profiles.repository import ProfilesRepository, SessionWrite
from mldiag_schemas.profiling import (
    ListProfilerSessionsResponse,
    ListProfilerTargetsResponse,
    ProfilerSession,
    ProfilerSessionChanged,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerSessionReport,
    ProfilerSessionReported,
    ProfilerTarget,
    RegisterProfilerTargetRequest,
    session_name,
)
from mldiag_schemas.runs import Run
from mldiag_schemas.telemetry import MAX_FUTURE_SKEW

log = structlog.get_logger(__name__)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000


def _one_of(
    values: type[ProfilerSessionKind] | type[ProfilerSessionPhase],
) -> Callable[[str], str | None]:
    allowed = {member.value for member in values}

    def normalise(raw: str) -> str | None:
        return raw.upper() if raw.upper() in allowed else None

    return normalise


FIELDS = field_table(
    (
        FieldSpec("kind", Kind.ENUM, normalise=_one_of(ProfilerSessionKind)),
        FieldSpec("phase", Kind.ENUM, normalise=_one_of(ProfilerSessionPhase)),
        FieldSpec("autoCaptured", Kind.BOOL, aliases=("auto_captured",)),
        FieldSpec("createTime", Kind.TIMESTAMP, aliases=("create_time",)),
    )
)
"""What a sessions filter may name: ``kind``, ``phase`` (=, !=), ``autoCaptured`` and
``createTime`` (quoted RFC 3339, with < <= > >=)."""


def session_folder(root: str, run_id: str, session_id: str) -> str:
    """``<artifacts root>/<run>/plugins/profile/<session>``."""
    return f"{root.rstrip('/')}/{run_id}/plugins/profile/{session_id}"


class ProfilesService:
    """Profiler sessions (merged reports) and targets; :mod:`.captures` makes sessions."""

    def __init__(
        self,
        repository: ProfilesRepository,
        runs: RunLookup,
        finder: RunFinder,
        outbox: Flusher,
        *,
        storage_root: str,
        xprof_url: str,
    ) -> None:
        self._repository = repository
        self._runs = runs
        self._finder = finder
        self._outbox = outbox
        self._storage_root = storage_root.rstrip("/")
        self._xprof_url = xprof_url.rstrip("/")

    def served(self, state: SessionState) -> ProfilerSession:
        """The session as the API serves it: with its link into managed XProf."""
        session = state.session
        uri = f"{self._xprof_url}/xprof/open?run={session.run_id}&session={session.session_id}"
        return session.model_copy(update={"dashboard_uri": uri})

    def changed(self, state: SessionState) -> ProfilerSessionChanged:
        """The announcement of the session as it now is."""
        return ProfilerSessionChanged(session=self.served(state))

    async def live_run(self, run_id: str) -> tuple[str, str, Run] | None:
        """(project, location, run) of a run not deleted; None when there is no such run."""
        found = await self._finder.find_run(run_id)
        if found is None or found[2].delete_time is not None:
            return None
        return found

    # --- reports --------------------------------------------------------------------------

    async def report(
        self, project: str, location: str, run_id: str, report: ProfilerSessionReport
    ) -> ProfilerSession:
        """Merge one host's report (``:report``); the session after it."""
        received_at = datetime.now(UTC)
        sent = report.update_time
        if sent is not None and sent.astimezone(UTC) > received_at + MAX_FUTURE_SKEW:
            raise TimestampInFuture(
                f"updateTime {sent.isoformat()} is more than {MAX_FUTURE_SKEW} after receipt:"
                " check the client's clock",
                details=[{"field": "updateTime"}],
            )
        run = await self._runs.get_run(project, location, run_id)
        state = await self._merge(project, location, run, report, received_at)
        return self.served(state)

    async def on_session_reported(self, message: ProfilerSessionReported) -> None:
        """Merge the provisioner's report; a report about an unknown or deleted run is
        dropped (its captures were ours, so the run was deleted since)."""
        found = await self.live_run(message.run_id)
        if found is None:
            log.warning(
                "profiles.report.unknown_run",
                run_id=message.run_id,
                session_id=message.report.session_id,
                event_id=str(message.event_id),
            )
            return
        project, location, run = found
        # The message's time stands for a report without one: a redelivery then merges
        # to the same session instead of looking newer.
        await self._merge(project, location, run, message.report, message.occurred_at)

    async def _merge(
        self,
        project: str,
        location: str,
        run: Run,
        report: ProfilerSessionReport,
        received_at: datetime,
    ) -> SessionState:
        folder = session_folder(
            run.artifacts.gcs_path or self._storage_root, run.run_id, report.session_id
        )

        def change(current: SessionState | None) -> SessionWrite | None:
            merged = merge_report(
                current,
                report,
                project=project,
                location=location,
                run_id=run.run_id,
                received_at=received_at,
                default_folder=folder,
            )
            if merged == current:
                return None  # a repeat, or older than what is stored
            return SessionWrite(merged, announce=[self.changed(merged)])

        result = await self._repository.change_session(run.run_id, report.session_id, change)
        if result.written:
            await self._outbox.flush()
        state = result.state
        assert state is not None  # noqa: S101  # a merge always leaves a session
        log.info(
            "profiles.session.merged",
            run_id=run.run_id,
            session_id=report.session_id,
            host=report.host,
            host_phase=report.phase.value,
            phase=state.session.phase.value,
            changed=result.written,
        )
        return state

    # --- reads ----------------------------------------------------------------------------

    async def list_sessions(
        self,
        project: str,
        location: str,
        run_id: str,
        *,
        filter_text: str = "",
        requested_size: int | None = None,
        page_token: str = "",
    ) -> ListProfilerSessionsResponse:
        """A page of a run's sessions, newest first, matching ``filter_text``."""
        await self._runs.get_run(project, location, run_id)
        size = page_size(requested_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        where = parse_filter(filter_text, FIELDS)
        query = hashlib.sha256(f"{run_id}\0{filter_text}".encode()).hexdigest()[:16]
        after = _position(page_token, query) if page_token else None
        states = await self._repository.list_sessions(run_id, where, size + 1, after)
        token = ""
        if len(states) > size:
            states = states[:size]
            last = states[-1].session
            token = encode_token({"k": [last.create_time.isoformat(), last.session_id], "q": query})
        return ListProfilerSessionsResponse(
            profiler_sessions=[self.served(state) for state in states], next_page_token=token
        )

    async def get_session(
        self, project: str, location: str, run_id: str, session_id: str
    ) -> ProfilerSession:
        """One session of a run, or :class:`SessionNotFound`."""
        await self._runs.get_run(project, location, run_id)
        state = await self._repository.get_session(run_id, session_id)
        if state is None:
            name = session_name(project, location, run_id, session_id)
            raise SessionNotFound(f"profiler session {name!r} not found")
        return self.served(state)

    # --- targets --------------------------------------------------------------------------

    async def register_target(
        self, project: str, location: str, run_id: str, request: RegisterProfilerTargetRequest
    ) -> ProfilerTarget:
        """Register (or re-register, after a restart) a process's profiler server."""
        for field, value in (("processIndex", request.process_index), ("pid", request.pid)):
            if value > INT32_MAX:  # both are `integer` columns
                raise InvalidArgument(
                    f"{field} must be at most {INT32_MAX}, got {value}",
                    details=[{"field": field, "problem": "out of range"}],
                )
        await self._runs.get_run(project, location, run_id)
        target = await self._repository.upsert_target(
            project,
            location,
            run_id,
            request.host,
            request.process_index,
            request.address,
            request.pid,
            datetime.now(UTC),
        )
        log.info(
            "profiles.target.registered",
            run_id=run_id,
            target_id=target.target_id,
            address=target.address,
        )
        return target

    async def list_targets(
        self, project: str, location: str, run_id: str
    ) -> ListProfilerTargetsResponse:
        """The run's targets by host, then process index."""
        await self._runs.get_run(project, location, run_id)
        targets = await self._repository.list_targets(project, location, run_id)
        return ListProfilerTargetsResponse(profiler_targets=targets)


def _position(token: str, query: str) -> tuple[datetime, str]:
    fields = decode_token(token)
    values = fields.get("k")
    if fields.get("q") != query or not isinstance(values, list) or len(values) != 2:
        raise InvalidPageToken("the page token is not valid for this run and filter")
    return token_time(values[0]), token_text(values[1])
