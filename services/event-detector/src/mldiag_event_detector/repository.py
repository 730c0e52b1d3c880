"""All of the detector's SQL: per-series state and the applied-message ledger."""

import uuid
from collections.abc import Sequence

import asyncpg

from mldiag_event_detector.service import Outcome, Rule, WatchState, keys_of
from mldiag_platform.outbox import Outbox
from mldiag_schemas.telemetry import MetricPointsReceived


class DetectorRepository:
    """Loads, updates and stores rule state atomically with the events it opens."""

    def __init__(self, pool: asyncpg.Pool, outbox: Outbox) -> None:
        self._pool = pool
        self._outbox = outbox

    async def apply(self, messages: Sequence[MetricPointsReceived], rule: Rule) -> Outcome:
        """Apply ``rule`` to the messages not applied before, in one transaction.

        State rows are locked (FOR UPDATE), so replicas sharing the consumer serialise on a
        series instead of both opening its event.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            fresh_rows = await conn.fetch(
                "INSERT INTO applied_messages (event_id) SELECT unnest($1::uuid[])"
                " ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
                [message.event_id for message in messages],
            )
            fresh_ids = {row["event_id"] for row in fresh_rows}
            fresh = [message for message in messages if message.event_id in fresh_ids]
            if not fresh:
                return Outcome(states={}, opened=[])
            keys = sorted(keys_of(fresh))
            rows = await conn.fetch(
                "SELECT run_id, metric, last_good_step, last_good_value, open_event_id"
                " FROM metric_watch"
                " WHERE (run_id, metric) IN (SELECT * FROM unnest($1::text[], $2::text[]))"
                " ORDER BY run_id, metric FOR UPDATE",
                [key[0] for key in keys],
                [key[1] for key in keys],
            )
            states = {
                (row["run_id"], row["metric"]): WatchState(
                    row["last_good_step"],
                    row["last_good_value"],
                    str(row["open_event_id"]) if row["open_event_id"] else None,
                )
                for row in rows
            }
            outcome = rule(states, fresh)
            changed = [
                (key, state) for key, state in outcome.states.items() if states.get(key) != state
            ]
            if changed:
                await conn.executemany(
                    "INSERT INTO metric_watch"
                    " (run_id, metric, last_good_step, last_good_value, open_event_id)"
                    " VALUES ($1, $2, $3, $4, $5)"
                    " ON CONFLICT (run_id, metric) DO UPDATE SET"
                    " last_good_step = EXCLUDED.last_good_step,"
                    " last_good_value = EXCLUDED.last_good_value,"
                    " open_event_id = EXCLUDED.open_event_id",
                    [
                        (
                            key[0],
                            key[1],
                            state.last_good_step,
                            state.last_good_value,
                            uuid.UUID(state.open_event_id) if state.open_event_id else None,
                        )
                        for key, state in changed
                    ],
                )
            await self._outbox.add(conn, outcome.opened)
        return outcome
