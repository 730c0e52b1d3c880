"""The scheduler: the one writer of job and replica state.

Every change happens in one transaction holding the scheduler's lock (see the repository),
and every message it causes (``StartReplica``, ``StopReplica``, ``CustomJobStateChanged``)
is staged in the outbox in that transaction and published after commit. Correctness never
rests on a nudge: :meth:`Scheduler.tick` reconciles every job that has not ended (places
queued jobs, dispatches due restarts, cancels, times out, declares silent executors' replicas
lost, revokes ended jobs' tokens), and facts are idempotent by attempt.

Placement is first fit in create order with skip-ahead: a queued job that does not fit
now lets later, smaller jobs that fit go first (a big job may wait while small ones keep
coming; it is placed as soon as a moment leaves room for its whole gang).

Restarts: a failed attempt (exit code not 0, killed by nobody we know of, setup failed,
rejected, or lost with its executor) restarts after ``restart_backoff_seconds`` doubling up
to ``restart_backoff_max_seconds``, at most ``max_restarts`` times per replica (per job for
gang restarts), on the same executor and port (they stay reserved while it waits) or, when
that executor is gone, wherever it fits. ``disableRetries`` fails the job at the first
failure; an exit code in ``permanent_exit_codes`` fails it at once. With
``restartJobOnWorkerRestart`` every replica is stopped (reason ``restart``) and all start a
new attempt together once every old one has ended. A replica moved to another executor gets
a new address; without a gang restart its peers keep the old one in their CLUSTER_SPEC.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

import structlog
from prometheus_client import Gauge

from mldiag_platform.auth import TokenDirectory, new_secret, secret_hash
from mldiag_platform.errors import InvalidArgument
from mldiag_platform.outbox import Flusher
from mldiag_platform.settings import StorageSettings
from mldiag_schemas.auth import Role, TokenGrant
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.jobs import (
    AcceleratorType,
    CustomJobSpec,
    JobState,
    ReplicaState,
    RpcStatus,
    Scheduling,
)
from mldiag_schemas.replicas import (
    CustomJobStateChanged,
    ExecutorAnnounced,
    ExitReason,
    ReplicaExited,
    ReplicaKey,
    ReplicaStarted,
    Resources,
    StartReplica,
    StopReplica,
)
from mldiag_training.scheduler.commands import (
    CANCELLED_CODE,
    DEADLINE_EXCEEDED_CODE,
    FAILED_PRECONDITION_CODE,
    MESSAGE_TAIL,
    StopReason,
    failure_status,
    replica_key,
    start_replica,
    stop_replica,
)
from mldiag_training.scheduler.environment import PlatformPlace
from mldiag_training.scheduler.errors import Unfittable
from mldiag_training.scheduler.machines import MachineTable
from mldiag_training.scheduler.placement import (
    Demand,
    Holding,
    Room,
    first_unfittable,
    place_gang,
    place_one,
)
from mldiag_training.scheduler.repository import (
    ExecutorRow,
    JobRow,
    ReplicaRow,
    SchedulerRepository,
    SchedulerUnit,
)

log = structlog.get_logger(__name__)

KNOWN_EXECUTORS_WINDOW = timedelta(minutes=10)
"""Executors heard from within this decide whether a new job could ever fit."""
TOKEN_AFTER_DEADLINE = timedelta(hours=1)
"""A replica token outlives the job's deadline by this (it is revoked when the job ends)."""
LIVE = (ReplicaState.PENDING, ReplicaState.RUNNING)

# Set by every reconcile pass from the rows it reads anyway (each training replica reports
# its own last pass: the dashboards take the max over instances).
JOBS = Gauge("mldiag_training_jobs", "Jobs not ended, by state, at the last pass.", ["state"])
REPLICAS = Gauge(
    "mldiag_training_replicas", "Replicas of jobs not ended, by state, at the last pass.", ["state"]
)
EXECUTORS_LIVE = Gauge(
    "mldiag_training_executors_live", "Executors heard from within the timeout, at the last pass."
)


