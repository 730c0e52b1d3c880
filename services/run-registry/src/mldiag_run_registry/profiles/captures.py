"""Captures of a run's profiles: ``:capture`` and the analyzer's ``ProfileCaptureRequested``
start one, the xprof-provisioner's ``ProfileCaptureFinished`` finishes it (no SQL, no bus
client here).

A capture resolves the run's registered targets, then in one transaction stores a pending
``capture`` operation, creates the session (its hosts ACTIVE) and stages the
``CaptureProfile`` command for the xprof-provisioner, whose ``ProfileCaptureFinished`` later
finishes the operation. Bus requests derive every id (session, operation, command) from the
message's event id, so a redelivery finds what the first delivery wrote and does nothing.
"""

import dataclasses
import secrets
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import structlog

from mldiag_platform.errors import MldiagError
from mldiag_platform.outbox import Flusher
from mldiag_run_registry.lookup import RunLookup
from mldiag_run_registry.operations.repository import operation_name, split_operation_name
from mldiag_run_registry.operations.service import new_operation_id
from mldiag_run_registry.profiles.errors import (
    NoProfilerTargets,
    ProgrammaticTraceActive,
    SessionExists,
    SessionNotFound,
    UnknownTarget,
)
from mldiag_run_registry.profiles.merge import SessionState, fail_hosts, new_state, settle
from mldiag_run_registry.profiles.repository import (
    OperationOutcome,
    ProfilesRepository,
    SessionWrite,
)
from mldiag_run_registry.profiles.service import ProfilesService, session_folder
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import derived_id, run_name
from mldiag_schemas.operations import Operation, OperationError, OperationMetadata, OperationVerb
from mldiag_schemas.profiling import (
    CaptureProfile,
    CaptureProfileRequest,
    CaptureTarget,
    ProfileCaptureFinished,
    ProfileCaptureRequested,
    ProfilerSessionHost,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerTarget,
    TracerLevels,
    session_name,
)

log = structlog.get_logger(__name__)

PROGRAMMATIC_STALE_AFTER = timedelta(minutes=15)
"""A programmatic trace silent this long is not running any more (traces last seconds; its
process died before reporting the end): it no longer blocks captures on its hosts."""

# Namespace of the ids derived from a capture request's event id.
_CAPTURE_IDS = uuid.UUID("0f4b9a5e-1c2d-4e7f-9a3b-5d6c7e8f9a01")

NO_TARGETS_HINT = (
    "start the workload with mldiag.init(profiler_port=...) or on_demand_xprof=True so that"
    " it registers its profiler server"
)


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


class CapturesService:
    """Captures of a run's profiler targets, each a session and a ``capture`` operation."""

    def __init__(
        self,
        repository: ProfilesRepository,
        runs: RunLookup,
        outbox: Flusher,
        profiles: ProfilesService,
        *,
        storage_root: str,
    ) -> None:
        self._repository = repository
        self._runs = runs
        self._outbox = outbox
        self._profiles = profiles
        self._storage_root = storage_root.rstrip("/")

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
        found = await self._profiles.live_run(message.run_id)
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
        announce: list[Envelope] = [command, self._profiles.changed(state)]

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
            response = self._profiles.served(state) if error is None else None
            outcome = OperationOutcome(operation_id, now, response=response, error=error)
            if state == current:
                return SessionWrite(None, finished_operation=outcome)
            return SessionWrite(
                state, announce=[self._profiles.changed(state)], finished_operation=outcome
            )

        result = await self._repository.change_session(message.run_id, message.session_id, change)
        if result.written:
            await self._outbox.flush()
        bound.info(
            "profiles.capture.finished",
            error_code=message.error_code,
            missing_hosts=",".join(message.missing_hosts),
            operation_finished=result.operation_finished,
        )
