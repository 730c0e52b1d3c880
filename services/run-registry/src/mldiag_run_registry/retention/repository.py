"""All SQL about retention policies, and the lock that keeps two registry replicas from
sweeping at once. (What a sweep removes is each room's own SQL: runs/, metrics/, events/,
logs/, profiles/, heartbeats/ and operations/ repositories.)"""

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

import asyncpg

# pg_try_advisory_lock's key for "a retention sweep is running" (any constant bigint that no
# other lock of the registry uses; the others hash their own keys).
_SWEEP_LOCK = 0x6D6C_6469_6167_0001  # "mldiag" + 1


@dataclass(frozen=True)
class StoredPolicy:
    """A project's stored policy, in days (0: keep forever)."""

    project: str
    raw_points_days: int
    rollups_days: int
    deleted_runs_days: int
    update_time: datetime


def _policy(row: asyncpg.Record) -> StoredPolicy:
    return StoredPolicy(
        project=row["project"],
        raw_points_days=row["raw_points_days"],
        rollups_days=row["rollups_days"],
        deleted_runs_days=row["deleted_runs_days"],
        update_time=row["update_time"],
    )


_COLUMNS = "project, raw_points_days, rollups_days, deleted_runs_days, update_time"


class RetentionRepository:
    """One policy row per project."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def get_policy(self, project: str) -> StoredPolicy | None:
        """The project's policy, if it ever set one."""
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM retention_policies WHERE project = $1", project
        )
        return _policy(row) if row else None

    async def list_policies(self) -> list[StoredPolicy]:
        """Every stored policy, by project."""
        rows = await self._pool.fetch(f"SELECT {_COLUMNS} FROM retention_policies ORDER BY project")
        return [_policy(row) for row in rows]

    async def put_policy(self, policy: StoredPolicy) -> None:
        """Store the project's policy, replacing the one before."""
        await self._pool.execute(
            f"INSERT INTO retention_policies ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5)"
            " ON CONFLICT (project) DO UPDATE SET raw_points_days = EXCLUDED.raw_points_days,"
            " rollups_days = EXCLUDED.rollups_days,"
            " deleted_runs_days = EXCLUDED.deleted_runs_days,"
            " update_time = EXCLUDED.update_time",
            policy.project,
            policy.raw_points_days,
            policy.rollups_days,
            policy.deleted_runs_days,
            policy.update_time,
        )

    @contextlib.asynccontextmanager
    async def sweeping_alone(self) -> AsyncIterator[bool]:
        """Hold the sweep lock for the block, if no other replica holds it: yields whether
        it is held. A session lock on a connection kept for the block, so a replica that
        dies mid-sweep frees it with its connection."""
        async with self._pool.acquire() as conn:
            held = bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", _SWEEP_LOCK))
            try:
                yield held
            finally:
                if held:
                    await conn.execute("SELECT pg_advisory_unlock($1)", _SWEEP_LOCK)