class SchedulerSettings(Protocol):
    """The settings the scheduler reads (``TrainingSettings`` has them)."""

    @property
    def public_api_url(self) -> str: ...
    @property
    def max_restarts(self) -> int: ...
    @property
    def restart_backoff_seconds(self) -> float: ...
    @property
    def restart_backoff_max_seconds(self) -> float: ...
    @property
    def permanent_exit_codes(self) -> frozenset[int]: ...
    @property
    def executor_timeout_seconds(self) -> float: ...
    @property
    def stop_grace_seconds(self) -> float: ...
    @property
    def tick_seconds(self) -> float: ...
    @property
    def storage(self) -> StorageSettings: ...


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Job:
    """A job and its replicas while one unit of work changes them."""

    row: JobRow
    replicas: dict[tuple[int, int], ReplicaRow] = field(default_factory=dict)

    def live(self) -> list[ReplicaRow]:
        return [r for r in self.replicas.values() if r.state in LIVE]

    def cluster(self) -> dict[int, list[str]]:
        found: dict[int, list[str]] = {}
        for (pool, _index), replica in sorted(self.replicas.items()):
            found.setdefault(pool, []).append(f"{replica.address}:{replica.port}")
        return found


@dataclass
class _Pass:
    """One reconcile pass: its clock, its unit, and the room left on live executors."""

    unit: SchedulerUnit
    now: datetime
    live_executors: dict[str, ExecutorRow]
    rooms: list[Room]
    may_declare_lost: bool


