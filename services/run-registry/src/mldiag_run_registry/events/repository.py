"""All SQL about workload events and analyses (bodies stored as JSON text: NaN needs it).

Events are a read model of the detector's event-life messages: one row per event, holding
its highest revision. Reads join the event's run (for its parent, and to hide the events of
deleted runs) and the latest analysis of the event.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from mldiag_platform.listing.filtering import Expr
from mldiag_platform.listing.sql import where_sql
from mldiag_schemas.analyses import Analysis
from mldiag_schemas.events import WorkloadEvent

# Filter fields (see events.service.FIELDS) → columns of `events e`.
_FIELD_COLUMNS = {
    "type": "e.type",
    "state": "e.state",
    "severity": "e.severity",
    "run": "e.run_id",
    "startTime": "e.start_time",
    "endTime": "e.end_time",
}

# A newer revision replaces the row; at an equal revision RESOLVED wins over OPEN (a
# detector that resolves without bumping must not be undone by the OPEN it replaces).
_UPSERT_SQL = """
INSERT INTO events AS e (event_id, run_id, type, state, severity, start_time, end_time,
                         revision, body)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[],
                     $6::timestamptz[], $7::timestamptz[], $8::int[], $9::text[])
ON CONFLICT (event_id) DO UPDATE SET
    run_id = EXCLUDED.run_id, type = EXCLUDED.type, state = EXCLUDED.state,
    severity = EXCLUDED.severity, start_time = EXCLUDED.start_time,
    end_time = EXCLUDED.end_time, revision = EXCLUDED.revision, body = EXCLUDED.body
WHERE EXCLUDED.revision > e.revision
   OR (EXCLUDED.revision = e.revision AND EXCLUDED.state = 'RESOLVED' AND e.state = 'OPEN')
RETURNING event_id
"""

_SELECT = """
SELECT e.body, r.project, r.location, a.body AS analysis
FROM events e
JOIN runs r ON r.run_id = e.run_id
LEFT JOIN LATERAL (
    SELECT x.body FROM analyses x WHERE x.event_id = e.event_id
    ORDER BY x.create_time DESC, x.analysis_id DESC LIMIT 1
) a ON true
"""


@dataclass(frozen=True)
class StoredEvent:
    """An event as stored, with its run's parent and its latest analysis."""

    event: WorkloadEvent
    project: str
    location: str
    analysis: Analysis | None


def _stored(row: asyncpg.Record) -> StoredEvent:
    analysis = row["analysis"]
    return StoredEvent(
        event=WorkloadEvent.model_validate_json(row["body"]),
        project=row["project"],
        location=row["location"],
        analysis=Analysis.model_validate_json(analysis) if analysis else None,
    )


def _sql_value(field: str, value: object) -> object:
    if field == "run" and isinstance(value, str):
        return value.rstrip("/").rsplit("/", 1)[-1]  # a run id or a run's full name
    return value


class EventsRepository:
    """Events and analyses as read models, keyed by their stable ids."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def store_events(self, events: Sequence[WorkloadEvent]) -> int:
        """Store each event unless a newer revision is stored; return how many rows changed.

        ``events`` holds at most one revision per event id (one statement cannot change a
        row twice).
        """
        if not events:
            return 0
        rows = await self._pool.fetch(
            _UPSERT_SQL,
            [event.event_id for event in events],
            [event.run_id for event in events],
            [event.type.value for event in events],
            [event.state.value for event in events],
            [event.severity.value for event in events],
            [event.start_time for event in events],
            [event.end_time for event in events],
            [event.revision for event in events],
            [event.model_dump_json() for event in events],
        )
        return len(rows)

    async def list_events(
        self,
        project: str,
        location: str,
        run_id: str | None,
        where: Expr | None,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
    ) -> list[StoredEvent]:
        """Events of live runs under the parent (of one run, if given) matching ``where``,
        newest first (start time, then event id, descending), after a keyset position."""
        params: list[object] = [project, location]
        clauses = ["r.project = $1", "r.location = $2", "r.delete_time IS NULL"]
        if run_id is not None:
            params.append(run_id)
            clauses.append(f"e.run_id = ${len(params)}")
        if where is not None:
            clauses.append(where_sql(where, params, _FIELD_COLUMNS, value=_sql_value))
        if after is not None:
            params.extend(after)
            clauses.append(f"(e.start_time, e.event_id) < (${len(params) - 1}, ${len(params)})")
        params.append(limit)
        rows = await self._pool.fetch(
            f"{_SELECT} WHERE {' AND '.join(clauses)}"
            f" ORDER BY e.start_time DESC, e.event_id DESC LIMIT ${len(params)}",
            *params,
        )
        return [_stored(row) for row in rows]

    async def get_event(
        self, project: str, location: str, run_id: str, event_id: uuid.UUID
    ) -> StoredEvent | None:
        """One event of a live run under the parent."""
        row = await self._pool.fetchrow(
            f"{_SELECT} WHERE r.project = $1 AND r.location = $2 AND r.delete_time IS NULL"
            " AND e.run_id = $3 AND e.event_id = $4",
            project,
            location,
            run_id,
            event_id,
        )
        return _stored(row) if row else None

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

    async def purge_run(self, run_id: str) -> tuple[int, int]:
        """Remove every event and analysis of a run, in one transaction; (events, analyses)
        removed. Analyses go first and also by their event, so none outlives its event."""
        async with self._pool.acquire() as conn, conn.transaction():
            analyses = await conn.execute(
                "DELETE FROM analyses WHERE run_id = $1"
                " OR event_id IN (SELECT event_id FROM events WHERE run_id = $1)",
                run_id,
            )
            events = await conn.execute("DELETE FROM events WHERE run_id = $1", run_id)
        return _count(events), _count(analyses)


def _count(status: str) -> int:
    """Rows a ``DELETE n`` status names."""
    return int(status.rsplit(" ", 1)[-1])
