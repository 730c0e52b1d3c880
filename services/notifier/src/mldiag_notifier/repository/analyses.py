"""Each event's latest analysis: its top cause and time lost."""

import uuid
from datetime import datetime

from mldiag_notifier.repository.common import Table, lock_event
from mldiag_schemas.alerts import TopCause


class AnalysesTable(Table):
    """Analyses, one row per event."""

    async def save_analysis(
        self,
        event_id: uuid.UUID,
        top_cause: TopCause | None,
        time_lost_seconds: float,
        create_time: datetime,
    ) -> int:
        """Keep an event's latest top cause (a re-analysis replaces it; an older analysis
        redelivered late does not); make its waiting OPENED deliveries due now. Returns how
        many were waiting."""
        async with self._pool.acquire() as conn, conn.transaction():
            await lock_event(conn, event_id)
            await conn.execute(
                """INSERT INTO analyses (event_id, top_cause, time_lost_seconds, create_time)
                   VALUES ($1, $2, $3, $4)
                   ON CONFLICT (event_id) DO UPDATE SET top_cause = EXCLUDED.top_cause,
                       time_lost_seconds = EXCLUDED.time_lost_seconds,
                       create_time = EXCLUDED.create_time
                   WHERE analyses.create_time <= EXCLUDED.create_time""",
                event_id,
                top_cause.model_dump_json() if top_cause else None,
                time_lost_seconds,
                create_time,
            )
            status = await conn.execute(
                """UPDATE deliveries SET next_attempt_time = now()
                   WHERE event_id = $1 AND kind = 'OPENED' AND state = 'PENDING'
                       AND attempts = 0 AND next_attempt_time > now()""",
                event_id,
            )
        return int(str(status).rsplit(" ", 1)[-1])

    async def analysis(self, event_id: uuid.UUID) -> tuple[TopCause | None, float] | None:
        """An event's top cause and time lost, None before its analysis came."""
        row = await self._pool.fetchrow(
            "SELECT top_cause, time_lost_seconds FROM analyses WHERE event_id = $1", event_id
        )
        if row is None:
            return None
        cause = TopCause.model_validate_json(row["top_cause"]) if row["top_cause"] else None
        return cause, float(row["time_lost_seconds"])
