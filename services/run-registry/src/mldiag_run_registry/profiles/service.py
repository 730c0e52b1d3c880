"""Profiler sessions, targets and captures of runs (no SQL, no bus client here).

Sessions are merged from per-host reports (:mod:`.merge`): an SDK's ``:report`` call and the
xprof-provisioner's ``ProfilerSessionReported`` go through the same merge, and every merge
that changed the session announces it (``ProfilerSessionChanged``) through the outbox.

A capture (``:capture``, or the analyzer's ``ProfileCaptureRequested``) resolves the run's
registered targets, then in one transaction stores a pending ``capture`` operation, creates
the session (its hosts ACTIVE) and stages the ``CaptureProfile`` command for the
xprof-provisioner, whose ``ProfileCaptureFinished`` later finishes the operation. Bus
requests derive every id (session, operation, command) from the message's event id, so a
redelivery finds what the first delivery wrote and does nothing.
"""

import dataclasses
import hashlib
import secrets
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import structlog

from mldiag_platform.errors import MldiagError
from mldiag_platform.outbox import Flusher
from mldiag_run_registry.errors import InvalidPageToken
from mldiag_run_registry.filtering import FieldSpec, Kind, field_table, parse_filter
from mldiag_run_registry.lookup import RunFinder, RunLookup
from mldiag_run_registry.operations.repository import operation_name, split_operation_name
from mldiag_run_registry.operations.service import new_operation_id
from mldiag_run_registry.paging import decode_token, encode_token, page_size
from mldiag_run_registry.profiles.errors import (
    NoProfilerTargets,
    ProgrammaticTraceActive,
    SessionExists,
    SessionNotFound,
    TimestampInFuture,
    UnknownTarget,
)
from mldiag_run_registry.profiles.merge import (
    SessionState,
    fail_hosts,
    merge_report,
    new_state,
    settle,
)
from mldiag_run_registry.profiles.repository import (
    OperationOutcome,
    ProfilesRepository,
    SessionWrite,
)
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import derived_id, run_name
from mldiag_schemas.operations import Operation, OperationError, OperationMetadata, OperationVerb
from mldiag_schemas.profiling import (
    CaptureProfile,
    CaptureProfileRequest,
    CaptureTarget,
    ListProfilerSessionsResponse,
    ListProfilerTargetsResponse,
    ProfileCaptureFinished,
    ProfileCaptureRequested,
    ProfilerSession,
    ProfilerSessionChanged,
    ProfilerSessionHost,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerSessionReport,
    ProfilerSessionReported,
    ProfilerTarget,
    RegisterProfilerTargetRequest,
    TracerLevels,
    session_name,
)
from mldiag_schemas.runs import Run
from mldiag_schemas.telemetry import MAX_FUTURE_SKEW

log = structlog.get_logger(__name__)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000

PROGRAMMATIC_STALE_AFTER = timedelta(minutes=15)
"""A programmatic trace silent this long is not running any more (traces last seconds; its
process died before reporting the end): it no longer blocks captures on its hosts."""

# Namespace of the ids derived from a capture request's event id.
_CAPTURE_IDS = uuid.UUID("0f4b9a5e-1c2d-4e7f-9a3b-5d6c7e8f9a01")

NO_TARGETS_HINT = (
    "start the workload with mldiag.init(profiler_port=...) or on_demand_xprof=True so that"
    " it registers its profiler server"
)


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


def default_session_id(now: datetime) -> str:
    """``ondemand-YYYYMMDD-HHMMSS-<4 hex>``: sortable, and two captures in one second differ."""
    return f"ondemand-{now.astimezone(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def select_targets(
    run: str, targets: Sequence[ProfilerTarget], wanted: Sequence[str], *, strict: bool
) -> list[ProfilerTarget]:
    """The targets ``wanted`` names (hosts or target ids; empty: all), in registration order.

    :class:`NoProfilerTargets` when the run has none; an entry that matches nothing is
    :class:`UnknownTarget` when ``strict``, else skipped (and none matching is unknown too).
    """
    if not targets:
        raise NoProfilerTargets(f"run {run!r} has no profiler targets: {NO_TARGETS_HINT}")
    if not wanted:
        return list(targets)
    wanted_set = set(wanted)
    chosen = [t for t in targets if t.host in wanted_set or t.target_id in wanted_set]
    known = {name for t in targets for name in (t.host, t.target_id)}
    unknown = [entry for entry in dict.fromkeys(wanted) if entry not in known]
    if unknown and (strict or not chosen):
        hosts = ", ".join(sorted({t.host for t in targets}))
        ids = ", ".join(t.target_id for t in targets)
        raise UnknownTarget(
            f"run {run!r} has no target {', '.join(map(repr, unknown))};"
            f" its hosts are {hosts} (target ids {ids})",
            details=[{"target": entry, "problem": "not registered"} for entry in unknown],
        )
    return chosen