class Scheduler:
    """Places jobs on executors and drives jobs' and replicas' states from facts."""

    def __init__(
        self,
        *,
        repository: SchedulerRepository,
        outbox: Flusher,
        directory: TokenDirectory,
        settings: SchedulerSettings,
        machines: MachineTable,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._repository = repository
        self._outbox = outbox
        self._directory = directory
        self._settings = settings
        self._machines = machines
        self._clock = clock
        self._lock = asyncio.Lock()
        # Executors may look silent to a scheduler that just started (it heard nothing yet):
        # nothing is declared lost before it has listened for a whole timeout.
        self._started = clock()

    @property
    def tick_seconds(self) -> float:
        """How often the reconcile loop runs."""
        return self._settings.tick_seconds

    # -- the API's calls -------------------------------------------------------------

    async def refuse_unfittable(self, spec: CustomJobSpec) -> None:
        """Raise :class:`Unfittable` (FAILED_PRECONDITION) naming the pool when no executor
        seen in the last minutes could ever run one replica of it, or the whole gang could
        never fit on all of them at once; with no executor known, accept (the job queues)."""
        executors = await self._repository.recent_executors(self._clock() - KNOWN_EXECUTORS_WINDOW)
        if not executors:
            return
        demands = self._demands(spec)

        def rooms() -> list[Room]:
            return [
                Room.of(e.executor_id, e.address, e.capacity, e.first_port, e.port_count)
                for e in executors
            ]

        bad = first_unfittable(demands, rooms())
        if bad is not None:
            field_path = f"jobSpec.workerPoolSpecs[{bad.pool}]"
            raise Unfittable(
                f"{field_path}: no executor seen in the last "
                f"{int(KNOWN_EXECUTORS_WINDOW.total_seconds() // 60)} minutes could ever run "
                f"one replica ({_describe(bad.resources)}); the largest has "
                + _describe(max(executors, key=_size).capacity),
                details=[{"field": field_path, "problem": "fits on no executor"}],
            )
        if place_gang(demands, rooms()) is None:
            raise Unfittable(
                f"jobSpec.workerPoolSpecs: the job's {len(demands)} replicas never fit at once "
                "on the executors seen lately (a job runs only when all its replicas fit)",
                details=[{"field": "jobSpec.workerPoolSpecs", "problem": "gang never fits"}],
            )

    async def cancel_requested(self, job_id: str) -> None:
        """The API committed a cancel: stop the job's replicas now (the tick would too)."""
        log.debug("scheduler.nudge", job_id=job_id, why="cancel")
        await self.reconcile()

    # -- facts -----------------------------------------------------------------------

    async def run_created(self, run_id: str) -> None:
        """The run of job ``run_id`` exists (ignored for runs that are not jobs)."""
        if await self._repository.mark_run_ready(run_id):
            log.info("scheduler.run_ready", job_id=run_id)
            await self.reconcile()

    async def executor_announced(self, announced: ExecutorAnnounced) -> None:
        """Record the executor's capacity; stop the attempts it runs that nobody expects."""
        fresh = await self._repository.upsert_executor(announced, self._clock())
        stops: list[Envelope] = []
        for key in announced.running:
            current = await self._repository.replica(key.job_id, key.pool, key.index)
            expected = (
                current is not None
                and current.attempt == key.attempt
                and current.executor_id == announced.executor_id
                and current.state in LIVE
            )
            if not expected:
                stops.append(self._stop_message(announced.executor_id, key, "superseded"))
        if stops:
            await self._repository.stage(stops)
            log.info(
                "scheduler.unexpected_attempts", executor=announced.executor_id, count=len(stops)
            )
            await self._outbox.flush()
        if fresh:
            log.info("scheduler.executor_joined", executor=announced.executor_id)
            await self.reconcile()

    async def replica_started(self, fact: ReplicaStarted) -> None:
        """An attempt started: the replica is RUNNING, and the job once all are."""
        key = fact.replica
        async with self._lock, self._repository.unit() as unit:
            now = self._clock()
            found = await self._current(unit, key, fact.executor_id)
            if found is None:
                await unit.stage([self._stop_message(fact.executor_id, key, "superseded")])
                log.info("scheduler.stale_start", **_log_key(key))
            else:
                job, current = found
                if current.state == ReplicaState.PENDING:
                    current = replace(
                        current,
                        state=ReplicaState.RUNNING,
                        host=fact.host,
                        start_time=fact.started_at,
                    )
                    await self._save(unit, job, current)
                if job.row.state.terminal or current.stop_reason is not None:
                    # Its stop may have reached the executor before its start did: say it
                    # again, under another id (the same one would be dropped as a duplicate).
                    await unit.stage([self._stop_message(fact.executor_id, key, "superseded")])
                await self._maybe_running(unit, job, now)
        await self._after()

    async def replica_exited(self, fact: ReplicaExited) -> None:
        """An attempt ended: success, restart, or the job's end."""
        key = fact.replica
        async with self._lock, self._repository.unit() as unit:
            now = self._clock()
            found = await self._current(unit, key, fact.executor_id)
            if found is not None:
                job, current = found
                log.info(
                    "scheduler.replica_exited",
                    **_log_key(key),
                    reason=fact.reason,
                    exit_code=fact.exit_code,
                )
                await self._attempt_ended(
                    unit,
                    job,
                    current,
                    fact.reason,
                    fact.exit_code,
                    fact.message,
                    fact.ended_at,
                    now,
                )
                # A restart may be due at once (no backoff left) or a peer may be free.
                await self._reconcile(unit, now)
            else:
                log.debug("scheduler.stale_exit", **_log_key(key))
        await self._after()

    # -- the reconcile loop ----------------------------------------------------------

    async def tick(self) -> None:
        """Reconcile everything (what the periodic loop calls)."""
        await self.reconcile()

    async def reconcile(self) -> None:
        """One pass over every job that has not ended, then publish and revoke."""
        async with self._lock, self._repository.unit() as unit:
            await self._reconcile(unit, self._clock())
        await self._after()

    async def _reconcile(self, unit: SchedulerUnit, now: datetime) -> None:
        timeout = timedelta(seconds=self._settings.executor_timeout_seconds)
        executors = await unit.executors()
        live = {e.executor_id: e for e in executors if now - e.last_seen <= timeout}
        holdings: dict[str, list[Holding]] = {}
        for replica in await unit.holdings():
            if replica.executor_id in live and replica.resources is not None:
                holdings.setdefault(replica.executor_id, []).append(
                    Holding(replica.resources, replica.port)
                )
        rooms = [
            Room.of(
                e.executor_id,
                e.address,
                e.capacity,
                e.first_port,
                e.port_count,
                holdings.get(e.executor_id, ()),
            )
            for e in sorted(live.values(), key=lambda e: e.executor_id)
        ]
        work = _Pass(unit, now, live, rooms, now - self._started >= timeout)
        if work.may_declare_lost:
            # An ended job's replica whose executor went silent will never report its exit.
            for replica in await unit.leftovers():
                if replica.executor_id not in live:
                    await unit.save_replica(
                        replace(replica, state=ReplicaState.CANCELLED, end_time=now)
                    )
        rows = await unit.active_jobs()
        replicas = await unit.replicas([row.job_id for row in rows])
        _observe(live, rows, replicas)
        for row in rows:
            job = _Job(row, {(r.pool, r.index): r for r in replicas[row.job_id]})
            await self._reconcile_job(work, job)

    async def _reconcile_job(self, work: _Pass, job: _Job) -> None:
        unit, now = work.unit, work.now
        if work.may_declare_lost:
            for replica in job.live():
                if replica.executor_id not in work.live_executors:
                    log.warning(
                        "scheduler.replica_lost",
                        **_log_key(replica_key(replica)),
                        executor=replica.executor_id,
                    )
                    message = f"its executor {replica.executor_id} went silent"
                    await self._attempt_ended(unit, job, replica, "lost", None, message, now, now)
        state = job.row.state
        if state.terminal:
            return
        if job.row.cancel_requested and state in (
            JobState.QUEUED,
            JobState.PENDING,
            JobState.RUNNING,
        ):
            await self._set_job(unit, job, now, state=JobState.CANCELLING)
        if job.row.state == JobState.CANCELLING:
            await self._cancel(unit, job, now)
            return
        if now >= job.row.deadline:
            timeout = (job.row.deadline - job.row.create_time).total_seconds()
            error = RpcStatus(
                code=DEADLINE_EXCEEDED_CODE,
                message=f"The job ran past its timeout of {timeout:g}s (scheduling.timeout).",
            )
            await self._finish(unit, job, now, JobState.FAILED, error, "timeout")
            return
        if job.row.state == JobState.QUEUED and job.row.run_ready:
            await self._place(work, job)
        elif job.row.state in (JobState.PENDING, JobState.RUNNING):
            await self._dispatch_restarts(work, job)
            await self._maybe_running(unit, job, now)

    # -- placement and dispatch --------------------------------------------------------

    def _demands(self, spec: CustomJobSpec) -> list[Demand]:
        demands: list[Demand] = []
        for pool, pool_spec in enumerate(spec.worker_pool_specs):
            if pool_spec.empty or pool_spec.replica_count == 0:
                continue
            machine = pool_spec.machine_spec
            resources = self._machines.resolve(
                machine.machine_type if machine else "",
                machine.accelerator_type if machine else AcceleratorType.UNSPECIFIED,
                machine.accelerator_count if machine else 0,
                field=f"jobSpec.workerPoolSpecs[{pool}].machineSpec.machineType",
            )
            demands.extend(
                Demand(pool, index, resources) for index in range(pool_spec.replica_count)
            )
        return demands

    async def _place(self, work: _Pass, job: _Job) -> None:
        unit, now = work.unit, work.now
        try:
            demands = self._demands(job.row.spec)
        except InvalidArgument as exc:  # the machine table changed since the job was made
            error = RpcStatus(code=FAILED_PRECONDITION_CODE, message=exc.message)
            await self._finish(unit, job, now, JobState.FAILED, error, "failed")
            return
        slots = place_gang(demands, work.rooms)
        if slots is None:
            return
        token = job.row.run_token or new_secret()
        # Granted before the commit: a replica never starts with a token nobody knows. If
        # the commit fails, the grant is held to this job's run and expires.
        await self._directory.grant(
            secret_hash(token),
            TokenGrant(
                token_id=f"job-{job.row.job_id}",
                role=Role.EDITOR,
                expire_time=job.row.deadline + TOKEN_AFTER_DEADLINE,
                run_id=job.row.job_id,
            ),
        )
        placed = [
            ReplicaRow(
                job_id=job.row.job_id,
                pool=demand.pool,
                index=demand.index,
                attempt=0,
                state=ReplicaState.PENDING,
                executor_id=slots[(demand.pool, demand.index)].executor_id,
                address=slots[(demand.pool, demand.index)].address,
                host="",
                port=slots[(demand.pool, demand.index)].port,
                resources=demand.resources,
                exit_code=None,
                message="",
                restarts=0,
                not_before=None,
                start_time=None,
                end_time=None,
                stop_reason=None,
            )
            for demand in demands
        ]
        await unit.insert_replicas(placed)
        job.replicas = {(r.pool, r.index): r for r in placed}
        job.row = replace(job.row, run_token=token)
        await unit.stage([self._start_message(job, replica, token) for replica in placed])
        await self._set_job(unit, job, now, state=JobState.PENDING)
        log.info(
            "scheduler.job_placed",
            job_id=job.row.job_id,
            replicas=len(placed),
            executors=sorted({r.executor_id or "" for r in placed}),
        )

    async def _dispatch_restarts(self, work: _Pass, job: _Job) -> None:
        unit, now = work.unit, work.now
        waiting = [r for r in job.replicas.values() if r.state == ReplicaState.RESTARTING]
        if not waiting:
            return
        if _gang(job.row.spec) and any(r.stop_reason == "restart" for r in job.live()):
            return  # a gang restarts together, once every old attempt has ended
        due = [r for r in waiting if r.not_before is None or r.not_before <= now]
        if not due or (_gang(job.row.spec) and len(due) < len(waiting)):
            return
        dispatched: list[ReplicaRow] = []
        for replica in due:
            executor = work.live_executors.get(replica.executor_id or "")
            if executor is not None:
                moved = replace(replica, address=executor.address)
            else:
                resources = replica.resources or Resources(cpus=0, memory_bytes=0)
                slot = place_one(
                    Demand(replica.pool, replica.index, resources), work.rooms, prefer=None
                )
                if slot is None:
                    continue  # waits for room, still RESTARTING
                moved = replace(
                    replica, executor_id=slot.executor_id, address=slot.address, port=slot.port
                )
            moved = replace(
                moved,
                state=ReplicaState.PENDING,
                host="",
                not_before=None,
                start_time=None,
                end_time=None,
                stop_reason=None,
            )
            await self._save(unit, job, moved)
            dispatched.append(moved)
        token = job.row.run_token or ""
        await unit.stage([self._start_message(job, replica, token) for replica in dispatched])
        for replica in dispatched:
            log.info(
                "scheduler.replica_restarted",
                **_log_key(replica_key(replica)),
                executor=replica.executor_id,
            )

    def _start_message(self, job: _Job, replica: ReplicaRow, token: str) -> StartReplica:
        platform = PlatformPlace(self._settings.public_api_url, token, self._settings.storage.url)
        return start_replica(job.row, replica, job.cluster(), platform)

    def _stop_message(self, executor_id: str, key: ReplicaKey, reason: StopReason) -> StopReplica:
        return stop_replica(executor_id, key, reason, self._settings.stop_grace_seconds)

    # -- state changes ------------------------------------------------------------------

    async def _attempt_ended(
        self,
        unit: SchedulerUnit,
        job: _Job,
        replica: ReplicaRow,
        reason: ExitReason,
        exit_code: int | None,
        message: str,
        ended_at: datetime,
        now: datetime,
    ) -> None:
        """A live attempt ended (reported, or lost with its executor)."""
        success = reason == "exited" and exit_code == 0
        ended = replace(
            replica, exit_code=exit_code, message=message[-MESSAGE_TAIL:], end_time=ended_at
        )
        if job.row.state.terminal:
            done = ReplicaState.SUCCEEDED if success else ReplicaState.CANCELLED
            await self._save(unit, job, replace(ended, state=done))
            return
        if replica.stop_reason == "restart":  # stopped by a gang restart: new attempt
            await self._save(unit, job, self._restarting(ended, job.row.restarts - 1, now))
            return
        if job.row.state == JobState.CANCELLING or job.row.cancel_requested:
            done = ReplicaState.SUCCEEDED if success else ReplicaState.CANCELLED
            await self._save(unit, job, replace(ended, state=done))
            if job.row.state == JobState.CANCELLING:
                await self._cancel(unit, job, now)
            return
        if success:
            await self._save(unit, job, replace(ended, state=ReplicaState.SUCCEEDED))
            if replica.pool == 0:
                await self._finish(unit, job, now, JobState.SUCCEEDED, None, "completed")
            return
        if reason == "killed" and replica.stop_reason is not None:
            await self._save(unit, job, replace(ended, state=ReplicaState.CANCELLED))
            return
        await self._failed(unit, job, ended, reason, now)

    async def _failed(
        self, unit: SchedulerUnit, job: _Job, replica: ReplicaRow, reason: ExitReason, now: datetime
    ) -> None:
        scheduling = job.row.spec.scheduling or Scheduling()
        gang = _gang(job.row.spec)
        used = job.row.restarts if gang else replica.restarts
        permanent = reason == "exited" and replica.exit_code in self._settings.permanent_exit_codes
        if permanent or scheduling.disable_retries or used >= self._settings.max_restarts:
            await self._save(unit, job, replace(replica, state=ReplicaState.FAILED))
            why = (
                "a permanent error"
                if permanent
                else "retries are disabled"
                if scheduling.disable_retries
                else f"it failed {used + 1} times (max_restarts {self._settings.max_restarts})"
            )
            error = failure_status(replica, reason, why)
            await self._finish(unit, job, now, JobState.FAILED, error, "failed")
            return
        await self._save(
            unit, job, replace(self._restarting(replica, used, now), restarts=replica.restarts + 1)
        )
        await self._set_job(unit, job, now, restarts=job.row.restarts + 1)
        log.info(
            "scheduler.replica_failed",
            **_log_key(replica_key(replica)),
            reason=reason,
            exit_code=replica.exit_code,
            restart=used + 1,
            gang=gang,
        )
        if not gang:
            return
        for other in list(job.replicas.values()):
            if (other.pool, other.index) == (replica.pool, replica.index):
                continue
            if other.state in LIVE and other.stop_reason is None:
                await self._stop(unit, job, other, "restart")
            elif other.state in (
                ReplicaState.SUCCEEDED,
                ReplicaState.FAILED,
                ReplicaState.CANCELLED,
            ):
                await self._save(unit, job, self._restarting(other, used, now))

    def _restarting(self, replica: ReplicaRow, used: int, now: datetime) -> ReplicaRow:
        backoff = min(
            self._settings.restart_backoff_seconds * 2 ** max(used, 0),
            self._settings.restart_backoff_max_seconds,
        )
        return replace(
            replica,
            state=ReplicaState.RESTARTING,
            attempt=replica.attempt + 1,
            not_before=now + timedelta(seconds=backoff),
            stop_reason=None,
        )

    async def _cancel(self, unit: SchedulerUnit, job: _Job, now: datetime) -> None:
        await self._stop_all(unit, job, "cancelled")
        if not job.live():
            error = RpcStatus(code=CANCELLED_CODE, message="The job was cancelled.")
            await self._set_job(unit, job, now, state=JobState.CANCELLED, error=error, end_time=now)

    async def _finish(
        self,
        unit: SchedulerUnit,
        job: _Job,
        now: datetime,
        state: JobState,
        error: RpcStatus | None,
        stop_reason: StopReason,
    ) -> None:
        """End the job; stop what still runs, drop pending restarts."""
        if not await self._set_job(unit, job, now, state=state, error=error, end_time=now):
            return
        await self._stop_all(unit, job, stop_reason)
        log.info(
            "scheduler.job_ended",
            job_id=job.row.job_id,
            state=state.value,
            error=error.message if error else None,
        )

    async def _stop(
        self, unit: SchedulerUnit, job: _Job, replica: ReplicaRow, reason: StopReason
    ) -> None:
        """Send a live attempt its stop, once: it stays live until its exit is reported."""
        executor = replica.executor_id or ""
        await unit.stage([self._stop_message(executor, replica_key(replica), reason)])
        await self._save(unit, job, replace(replica, stop_reason=reason))

    async def _stop_all(self, unit: SchedulerUnit, job: _Job, reason: StopReason) -> None:
        """Stop every live attempt not stopped yet; drop pending restarts."""
        for replica in list(job.replicas.values()):
            if replica.state in LIVE and replica.stop_reason is None:
                await self._stop(unit, job, replica, reason)
            elif replica.state == ReplicaState.RESTARTING:
                await self._save(unit, job, replace(replica, state=ReplicaState.CANCELLED))

    async def _maybe_running(self, unit: SchedulerUnit, job: _Job, now: datetime) -> None:
        started = (ReplicaState.RUNNING, ReplicaState.SUCCEEDED)
        if (
            job.row.state == JobState.PENDING
            and job.replicas
            and all(r.state in started for r in job.replicas.values())
        ):
            await self._set_job(
                unit, job, now, state=JobState.RUNNING, start_time=job.row.start_time or now
            )

    async def _set_job(
        self,
        unit: SchedulerUnit,
        job: _Job,
        now: datetime,
        *,
        state: JobState | None = None,
        error: RpcStatus | None = None,
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        restarts: int | None = None,
    ) -> bool:
        before = job.row
        after = replace(
            before,
            state=state or before.state,
            error=error or before.error,
            start_time=start_time or before.start_time,
            end_time=end_time or before.end_time,
            restarts=before.restarts if restarts is None else restarts,
        )
        if not await unit.save_job(after, before.state, now):
            return False
        job.row = after
        if after.state != before.state:
            await unit.stage(
                [
                    CustomJobStateChanged(
                        job_id=after.job_id,
                        project=after.project,
                        location=after.location,
                        previous_state=before.state,
                        state=after.state,
                        error=after.error,
                        restarts=after.restarts,
                    )
                ]
            )
            log.info(
                "scheduler.job_state",
                job_id=after.job_id,
                previous=before.state.value,
                state=after.state.value,
            )
        return True

    async def _save(self, unit: SchedulerUnit, job: _Job, replica: ReplicaRow) -> None:
        await unit.save_replica(replica)
        job.replicas[(replica.pool, replica.index)] = replica

    async def _current(
        self, unit: SchedulerUnit, key: ReplicaKey, executor_id: str
    ) -> tuple[_Job, ReplicaRow] | None:
        """The job and replica a fact is about, if it names the live attempt the scheduler
        placed on that executor; None for any other (stale, superseded, unknown)."""
        job = await self._load(unit, key.job_id)
        current = job.replicas.get((key.pool, key.index)) if job else None
        if (
            job is None
            or current is None
            or current.attempt != key.attempt
            or current.executor_id != executor_id
            or current.state not in LIVE
        ):
            return None
        return job, current

    async def _load(self, unit: SchedulerUnit, job_id: str) -> _Job | None:
        row = await unit.job(job_id)
        if row is None:
            return None
        replicas = (await unit.replicas([job_id]))[job_id]
        return _Job(row, {(r.pool, r.index): r for r in replicas})

    async def _after(self) -> None:
        """After a commit: publish what it staged, revoke ended jobs' tokens."""
        await self._outbox.flush()
        try:
            for job_id, token in await self._repository.tokens_to_revoke():
                await self._directory.revoke(secret_hash(token))
                await self._repository.forget_token(job_id, token)
                log.info("scheduler.token_revoked", job_id=job_id)
        except Exception:  # the next pass tries again
            log.exception("scheduler.revoke_failed")


def _observe(
    live: dict[str, ExecutorRow], rows: list[JobRow], replicas: dict[str, list[ReplicaRow]]
) -> None:
    """The training dashboard's gauges, every state set (0 when none is in it)."""
    EXECUTORS_LIVE.set(len(live))
    for job_state in JobState:
        if not job_state.terminal:
            JOBS.labels(job_state.value).set(sum(row.state == job_state for row in rows))
    every = [replica for found in replicas.values() for replica in found]
    for replica_state in ReplicaState:
        REPLICAS.labels(replica_state.value).set(sum(r.state == replica_state for r in every))


def _gang(spec: CustomJobSpec) -> bool:
    scheduling = spec.scheduling or Scheduling()
    return scheduling.restart_job_on_worker_restart and not scheduling.disable_retries


def _describe(resources: Resources) -> str:
    text = f"{resources.cpus:g} CPUs, {resources.memory_bytes / 1024**3:.1f} GiB"
    if resources.accelerator_count:
        text += f", {resources.accelerator_count} x {resources.accelerator_type}"
    return text


def _size(executor: ExecutorRow) -> tuple[int, float, int]:
    capacity = executor.capacity
    return (capacity.accelerator_count, capacity.cpus, capacity.memory_bytes)


def _log_key(key: ReplicaKey) -> dict[str, object]:
    return {"job_id": key.job_id, "replica": key.replica_name, "attempt": key.attempt}
