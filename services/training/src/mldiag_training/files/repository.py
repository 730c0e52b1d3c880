"""All SQL of the files room: small reads of the jobs room's tables.

The files room owns no table. It reads a job's parent, state and pool sizes from
``custom_jobs`` and its replicas' current attempts from ``replicas`` (both written by the jobs
room and the scheduler, see migrations/0001_jobs.sql) — read-only, here, so the logs routes
can tell which replicas exist and whether an attempt has ended without reaching into
another room's repository.
"""

from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True)
class JobFacts:
    """What the logs need to know about a job."""

    state: str
    pool_sizes: tuple[int, ...]
    """Replicas per pool position (0 for a skipped position)."""


@dataclass(frozen=True)
class ReplicaFacts:
    """A replica's current attempt, as the scheduler last wrote it."""

    pool: int
    index: int
    attempt: int
    state: str


class FilesRepository:
    """Read-only SQL on the jobs tables."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def job(self, project: str, location: str, job_id: str) -> JobFacts | None:
        """The job's state and pool sizes, or ``None`` when no such job is under the parent."""
        row = await self._pool.fetchrow(
            "SELECT state, ARRAY(SELECT coalesce((p->>'replicaCount')::int, 0)"
            " FROM jsonb_array_elements(spec->'workerPoolSpecs') WITH ORDINALITY AS e(p, n)"
            " ORDER BY n) AS pool_sizes"
            " FROM custom_jobs WHERE job_id = $1 AND project = $2 AND location = $3",
            job_id,
            project,
            location,
        )
        if row is None:
            return None
        return JobFacts(state=row["state"], pool_sizes=tuple(row["pool_sizes"]))

    async def replicas(self, job_id: str) -> dict[tuple[int, int], ReplicaFacts]:
        """Every replica row of the job (none before the scheduler has placed it)."""
        rows = await self._pool.fetch(
            "SELECT pool, index, attempt, state FROM replicas WHERE job_id = $1", job_id
        )
        return {
            (row["pool"], row["index"]): ReplicaFacts(
                row["pool"], row["index"], row["attempt"], row["state"]
            )
            for row in rows
        }
