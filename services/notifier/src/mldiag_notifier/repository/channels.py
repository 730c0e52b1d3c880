"""Notification channels (their secrets sealed: stored as bytes, never read back here)."""

import json
from dataclasses import dataclass

import asyncpg

from mldiag_notifier.repository.common import Table
from mldiag_schemas.alerts import ChannelKind, NotificationChannel


def channel_name(project: str, location: str, channel_id: str) -> str:
    """A channel's resource name."""
    return f"projects/{project}/locations/{location}/notificationChannels/{channel_id}"


@dataclass(frozen=True)
class StoredChannel:
    """A channel as stored: its resource (secrets empty) and its sealed secrets."""

    channel: NotificationChannel
    sealed: bytes


def _channel(row: asyncpg.Record) -> StoredChannel:
    channel = NotificationChannel(
        name=channel_name(row["project"], row["location"], row["channel_id"]),
        channel_id=row["channel_id"],
        display_name=row["display_name"],
        kind=ChannelKind(row["kind"]),
        config=json.loads(row["config"]),
        secret_keys=list(row["secret_keys"]),
        enabled=row["enabled"],
        create_time=row["create_time"],
        update_time=row["update_time"],
    )
    return StoredChannel(channel, bytes(row["secrets"]))


class ChannelsTable(Table):
    """Channels of a project and location."""

    async def insert_channel(
        self, project: str, location: str, channel: NotificationChannel, sealed: bytes
    ) -> StoredChannel | None:
        """Store a new channel; None when its id is taken."""
        try:
            row = await self._pool.fetchrow(
                """INSERT INTO channels (project, location, channel_id, display_name, kind,
                       config, secrets, secret_keys, enabled)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING *""",
                project,
                location,
                channel.channel_id,
                channel.display_name,
                channel.kind.value,
                json.dumps(channel.config),
                sealed,
                sorted(channel.secrets),
                channel.enabled,
            )
        except asyncpg.UniqueViolationError:
            return None
        return _channel(row)

    async def channel(self, project: str, location: str, channel_id: str) -> StoredChannel | None:
        """One channel, or None."""
        row = await self._pool.fetchrow(
            "SELECT * FROM channels WHERE project = $1 AND location = $2 AND channel_id = $3",
            project,
            location,
            channel_id,
        )
        return _channel(row) if row else None

    async def channels(
        self, project: str, location: str, size: int, after: str | None
    ) -> list[StoredChannel]:
        """Up to ``size`` channels by id, after the id ``after``."""
        rows = await self._pool.fetch(
            """SELECT * FROM channels WHERE project = $1 AND location = $2
                   AND ($3::text IS NULL OR channel_id > $3)
               ORDER BY channel_id LIMIT $4""",
            project,
            location,
            after,
            size,
        )
        return [_channel(row) for row in rows]

    async def update_channel(
        self, project: str, location: str, channel: NotificationChannel, sealed: bytes
    ) -> StoredChannel | None:
        """Replace a channel's changeable fields; None when it is gone."""
        row = await self._pool.fetchrow(
            """UPDATE channels SET display_name = $4, config = $5, secrets = $6,
                   secret_keys = $7, enabled = $8, update_time = now()
               WHERE project = $1 AND location = $2 AND channel_id = $3 RETURNING *""",
            project,
            location,
            channel.channel_id,
            channel.display_name,
            json.dumps(channel.config),
            sealed,
            sorted(channel.secret_keys),
            channel.enabled,
        )
        return _channel(row) if row else None

    async def delete_channel(
        self, project: str, location: str, channel_id: str
    ) -> tuple[bool, list[str]]:
        """Delete a channel no rule names: (deleted, the rules naming it)."""
        async with self._pool.acquire() as conn, conn.transaction():
            # Locked first, so a rule naming it cannot be created between check and delete.
            found = await conn.fetchval(
                """SELECT true FROM channels WHERE project = $1 AND location = $2
                       AND channel_id = $3 FOR UPDATE""",
                project,
                location,
                channel_id,
            )
            if not found:
                return False, []
            users = await conn.fetch(
                """SELECT rule_id FROM rules WHERE project = $1 AND location = $2
                       AND channels @> ARRAY[$3]::text[] ORDER BY rule_id""",
                project,
                location,
                channel_id,
            )
            if users:
                return False, [row["rule_id"] for row in users]
            await conn.execute(
                "DELETE FROM channels WHERE project = $1 AND location = $2 AND channel_id = $3",
                project,
                location,
                channel_id,
            )
            return True, []
