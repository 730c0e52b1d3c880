"""Alert rules (the channels they name locked while they are stored)."""

import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from mldiag_notifier.repository.common import Table
from mldiag_schemas.alerts import AlertRule


def rule_name(project: str, location: str, rule_id: str) -> str:
    """A rule's resource name."""
    return f"projects/{project}/locations/{location}/alertRules/{rule_id}"


def _rule(row: asyncpg.Record) -> AlertRule:
    body: dict[str, Any] = json.loads(row["rule"])
    return AlertRule.model_validate(
        {
            **body,
            "name": rule_name(row["project"], row["location"], row["rule_id"]),
            "ruleId": row["rule_id"],
            "createTime": row["create_time"],
            "updateTime": row["update_time"],
        }
    )


def _rule_body(rule: AlertRule) -> str:
    return rule.model_dump_json(exclude={"name", "rule_id", "create_time", "update_time"})


class RulesTable(Table):
    """Rules of a project and location."""

    async def _missing_channels(
        self, conn: asyncpg.Connection, project: str, location: str, channels: Sequence[str]
    ) -> list[str]:
        # FOR SHARE: a named channel cannot be deleted before this transaction ends.
        rows = await conn.fetch(
            """SELECT channel_id FROM channels WHERE project = $1 AND location = $2
                   AND channel_id = ANY($3::text[]) FOR SHARE""",
            project,
            location,
            list(channels),
        )
        found = {row["channel_id"] for row in rows}
        return [channel for channel in channels if channel not in found]

    async def insert_rule(
        self, project: str, location: str, rule: AlertRule
    ) -> tuple[AlertRule | None, list[str]]:
        """Store a new rule: (the rule, []), (None, missing channels), or (None, []) when
        its id is taken."""
        async with self._pool.acquire() as conn, conn.transaction():
            missing = await self._missing_channels(conn, project, location, rule.channels)
            if missing:
                return None, missing
            try:
                row = await conn.fetchrow(
                    """INSERT INTO rules (project, location, rule_id, rule, channels, enabled)
                       VALUES ($1, $2, $3, $4, $5, $6)
                       ON CONFLICT DO NOTHING RETURNING *""",
                    project,
                    location,
                    rule.rule_id,
                    _rule_body(rule),
                    rule.channels,
                    rule.enabled,
                )
            except asyncpg.UniqueViolationError:  # pragma: no cover - ON CONFLICT covers it
                row = None
            return (_rule(row) if row else None), []

    async def rule(self, project: str, location: str, rule_id: str) -> AlertRule | None:
        """One rule, or None."""
        row = await self._pool.fetchrow(
            "SELECT * FROM rules WHERE project = $1 AND location = $2 AND rule_id = $3",
            project,
            location,
            rule_id,
        )
        return _rule(row) if row else None

    async def rules(
        self, project: str, location: str, size: int | None = None, after: str | None = None
    ) -> list[AlertRule]:
        """Rules by id (every one without ``size``), after the id ``after``."""
        rows = await self._pool.fetch(
            """SELECT * FROM rules WHERE project = $1 AND location = $2
                   AND ($3::text IS NULL OR rule_id > $3)
               ORDER BY rule_id LIMIT $4""",
            project,
            location,
            after,
            size,
        )
        return [_rule(row) for row in rows]

    async def update_rule(
        self, project: str, location: str, rule: AlertRule
    ) -> tuple[AlertRule | None, list[str]]:
        """Replace a rule: (the rule, []), (None, missing channels) or (None, []) when gone."""
        async with self._pool.acquire() as conn, conn.transaction():
            missing = await self._missing_channels(conn, project, location, rule.channels)
            if missing:
                return None, missing
            row = await conn.fetchrow(
                """UPDATE rules SET rule = $4, channels = $5, enabled = $6, update_time = now()
                   WHERE project = $1 AND location = $2 AND rule_id = $3 RETURNING *""",
                project,
                location,
                rule.rule_id,
                _rule_body(rule),
                rule.channels,
                rule.enabled,
            )
            return (_rule(row) if row else None), []

    async def delete_rule(self, project: str, location: str, rule_id: str) -> bool:
        """Delete a rule; whether it was there."""
        status = await self._pool.execute(
            "DELETE FROM rules WHERE project = $1 AND location = $2 AND rule_id = $3",
            project,
            location,
            rule_id,
        )
        return str(status).endswith(" 1")
