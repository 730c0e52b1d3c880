"""All SQL about share links and their signing key."""

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from mldiag_schemas.sharing import ShareScopeKind

_KEY_ID = 1
_KEY_BYTES = 32


@dataclass(frozen=True)
class ShareLinkRow:
    """A stored share link (never its token)."""

    link_id: str
    project: str
    location: str
    resource: str
    kind: ShareScopeKind
    run_id: str
    event_id: uuid.UUID | None
    session_id: str | None
    display_name: str
    created_by: str
    create_time: datetime
    expire_time: datetime
    revoke_time: datetime | None


_COLUMNS = (
    "link_id, project, location, resource, kind, run_id, event_id, session_id, display_name,"
    " created_by, create_time, expire_time, revoke_time"
)


def _row(record: asyncpg.Record) -> ShareLinkRow:
    return ShareLinkRow(**{**dict(record), "kind": ShareScopeKind(record["kind"])})


class ShareLinksRepository:
    """Share links by id and by resource."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def signing_key(self) -> bytes:
        """The key every replica signs with: made once, by whichever replica asks first."""
        await self._pool.execute(
            "INSERT INTO share_link_keys (key_id, secret) VALUES ($1, $2)"
            " ON CONFLICT (key_id) DO NOTHING",
            _KEY_ID,
            secrets.token_bytes(_KEY_BYTES),
        )
        key: bytes = await self._pool.fetchval(
            "SELECT secret FROM share_link_keys WHERE key_id = $1", _KEY_ID
        )
        return key

    async def insert(self, link: ShareLinkRow) -> None:
        """Store a new link."""
        await self._pool.execute(
            f"INSERT INTO share_links ({_COLUMNS})"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            link.link_id,
            link.project,
            link.location,
            link.resource,
            link.kind.value,
            link.run_id,
            link.event_id,
            link.session_id,
            link.display_name,
            link.created_by,
            link.create_time,
            link.expire_time,
            link.revoke_time,
        )

    async def get(self, link_id: str) -> ShareLinkRow | None:
        """One link."""
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM share_links WHERE link_id = $1", link_id
        )
        return _row(row) if row is not None else None

    async def list(self, project: str, location: str, resource: str | None) -> list[ShareLinkRow]:
        """The links of a parent, or of one resource, newest first."""
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS} FROM share_links WHERE project = $1 AND location = $2"
            " AND ($3::text IS NULL OR resource = $3) ORDER BY create_time DESC, link_id",
            project,
            location,
            resource,
        )
        return [_row(row) for row in rows]

    async def revoke(
        self, project: str, location: str, link_id: str, when: datetime
    ) -> ShareLinkRow | None:
        """Mark a link revoked (keeping the first revoke time); None if there is none."""
        row = await self._pool.fetchrow(
            "UPDATE share_links SET revoke_time = COALESCE(revoke_time, $4)"
            f" WHERE project = $1 AND location = $2 AND link_id = $3 RETURNING {_COLUMNS}",
            project,
            location,
            link_id,
            when,
        )
        return _row(row) if row is not None else None
