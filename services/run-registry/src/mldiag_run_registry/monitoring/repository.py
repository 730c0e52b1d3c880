"""All SQL about a project's rule overrides."""

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from mldiag_platform.outbox import Outbox
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.monitoring import MonitoringRules


class MonitoringRepository:
    """One row of overrides per (project, location)."""

    def __init__(self, pool: asyncpg.Pool, outbox: Outbox) -> None:
        self._pool = pool
        self._outbox = outbox

    async def get_rules(self, project: str, location: str) -> MonitoringRules | None:
        """The project's overrides, if it ever set any."""
        rules = await self._pool.fetchval(
            "SELECT rules FROM monitoring_rules WHERE project = $1 AND location = $2",
            project,
            location,
        )
        return MonitoringRules.model_validate_json(rules) if rules is not None else None

    async def replace_rules(
        self,
        project: str,
        location: str,
        rules: MonitoringRules,
        now: datetime,
        announce: Sequence[Envelope],
    ) -> None:
        """Replace the project's overrides and stage ``announce``, in one transaction."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO monitoring_rules (project, location, rules, update_time)"
                " VALUES ($1, $2, $3::jsonb, $4) ON CONFLICT (project, location)"
                " DO UPDATE SET rules = EXCLUDED.rules, update_time = EXCLUDED.update_time",
                project,
                location,
                rules.model_dump_json(),
                now,
            )
            await self._outbox.add(conn, announce)
