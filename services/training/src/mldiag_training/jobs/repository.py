"""The custom_jobs and replicas tables, as the jobs API reads and writes them.

The API inserts jobs, reads them, asks for cancels and deletes ended jobs; every other
change of state is the scheduler's. A cancel and a delete lock the job's row (``FOR
UPDATE``), as the scheduler does, so neither races a state change.
"""

import json
from collections.abc import Callable, Sequence
from datetime import datetime

import asyncpg

from mldiag_platform.listing.filtering import Expr, OrderKey
from mldiag_platform.outbox import Outbox
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.jobs import (
    CustomJob,
    CustomJobSpec,
    JobState,
    Replica,
    ReplicaState,
    RpcStatus,
)
from mldiag_training.listing_sql import page_sql

_SELECT = (
    "job_id, project, location, display_name, labels, spec, state, error, create_time,"
    " start_time, end_time, update_time"
)

# Filter and orderBy fields (see service.FIELDS) → columns.
_FIELD_COLUMNS = {
    "display_name": "display_name",
    "state": "state",
    "create_time": "create_time",
    "start_time": "start_time",
    "end_time": "end_time",
    "update_time": "update_time",
    "job_id": "job_id",
    "labels": "labels",  # JSONB: filtered by key, never ordered
}


def job_name(project: str, location: str, job_id: str) -> str:
    """A custom job's resource name."""
    return f"projects/{project}/locations/{location}/customJobs/{job_id}"


def _job_from(row: asyncpg.Record) -> CustomJob:
    error = row["error"]
    return CustomJob(
        name=job_name(row["project"], row["location"], row["job_id"]),
        display_name=row["display_name"],
        job_spec=CustomJobSpec.model_validate_json(row["spec"]),
        state=JobState(row["state"]),
        create_time=row["create_time"],
        start_time=row["start_time"],
        end_time=row["end_time"],
        update_time=row["update_time"],
        error=RpcStatus.model_validate_json(error) if error else None,
        labels=json.loads(row["labels"]),
    )


def _replica_from(row: asyncpg.Record) -> Replica:
    return Replica(
        name=f"workerpool{row['pool']}-{row['index']}",
        pool=row["pool"],
        index=row["index"],
        attempt=row["attempt"],
        state=ReplicaState(row["state"]),
        executor=row["executor_id"] or "",
        host=row["host"],
        exit_code=row["exit_code"],
        message=row["message"],
        start_time=row["start_time"],
        end_time=row["end_time"],
    )


class JobsRepository:
    """Custom jobs (and their replicas, read-only) in the training schema."""

    def __init__(self, pool: asyncpg.Pool, outbox: Outbox) -> None:
        self._pool = pool
        self._outbox = outbox

    async def insert(
        self,
        project: str,
        location: str,
        job: CustomJob,
        job_id: str,
        deadline: datetime,
        created: Envelope,
    ) -> bool:
        """Store a new QUEUED job and stage ``created`` in the same transaction; False
        (nothing stored) when ``job_id`` is taken."""
        async with self._pool.acquire() as conn, conn.transaction():
            inserted = await conn.fetchval(
                "INSERT INTO custom_jobs (job_id, project, location, display_name, labels,"
                " spec, state, deadline, create_time, update_time)"
                " VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7, $8, $9, $9)"
                " ON CONFLICT (job_id) DO NOTHING RETURNING true",
                job_id,
                project,
                location,
                job.display_name,
                json.dumps(job.labels),
                job.job_spec.model_dump_json(),
                job.state.value,
                deadline,
                job.create_time,
            )
            if not inserted:
                return False
            await self._outbox.add(conn, [created])
        return True

    async def get(self, project: str, location: str, job_id: str) -> CustomJob | None:
        """One job of the parent, or None."""
        row = await self._pool.fetchrow(
            f"SELECT {_SELECT} FROM custom_jobs"
            " WHERE project = $1 AND location = $2 AND job_id = $3",
            project,
            location,
            job_id,
        )
        return _job_from(row) if row else None

    async def list_jobs(
        self,
        project: str,
        location: str,
        where: Expr | None,
        order: Sequence[OrderKey],
        limit: int,
        after: Sequence[object] | None,
    ) -> list[CustomJob]:
        """Jobs of the parent matching ``where`` in ``order`` (which ends on the unique
        ``job_id``), after the keyset position ``after`` (one value per order key)."""
        params: list[object] = [project, location]
        sql = page_sql(
            f"SELECT {_SELECT} FROM custom_jobs",
            ["project = $1", "location = $2"],
            params,
            _FIELD_COLUMNS,
            where,
            order,
            limit,
            after,
        )
        rows = await self._pool.fetch(sql, *params)
        return [_job_from(row) for row in rows]

    async def request_cancel(
        self,
        project: str,
        location: str,
        job_id: str,
        cancellable: frozenset[JobState],
        now: datetime,
        changed: Callable[[JobState, int], Envelope],
    ) -> JobState | None:
        """Mark a job in ``cancellable`` CANCELLING (``cancel_requested``), staging
        ``changed(previous state, restarts)`` with it. Answers the state the job had
        (whether it changed or not), None if there is no such job."""
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "SELECT state, restarts FROM custom_jobs"
                " WHERE project = $1 AND location = $2 AND job_id = $3 FOR UPDATE",
                project,
                location,
                job_id,
            )
            if row is None:
                return None
            previous = JobState(row["state"])
            if previous not in cancellable:
                return previous
            await conn.execute(
                "UPDATE custom_jobs SET state = $2, cancel_requested = true, update_time = $3"
                " WHERE job_id = $1",
                job_id,
                JobState.CANCELLING.value,
                now,
            )
            await self._outbox.add(conn, [changed(previous, row["restarts"])])
        return previous

    async def delete(
        self, project: str, location: str, job_id: str, deletable: frozenset[JobState]
    ) -> JobState | None:
        """Delete a job in ``deletable`` (and its replicas). Answers the state it had
        (deleted or not), None if there is no such job."""
        async with self._pool.acquire() as conn, conn.transaction():
            state = await conn.fetchval(
                "SELECT state FROM custom_jobs"
                " WHERE project = $1 AND location = $2 AND job_id = $3 FOR UPDATE",
                project,
                location,
                job_id,
            )
            if state is None:
                return None
            if JobState(state) in deletable:
                await conn.execute("DELETE FROM custom_jobs WHERE job_id = $1", job_id)
        return JobState(state)

    async def replicas(self, project: str, location: str, job_id: str) -> list[Replica] | None:
        """Every replica's current attempt, by pool then index; None if there is no job."""
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            exists = await conn.fetchval(
                "SELECT true FROM custom_jobs WHERE project = $1 AND location = $2 AND job_id = $3",
                project,
                location,
                job_id,
            )
            if not exists:
                return None
            rows = await conn.fetch(
                "SELECT pool, index, attempt, state, executor_id, host, exit_code, message,"
                " start_time, end_time FROM replicas WHERE job_id = $1 ORDER BY pool, index",
                job_id,
            )
        return [_replica_from(row) for row in rows]
