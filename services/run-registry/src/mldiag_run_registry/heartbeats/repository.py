"""All SQL about heartbeats."""

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from mldiag_schemas.telemetry import RunHeartbeat


class HeartbeatsRepository:
    """The latest heartbeat per process; older or repeated ones change nothing."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def record(self, heartbeats: Sequence[tuple[RunHeartbeat, datetime]]) -> None:
        """Upsert each process's latest heartbeat, with the time its pid was first heard
        (one entry per process in ``heartbeats``).

        Times are those of receipt (the server's clock, not the client's). A heartbeat older
        than the stored one changes nothing but, for the same pid, an earlier first time; so
        redeliveries and reordering leave the latest in place. A new pid (a restart) starts
        its first time again.
        """
        newer = "excluded.last_seen > h.last_seen"
        await self._pool.execute(
            "INSERT INTO heartbeats AS h (run_id, host, process_index, pid, step,"
            " interval_seconds, last_seen, first_seen)"
            " SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::bigint[],"
            " $6::float8[], $7::timestamptz[], $8::timestamptz[])"
            " ON CONFLICT (run_id, host, process_index) DO UPDATE SET"
            f" pid = CASE WHEN {newer} THEN excluded.pid ELSE h.pid END,"
            f" step = CASE WHEN {newer} THEN excluded.step ELSE h.step END,"
            f" interval_seconds = CASE WHEN {newer} THEN excluded.interval_seconds"
            " ELSE h.interval_seconds END,"
            " last_seen = greatest(h.last_seen, excluded.last_seen),"
            " first_seen = CASE WHEN h.pid = excluded.pid"
            " THEN least(h.first_seen, excluded.first_seen)"
            f" WHEN {newer} THEN excluded.first_seen ELSE h.first_seen END"
            f" WHERE {newer} OR (h.pid = excluded.pid AND excluded.first_seen < h.first_seen)",
            [beat.run_id for beat, _ in heartbeats],
            [beat.host for beat, _ in heartbeats],
            [beat.process_index for beat, _ in heartbeats],
            [beat.pid for beat, _ in heartbeats],
            [beat.step for beat, _ in heartbeats],
            [beat.interval_seconds for beat, _ in heartbeats],
            [beat.received_at for beat, _ in heartbeats],
            [first for _, first in heartbeats],
        )

    async def latest(self, run_id: str) -> list[asyncpg.Record]:
        """The stored row of every process of the run, by host then process index."""
        rows: list[asyncpg.Record] = await self._pool.fetch(
            "SELECT host, process_index, pid, step, interval_seconds, last_seen, first_seen"
            " FROM heartbeats WHERE run_id = $1 ORDER BY host, process_index",
            run_id,
        )
        return rows

    async def purge_run(self, run_id: str) -> int:
        """Remove every process's heartbeat of a run; how many."""
        status: str = await self._pool.execute("DELETE FROM heartbeats WHERE run_id = $1", run_id)
        return int(status.rsplit(" ", 1)[-1])
