"""All SQL about workload events and analyses (stored as JSON text: NaN needs it)."""

from collections.abc import Sequence

import asyncpg

from mldiag_schemas.analyses import Analysis
from mldiag_schemas.events import WorkloadEvent


class EventsRepository:
    """Events and analyses as read models, keyed by their stable ids."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def store_events(self, events: Sequence[WorkloadEvent]) -> int:
        """Store events not seen before; return how many were new."""
        rows = await self._pool.fetch(
            "INSERT INTO events (event_id, run_id, start_time, body)"
            " SELECT * FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::text[])"
            " ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
            [event.event_id for event in events],
            [event.run_id for event in events],
            [event.start_time for event in events],
            [event.model_dump_json() for event in events],
        )
        return len(rows)

    async def list_events(self, run_id: str) -> list[WorkloadEvent]:
        """A run's events, oldest first."""
        rows = await self._pool.fetch(
            "SELECT body FROM events WHERE run_id = $1 ORDER BY start_time, event_id", run_id
        )
        return [WorkloadEvent.model_validate_json(row["body"]) for row in rows]

    async def store_analyses(self, analyses: Sequence[Analysis]) -> int:
        """Store analyses not seen before; return how many were new."""
        rows = await self._pool.fetch(
            "INSERT INTO analyses (analysis_id, event_id, run_id, create_time, body)"
            " SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::timestamptz[],"
            " $5::text[]) ON CONFLICT (analysis_id) DO NOTHING RETURNING analysis_id",
            [analysis.analysis_id for analysis in analyses],
            [analysis.event_id for analysis in analyses],
            [analysis.run_id for analysis in analyses],
            [analysis.create_time for analysis in analyses],
            [analysis.model_dump_json() for analysis in analyses],
        )
        return len(rows)

    async def list_analyses(self, run_id: str) -> list[Analysis]:
        """A run's analyses, oldest first."""
        rows = await self._pool.fetch(
            "SELECT body FROM analyses WHERE run_id = $1 ORDER BY create_time, analysis_id",
            run_id,
        )
        return [Analysis.model_validate_json(row["body"]) for row in rows]
