"""All SQL of the scheduler. Every write happens in a :class:`SchedulerUnit`: one
transaction that first takes the scheduler's advisory lock (so two service instances never
place, restart or finish anything at once and capacity is never promised twice), locks the
jobs it reads with ``FOR UPDATE`` (so the API's cancel waits for it), and stages its bus
messages in the outbox.
"""

import zlib
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from mldiag_platform.outbox import Outbox
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.jobs import CustomJobSpec, JobState, ReplicaState, RpcStatus
from mldiag_schemas.replicas import ExecutorAnnounced, Resources

SCHEDULER_LOCK = zlib.crc32(b"mldiag-training-scheduler")
"""The advisory lock every scheduler write holds for its transaction."""

ACTIVE_STATES = (
    JobState.QUEUED.value,
    JobState.PENDING.value,
    JobState.RUNNING.value,
    JobState.CANCELLING.value,
)
HOLDING_STATES = (
    ReplicaState.PENDING.value,
    ReplicaState.RUNNING.value,
    ReplicaState.RESTARTING.value,
)

_JOB_COLUMNS = (
    "job_id, project, location, spec, state, error, run_ready, cancel_requested, restarts,"
    " deadline, create_time, start_time, end_time, run_token"
)
_REPLICA_COLUMNS = (
    "job_id, pool, index, attempt, state, executor_id, address, host, port, resources,"
    " exit_code, message, restarts, not_before, start_time, end_time, stop_reason"
)


@dataclass(frozen=True)
class JobRow:
    """A job as the scheduler sees it."""

    job_id: str
    project: str
    location: str
    spec: CustomJobSpec
    state: JobState
    error: RpcStatus | None
    run_ready: bool
    cancel_requested: bool
    restarts: int
    deadline: datetime
    create_time: datetime
    start_time: datetime | None
    end_time: datetime | None
    run_token: str | None


@dataclass(frozen=True)
class ReplicaRow:
    """A replica's current attempt."""

    job_id: str
    pool: int
    index: int
    attempt: int
    state: ReplicaState
    executor_id: str | None
    address: str
    host: str
    port: int | None
    resources: Resources | None
    exit_code: int | None
    message: str
    restarts: int
    not_before: datetime | None
    start_time: datetime | None
    end_time: datetime | None
    stop_reason: str | None


@dataclass(frozen=True)
class ExecutorRow:
    """An executor's latest announcement."""

    executor_id: str
    backend: str
    address: str
    capacity: Resources
    first_port: int
    port_count: int
    last_seen: datetime


def _job(row: asyncpg.Record) -> JobRow:
    return JobRow(
        job_id=row["job_id"],
        project=row["project"],
        location=row["location"],
        spec=CustomJobSpec.model_validate_json(row["spec"]),
        state=JobState(row["state"]),
        error=RpcStatus.model_validate_json(row["error"]) if row["error"] else None,
        run_ready=row["run_ready"],
        cancel_requested=row["cancel_requested"],
        restarts=row["restarts"],
        deadline=row["deadline"],
        create_time=row["create_time"],
        start_time=row["start_time"],
        end_time=row["end_time"],
        run_token=row["run_token"],
    )


def _replica(row: asyncpg.Record) -> ReplicaRow:
    return ReplicaRow(
        job_id=row["job_id"],
        pool=row["pool"],
        index=row["index"],
        attempt=row["attempt"],
        state=ReplicaState(row["state"]),
        executor_id=row["executor_id"],
        address=row["address"],
        host=row["host"],
        port=row["port"],
        resources=Resources.model_validate_json(row["resources"]) if row["resources"] else None,
        exit_code=row["exit_code"],
        message=row["message"],
        restarts=row["restarts"],
        not_before=row["not_before"],
        start_time=row["start_time"],
        end_time=row["end_time"],
        stop_reason=row["stop_reason"],
    )


def _executor(row: asyncpg.Record) -> ExecutorRow:
    return ExecutorRow(
        executor_id=row["executor_id"],
        backend=row["backend"],
        address=row["address"],
        capacity=Resources.model_validate_json(row["capacity"]),
        first_port=row["first_port"],
        port_count=row["port_count"],
        last_seen=row["last_seen"],
    )


def _replica_values(r: ReplicaRow) -> tuple[object, ...]:
    return (
        r.job_id,
        r.pool,
        r.index,
        r.attempt,
        r.state.value,
        r.executor_id,
        r.address,
        r.host,
        r.port,
        r.resources.model_dump_json() if r.resources else None,
        r.exit_code,
        r.message,
        r.restarts,
        r.not_before,
        r.start_time,
        r.end_time,
        r.stop_reason,
    )


