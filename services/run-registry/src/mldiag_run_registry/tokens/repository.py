"""All SQL about API tokens."""

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from mldiag_schemas.auth import Role


@dataclass(frozen=True)
class TokenRow:
    """A stored token (its hash, never its secret)."""

    token_id: str
    secret_hash: str
    secret_prefix: str
    display_name: str
    role: Role
    create_time: datetime
    expire_time: datetime | None
    revoke_time: datetime | None


_COLUMNS = (
    "token_id, secret_hash, secret_prefix, display_name, role, create_time, expire_time,"
    " revoke_time"
)


def _row(record: asyncpg.Record) -> TokenRow:
    return TokenRow(**{**dict(record), "role": Role(record["role"])})


def _values(token: TokenRow) -> tuple[object, ...]:
    return (
        token.token_id,
        token.secret_hash,
        token.secret_prefix,
        token.display_name,
        token.role.value,
        token.create_time,
        token.expire_time,
        token.revoke_time,
    )


class TokenRepository:
    """Tokens by id."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def insert(self, token: TokenRow) -> None:
        """Store a new token."""
        await self._pool.execute(
            f"INSERT INTO api_tokens ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            *_values(token),
        )

    async def upsert_bootstrap(self, token: TokenRow) -> None:
        """Store the operator's bootstrap token, replacing its secret if it changed."""
        await self._pool.execute(
            f"INSERT INTO api_tokens ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
            " ON CONFLICT (token_id) DO UPDATE SET secret_hash = EXCLUDED.secret_hash,"
            " secret_prefix = EXCLUDED.secret_prefix, role = EXCLUDED.role, revoke_time = NULL",
            *_values(token),
        )

    async def list_all(self) -> list[TokenRow]:
        """Every token, newest first."""
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS} FROM api_tokens ORDER BY create_time DESC, token_id"
        )
        return [_row(row) for row in rows]

    async def revoke(self, token_id: str, when: datetime) -> TokenRow | None:
        """Mark a token revoked (keeping the first revoke time); None if there is none."""
        row = await self._pool.fetchrow(
            "UPDATE api_tokens SET revoke_time = COALESCE(revoke_time, $2) WHERE token_id = $1"
            f" RETURNING {_COLUMNS}",
            token_id,
            when,
        )
        return _row(row) if row is not None else None
