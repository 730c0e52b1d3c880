"""All of the detector's SQL: run states, the applied-message ledger, project rules."""

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

import asyncpg

from mldiag_event_detector.service import ClockFold, Fold, Folded
from mldiag_event_detector.state import RunState
from mldiag_platform.outbox import Outbox
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.monitoring import MonitoringRules, MonitoringRulesChanged

LEDGER_RETENTION = timedelta(days=8)
"""Longer than the streams keep messages (7 days), so no redelivery outlives its entry."""


class DetectorRepository:
    """Loads, folds and stores run states atomically with the events they produce.

    A run's row is locked (FOR UPDATE, runs in id order so two batches never deadlock) while
    its messages are folded: replicas sharing the consumers split the work by run and never
    fold one run's messages concurrently.
    """

    def __init__(self, pool: asyncpg.Pool, outbox: Outbox) -> None:
        self._pool = pool
        self._outbox = outbox

    async def apply(
        self, messages: dict[str, list[tuple[uuid.UUID, Envelope]]], fold: Fold
    ) -> list[Envelope]:
        """Fold each run's messages not applied before, in one transaction."""
        ids = [key for items in messages.values() for key, _ in items]
        async with self._pool.acquire() as conn, conn.transaction():
            fresh_rows = await conn.fetch(
                "INSERT INTO applied_messages (event_id) SELECT unnest($1::uuid[])"
                " ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
                ids,
            )
            fresh = {row["event_id"] for row in fresh_rows}
            todo: dict[str, list[Envelope]] = {}
            for run_id, items in sorted(messages.items()):
                for key, message in items:
                    # A key can come twice in one batch (a write republished under a new
                    # envelope id lands beside its original): the first one is applied.
                    if key in fresh:
                        fresh.remove(key)
                        todo.setdefault(run_id, []).append(message)
            if not todo:
                return []
            states = await self._lock(conn, sorted(todo))
            projects = await self._project_rules(conn, states.values())
            folded = {
                run_id: fold(states[run_id], projects.get(_project(states[run_id]), _NONE), items)
                for run_id, items in todo.items()
            }
            return await self._save(conn, states, folded)

    async def apply_clock(self, now: datetime, fold: ClockFold, limit: int) -> list[Envelope]:
        """Fold the clock into runs whose next check is due (SKIP LOCKED: busy runs wait)."""
        async with self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                "SELECT run_id, state FROM run_state WHERE next_check_at <= $1"
                " ORDER BY next_check_at LIMIT $2 FOR UPDATE SKIP LOCKED",
                now,
                limit,
            )
            if not rows:
                return []
            states = {row["run_id"]: RunState.model_validate_json(row["state"]) for row in rows}
            projects = await self._project_rules(conn, states.values())
            folded = {
                run_id: fold(state, projects.get(_project(state), _NONE), now)
                for run_id, state in states.items()
            }
            return await self._save(conn, states, folded)

    async def forget_old_messages(self, now: datetime) -> int:
        """Drop ledger entries older than any stream could redeliver."""
        result: str = await self._pool.execute(
            "DELETE FROM applied_messages WHERE applied_at < $1", now - LEDGER_RETENTION
        )
        return int(result.rsplit(maxsplit=1)[-1])

    async def save_project_rules(self, change: MonitoringRulesChanged) -> None:
        """Keep a project's overrides (the latest message wins)."""
        await self._pool.execute(
            "INSERT INTO project_rules (project, location, rules) VALUES ($1, $2, $3)"
            " ON CONFLICT (project, location) DO UPDATE SET rules = EXCLUDED.rules",
            change.project,
            change.location,
            change.rules.model_dump_json(),
        )

    async def _lock(self, conn: asyncpg.Connection, run_ids: list[str]) -> dict[str, RunState]:
        await conn.execute(
            "INSERT INTO run_state (run_id, state) SELECT r, s"
            " FROM unnest($1::text[], $2::text[]) AS t(r, s) ORDER BY r"
            " ON CONFLICT (run_id) DO NOTHING",
            run_ids,
            [RunState(run_id=run_id).model_dump_json() for run_id in run_ids],
        )
        rows = await conn.fetch(
            "SELECT run_id, state FROM run_state WHERE run_id = ANY($1::text[])"
            " ORDER BY run_id FOR UPDATE",
            run_ids,
        )
        return {row["run_id"]: RunState.model_validate_json(row["state"]) for row in rows}

    async def _project_rules(
        self, conn: asyncpg.Connection, states: Iterable[RunState]
    ) -> dict[tuple[str, str], MonitoringRules]:
        wanted = sorted({_project(state) for state in states if state.project})
        if not wanted:
            return {}
        rows = await conn.fetch(
            "SELECT project, location, rules FROM project_rules"
            " WHERE (project, location) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
            [project for project, _ in wanted],
            [location for _, location in wanted],
        )
        return {
            (row["project"], row["location"]): MonitoringRules.model_validate_json(row["rules"])
            for row in rows
        }

    async def _save(
        self, conn: asyncpg.Connection, states: dict[str, RunState], folded: dict[str, Folded]
    ) -> list[Envelope]:
        run_ids = sorted(folded)
        await conn.execute(
            "UPDATE run_state SET state = t.s, next_check_at = t.n, updated_at = now()"
            " FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS t(r, s, n)"
            " WHERE run_state.run_id = t.r",
            run_ids,
            [states[run_id].model_dump_json() for run_id in run_ids],
            [folded[run_id].next_check_at for run_id in run_ids],
        )
        changes = [message for run_id in run_ids for message in folded[run_id].messages]
        await self._outbox.add(conn, changes)
        return changes


_NONE = MonitoringRules()


def _project(state: RunState) -> tuple[str, str]:
    return (state.project, state.location)