@dataclasses.dataclass(frozen=True)
class _Capture:
    """A capture about to start: what the session, the operation and the command say."""

    session_id: str
    kind: ProfilerSessionKind
    targets: list[ProfilerTarget]
    duration_seconds: float
    tracer_levels: TracerLevels
    operation_id: str
    auto_captured: bool = False
    workload_event_id: uuid.UUID | None = None

    @property
    def hosts(self) -> list[str]:
        return sorted({target.host for target in self.targets})


class ProfilesService:
    """Profiler sessions (merged reports), targets and the captures that make sessions."""

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

    def _changed(self, state: SessionState) -> ProfilerSessionChanged:
        return ProfilerSessionChanged(session=self.served(state))

    async def _live_run(self, run_id: str) -> tuple[str, str, Run] | None:
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
        found = await self._live_run(message.run_id)
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
            return SessionWrite(merged, announce=[self._changed(merged)])

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

    # --- captures -------------------------------------------------------------------------

    async def capture(
        self, project: str, location: str, run_id: str, request: CaptureProfileRequest
    ) -> Operation:
        """Start an ON_DEMAND capture (``:capture``); the pending capture operation."""
        await self._runs.get_run(project, location, run_id)
        now = datetime.now(UTC)
        targets = await self._repository.list_targets(project, location, run_id)
        name = run_name(project, location, run_id)
        chosen = select_targets(name, targets, request.targets, strict=True)
        plan = _Capture(
            session_id=request.session_id or default_session_id(now),
            kind=ProfilerSessionKind.ON_DEMAND,
            targets=chosen,
            duration_seconds=request.duration_seconds,
            tracer_levels=request.tracer_levels,
            operation_id=new_operation_id(),
        )
        await self._check_not_tracing(run_id, plan.hosts, now)
        operation = await self._start(project, location, run_id, plan, now, replay=False)
        assert operation is not None  # noqa: S101  # only a replay starts nothing
        return operation

    async def on_capture_requested(self, message: ProfileCaptureRequested) -> None:
        """Start a capture the analyzer asked for (SNAPSHOT, linked to its event). A request
        that cannot be met is stored as a failed operation, so it is visible and not retried.
        """
        bound = log.bind(run_id=message.run_id, event_id=str(message.event_id))
        found = await self._live_run(message.run_id)
        if found is None:
            bound.warning("profiles.capture.unknown_run")
            return
        project, location, _run = found
        key = str(message.event_id)
        kind = ProfilerSessionKind(message.kind)
        prefix = "snapshot" if kind is ProfilerSessionKind.SNAPSHOT else "ondemand"
        plan = _Capture(
            session_id=f"{prefix}-{derived_id(_CAPTURE_IDS, 'session', key).hex[:8]}",
            kind=kind,
            targets=[],
            duration_seconds=message.duration_seconds,
            tracer_levels=TracerLevels(),
            operation_id=str(derived_id(_CAPTURE_IDS, "operation", key)),
            auto_captured=True,
            workload_event_id=message.workload_event_id,
        )
        bound = bound.bind(session_id=plan.session_id)
        if await self._repository.has_operation(project, location, plan.operation_id):
            bound.info("profiles.capture.replayed")  # a redelivery: the first one did it all
            return
        now = datetime.now(UTC)
        targets = await self._repository.list_targets(project, location, message.run_id)
        try:
            name = run_name(project, location, message.run_id)
            chosen = select_targets(name, targets, message.hosts, strict=False)
            plan = dataclasses.replace(plan, targets=chosen)
            await self._check_not_tracing(message.run_id, plan.hosts, now)
        except (NoProfilerTargets, UnknownTarget, ProgrammaticTraceActive) as refusal:
            await self._refuse(project, location, message.run_id, plan, now, refusal)
            event = (
                "profiles.capture.no_targets"
                if isinstance(refusal, NoProfilerTargets)
                else "profiles.capture.refused"
            )
            bound.info(event, code=refusal.code, reason=refusal.message)
            return
        await self._start(project, location, message.run_id, plan, now, replay=True)

    async def _check_not_tracing(self, run_id: str, hosts: Sequence[str], now: datetime) -> None:
        busy = await self._repository.active_programmatic(
            run_id, hosts, now - PROGRAMMATIC_STALE_AFTER
        )
        if busy:
            session_id, host = busy[0]
            raise ProgrammaticTraceActive(
                f"host {host!r} is tracing itself in programmatic session {session_id!r}:"
                " a second trace there would fail; capture once it ends, or other hosts",
                details=[{"host": h, "session": s} for s, h in busy],
            )

    def _operation(
        self,
        project: str,
        location: str,
        run_id: str,
        plan: _Capture,
        now: datetime,
        error: OperationError | None = None,
    ) -> Operation:
        return Operation(
            name=operation_name(project, location, plan.operation_id),
            done=error is not None,
            metadata=OperationMetadata(
                verb=OperationVerb.CAPTURE,
                target=session_name(project, location, run_id, plan.session_id),
                create_time=now,
                end_time=now if error is not None else None,
            ),
            error=error,
        )

    async def _refuse(
        self,
        project: str,
        location: str,
        run_id: str,
        plan: _Capture,
        now: datetime,
        refusal: MldiagError,
    ) -> None:
        error = OperationError(code=refusal.code, message=refusal.message)
        operation = self._operation(project, location, run_id, plan, now, error)
        await self._repository.add_done_operation(operation)

    async def _start(
        self,
        project: str,
        location: str,
        run_id: str,
        plan: _Capture,
        now: datetime,
        *,
        replay: bool,
    ) -> Operation | None:
        """Store the pending operation and the session, stage the command; with ``replay``
        an existing session means this request was handled already (None), otherwise it is
        :class:`SessionExists`."""
        operation = self._operation(project, location, run_id, plan, now)
        state = new_state(
            project,
            location,
            run_id,
            plan.session_id,
            plan.kind,
            now,
            duration_seconds=plan.duration_seconds,
            tracer_levels=plan.tracer_levels,
            storage_folder_uri=session_folder(self._storage_root, run_id, plan.session_id),
            auto_captured=plan.auto_captured,
            monitored_events=[plan.workload_event_id] if plan.workload_event_id else [],
            operation=operation.name,
        )
        hosts = {
            host: (ProfilerSessionHost(host=host, phase=ProfilerSessionPhase.ACTIVE), now)
            for host in plan.hosts
        }
        state = settle(state, hosts)
        command = CaptureProfile(
            event_id=derived_id(_CAPTURE_IDS, "command", plan.operation_id),
            run_id=run_id,
            session_id=plan.session_id,
            kind=plan.kind,
            operation=operation.name,
            targets=[CaptureTarget(host=t.host, address=t.address) for t in plan.targets],
            duration_seconds=plan.duration_seconds,
            tracer_levels=plan.tracer_levels,
            workload_event_id=plan.workload_event_id,
        )
        announce: list[Envelope] = [command, self._changed(state)]

        def change(current: SessionState | None) -> SessionWrite | None:
            if current is None:
                return SessionWrite(state, announce=announce, new_operation=operation)
            if replay:
                return None
            raise SessionExists(
                f"run {run_id!r} already has a profiler session {plan.session_id!r};"
                " name another, or leave sessionId out"
            )

        result = await self._repository.change_session(run_id, plan.session_id, change)
        if not result.written:
            log.info("profiles.capture.replayed", run_id=run_id, session_id=plan.session_id)
            return None
        await self._outbox.flush()
        log.info(
            "profiles.capture.started",
            run_id=run_id,
            session_id=plan.session_id,
            kind=plan.kind.value,
            operation=operation.name,
            hosts=",".join(plan.hosts),
            duration_s=plan.duration_seconds,
        )
        return operation

    async def on_capture_finished(self, message: ProfileCaptureFinished) -> None:
        """Finish the capture's operation: the session when it succeeded, the error when not;
        hosts that produced no file are FAILED. Finishing twice changes nothing."""
        bound = log.bind(
            run_id=message.run_id, session_id=message.session_id, operation=message.operation
        )
        try:
            _project, _location, operation_id = split_operation_name(message.operation)
        except ValueError:
            bound.warning("profiles.capture.unknown_operation")
            return
        now = message.occurred_at
        error = (
            OperationError(code=message.error_code, message=message.error_message)
            if message.error_code
            else None
        )
        missing_error = (
            "the capture produced no profile from this host (the host or its profiler"
            " server was unreachable, or another trace was running there)"
        )

        def change(current: SessionState | None) -> SessionWrite:
            if current is None:
                failure = error or OperationError(
                    code=SessionNotFound.code,
                    message=f"profiler session {message.session_id!r} does not exist",
                )
                outcome = OperationOutcome(operation_id, now, error=failure)
                return SessionWrite(None, finished_operation=outcome)
            state = fail_hosts(current, message.missing_hosts, missing_error, now)
            response = self.served(state) if error is None else None
            outcome = OperationOutcome(operation_id, now, response=response, error=error)
            if state == current:
                return SessionWrite(None, finished_operation=outcome)
            return SessionWrite(state, announce=[self._changed(state)], finished_operation=outcome)

        result = await self._repository.change_session(message.run_id, message.session_id, change)
        if result.written:
            await self._outbox.flush()
        bound.info(
            "profiles.capture.finished",
            error_code=message.error_code,
            missing_hosts=",".join(message.missing_hosts),
            operation_finished=result.operation_finished,
        )


def _position(token: str, query: str) -> tuple[datetime, str]:
    fields = decode_token(token)
    values = fields.get("k")
    if fields.get("q") != query or not isinstance(values, list) or len(values) != 2:
        raise InvalidPageToken("the page token is not valid for this run and filter")
    try:
        return datetime.fromisoformat(str(values[0])), str(values[1])
    except ValueError:
        raise InvalidPageToken("the page token is not valid") from None