class SchedulerUnit:
    """One scheduler transaction (the lock is held): reads, writes, staged messages."""

    def __init__(self, conn: asyncpg.Connection, outbox: Outbox) -> None:
        self._conn = conn
        self._outbox = outbox
        self.staged = 0

    async def active_jobs(self) -> list[JobRow]:
        """Every job that has not ended, oldest first, locked."""
        rows = await self._conn.fetch(
            f"SELECT {_JOB_COLUMNS} FROM custom_jobs WHERE state = ANY($1::text[])"
            " ORDER BY create_time, job_id FOR UPDATE",
            list(ACTIVE_STATES),
        )
        return [_job(row) for row in rows]

    async def job(self, job_id: str) -> JobRow | None:
        """One job, locked."""
        row = await self._conn.fetchrow(
            f"SELECT {_JOB_COLUMNS} FROM custom_jobs WHERE job_id = $1 FOR UPDATE", job_id
        )
        return _job(row) if row else None

    async def replicas(self, job_ids: Sequence[str]) -> dict[str, list[ReplicaRow]]:
        """The replicas of ``job_ids`` by job, by pool then index."""
        rows = await self._conn.fetch(
            f"SELECT {_REPLICA_COLUMNS} FROM replicas WHERE job_id = ANY($1::text[])"
            " ORDER BY job_id, pool, index",
            list(job_ids),
        )
        found: dict[str, list[ReplicaRow]] = {job_id: [] for job_id in job_ids}
        for row in rows:
            found[row["job_id"]].append(_replica(row))
        return found

    async def holdings(self) -> list[ReplicaRow]:
        """Every replica holding capacity on an executor (PENDING, RUNNING, RESTARTING)."""
        rows = await self._conn.fetch(
            f"SELECT {_REPLICA_COLUMNS} FROM replicas"
            " WHERE state = ANY($1::text[]) AND executor_id IS NOT NULL",
            list(HOLDING_STATES),
        )
        return [_replica(row) for row in rows]

    async def leftovers(self) -> list[ReplicaRow]:
        """Replicas still PENDING or RUNNING whose job has ended (stopped, not yet exited)."""
        rows = await self._conn.fetch(
            f"SELECT {', '.join('r.' + c.strip() for c in _REPLICA_COLUMNS.split(','))}"
            " FROM replicas r JOIN custom_jobs j USING (job_id)"
            " WHERE r.state = ANY($1::text[]) AND j.state <> ALL($2::text[])",
            [ReplicaState.PENDING.value, ReplicaState.RUNNING.value],
            list(ACTIVE_STATES),
        )
        return [_replica(row) for row in rows]

    async def executors(self) -> list[ExecutorRow]:
        """Every executor ever heard from, by id."""
        rows = await self._conn.fetch(
            "SELECT executor_id, backend, address, capacity, first_port, port_count, last_seen"
            " FROM executors ORDER BY executor_id"
        )
        return [_executor(row) for row in rows]

    async def insert_replicas(self, replicas: Iterable[ReplicaRow]) -> None:
        """Create replica rows (a job's first placement)."""
        await self._conn.executemany(
            f"INSERT INTO replicas ({_REPLICA_COLUMNS}) VALUES"
            " ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12, $13, $14, $15, $16,"
            " $17) ON CONFLICT (job_id, pool, index) DO NOTHING",
            [_replica_values(replica) for replica in replicas],
        )

    async def save_replica(self, replica: ReplicaRow) -> None:
        """Write a replica's row as given (its job is locked: nobody else writes it)."""
        await self._conn.execute(
            "UPDATE replicas SET attempt = $4, state = $5, executor_id = $6, address = $7,"
            " host = $8, port = $9, resources = $10::jsonb, exit_code = $11, message = $12,"
            " restarts = $13, not_before = $14, start_time = $15, end_time = $16,"
            " stop_reason = $17 WHERE job_id = $1 AND pool = $2 AND index = $3",
            *_replica_values(replica),
        )

    async def save_job(self, job: JobRow, previous: JobState, now: datetime) -> bool:
        """Write a job's scheduler-owned fields if it is still in ``previous`` and not
        ended (terminal states are sticky); whether it was written."""
        written = await self._conn.fetchval(
            "UPDATE custom_jobs SET state = $3, error = $4::jsonb, restarts = $5,"
            " start_time = $6, end_time = $7, run_token = $8, update_time = $9"
            " WHERE job_id = $1 AND state = $2 AND state <> ALL($10::text[]) RETURNING true",
            job.job_id,
            previous.value,
            job.state.value,
            job.error.model_dump_json() if job.error else None,
            job.restarts,
            job.start_time,
            job.end_time,
            job.run_token,
            now,
            [JobState.SUCCEEDED.value, JobState.FAILED.value, JobState.CANCELLED.value],
        )
        return bool(written)

    async def stage(self, messages: Sequence[Envelope]) -> None:
        """Stage messages to publish once this transaction has committed."""
        await self._outbox.add(self._conn, messages)
        self.staged += len(messages)


