"""All SQL about runs. Each public method is one transaction."""

import json
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from mldiag_platform.outbox import Outbox
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import run_name
from mldiag_schemas.runs import Run, RunState

_RUN_COLUMNS = (
    "run_id, project, location, display_name, run_set, labels, state, create_time, update_time"
)


def _run_from(row: asyncpg.Record) -> Run:
    return Run(
        name=run_name(row["project"], row["location"], row["run_id"]),
        run_id=row["run_id"],
        display_name=row["display_name"],
        run_set=row["run_set"],
        labels=json.loads(row["labels"]),
        state=RunState(row["state"]),
        create_time=row["create_time"],
        update_time=row["update_time"],
    )


class RunRepository:
    """Runs in the registry's own schema."""

    def __init__(self, pool: asyncpg.Pool, outbox: Outbox) -> None:
        self._pool = pool
        self._outbox = outbox

    async def insert_run(
        self, project: str, location: str, run: Run, announce: Sequence[Envelope]
    ) -> bool:
        """Insert ``run`` and stage ``announce``; False (and nothing staged) if it exists."""
        async with self._pool.acquire() as conn, conn.transaction():
            inserted = await conn.fetchval(
                f"INSERT INTO runs ({_RUN_COLUMNS})"
                " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9)"
                " ON CONFLICT (run_id) DO NOTHING RETURNING true",
                run.run_id,
                project,
                location,
                run.display_name,
                run.run_set,
                json.dumps(run.labels),
                run.state.value,
                run.create_time,
                run.update_time,
            )
            if not inserted:
                return False
            await self._outbox.add(conn, announce)
        return True

    async def get_run(self, project: str, location: str, run_id: str) -> Run | None:
        """The run, if it exists under that parent."""
        row = await self._pool.fetchrow(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = $1 AND project = $2 AND location = $3",
            run_id,
            project,
            location,
        )
        return _run_from(row) if row else None

    async def list_runs(
        self, project: str, location: str, limit: int, after: tuple[datetime, str] | None
    ) -> list[Run]:
        """Runs newest first, starting after the keyset position ``after``."""
        if after is None:
            rows = await self._pool.fetch(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE project = $1 AND location = $2"
                " ORDER BY create_time DESC, run_id DESC LIMIT $3",
                project,
                location,
                limit,
            )
        else:
            rows = await self._pool.fetch(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE project = $1 AND location = $2"
                " AND (create_time, run_id) < ($3, $4)"
                " ORDER BY create_time DESC, run_id DESC LIMIT $5",
                project,
                location,
                after[0],
                after[1],
                limit,
            )
        return [_run_from(row) for row in rows]