class SchedulerRepository:
    """The scheduler's tables: jobs' states, replicas, executors."""

    def __init__(self, pool: asyncpg.Pool, outbox: Outbox) -> None:
        self._pool = pool
        self._outbox = outbox

    @asynccontextmanager
    async def unit(self) -> AsyncIterator[SchedulerUnit]:
        """A transaction holding the scheduler's lock; commits when the block ends."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", SCHEDULER_LOCK)
            yield SchedulerUnit(conn, self._outbox)

    async def upsert_executor(self, announced: ExecutorAnnounced, now: datetime) -> bool:
        """Record an announcement; whether the executor is new."""
        fresh = await self._pool.fetchval(
            "INSERT INTO executors AS e (executor_id, backend, address, capacity, first_port,"
            " port_count, last_seen) VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7)"
            " ON CONFLICT (executor_id) DO UPDATE SET backend = $2, address = $3,"
            " capacity = $4::jsonb, first_port = $5, port_count = $6,"
            " last_seen = GREATEST(e.last_seen, $7)"
            " RETURNING (xmax = 0)",
            announced.executor_id,
            announced.backend,
            announced.address,
            announced.capacity.model_dump_json(),
            announced.first_port,
            announced.port_count,
            now,
        )
        return bool(fresh)

    async def recent_executors(self, since: datetime) -> list[ExecutorRow]:
        """Executors heard from since ``since``."""
        rows = await self._pool.fetch(
            "SELECT executor_id, backend, address, capacity, first_port, port_count, last_seen"
            " FROM executors WHERE last_seen >= $1 ORDER BY executor_id",
            since,
        )
        return [_executor(row) for row in rows]

    async def replica(self, job_id: str, pool: int, index: int) -> ReplicaRow | None:
        """A replica's current attempt (no lock: for checks that only send stops)."""
        row = await self._pool.fetchrow(
            f"SELECT {_REPLICA_COLUMNS} FROM replicas WHERE job_id = $1 AND pool = $2"
            " AND index = $3",
            job_id,
            pool,
            index,
        )
        return _replica(row) if row else None

    async def job_state(self, job_id: str) -> JobState | None:
        """A job's state (no lock)."""
        state = await self._pool.fetchval("SELECT state FROM custom_jobs WHERE job_id = $1", job_id)
        return JobState(state) if state else None

    async def stage(self, messages: Sequence[Envelope]) -> None:
        """Stage messages outside any other write (stops answering stale facts)."""
        async with self._pool.acquire() as conn, conn.transaction():
            await self._outbox.add(conn, messages)

    async def mark_run_ready(self, job_id: str) -> bool:
        """Note that the job's run exists; whether this changed anything (False for a run
        that is not a job, or a job already marked)."""
        changed = await self._pool.fetchval(
            "UPDATE custom_jobs SET run_ready = true WHERE job_id = $1 AND NOT run_ready"
            " RETURNING true",
            job_id,
        )
        return bool(changed)

    async def tokens_to_revoke(self) -> list[tuple[str, str]]:
        """(job, token) of ended jobs whose token is still granted."""
        rows = await self._pool.fetch(
            "SELECT job_id, run_token FROM custom_jobs WHERE run_token IS NOT NULL"
            " AND state <> ALL($1::text[])",
            list(ACTIVE_STATES),
        )
        return [(row["job_id"], row["run_token"]) for row in rows]

    async def forget_token(self, job_id: str, token: str) -> None:
        """The token is revoked: stop keeping it."""
        await self._pool.execute(
            "UPDATE custom_jobs SET run_token = NULL WHERE job_id = $1 AND run_token = $2",
            job_id,
            token,
        )
