"""API tokens: create, list, revoke, and keep the bus's token directory in step.

PostgreSQL is the record; the directory is what every service checks. A token is granted in
the directory before its row is stored (a failed insert leaves a grant for a secret nobody
was given), and revoked there after (a failed delete is retried by revoking again, or by the
sync at the next start).
"""

import secrets
from datetime import UTC, datetime, timedelta

import structlog

from mldiag_platform.auth import TokenDirectory, new_secret, secret_hash
from mldiag_platform.errors import InvalidArgument
from mldiag_run_registry.tokens.errors import TokenNotFound
from mldiag_run_registry.tokens.repository import TokenRepository, TokenRow
from mldiag_schemas.auth import (
    ApiToken,
    CreatedToken,
    CreateTokenRequest,
    ListTokensResponse,
    Role,
    TokenGrant,
    TokenState,
)

log = structlog.get_logger(__name__)

BOOTSTRAP_TOKEN_ID = "bootstrap"  # noqa: S105  # an id, not a secret
"""The admin token an operator configures (``mldiag up`` writes one into MLDIAG_HOME)."""

_PREFIX_SHOWN = 12

MAX_TTL_SECONDS = 100 * 365 * 24 * 3600
"""A century: longer is "never" (leave ``ttlSeconds`` out), and an expiry past year 9999
cannot be stored."""


def _state(row: TokenRow, now: datetime) -> TokenState:
    if row.revoke_time is not None:
        return TokenState.REVOKED
    if row.expire_time is not None and row.expire_time <= now:
        return TokenState.EXPIRED
    return TokenState.ACTIVE


def _view(row: TokenRow, now: datetime) -> ApiToken:
    return ApiToken(
        name=f"apiTokens/{row.token_id}",
        token_id=row.token_id,
        display_name=row.display_name,
        role=row.role,
        state=_state(row, now),
        secret_prefix=row.secret_prefix,
        create_time=row.create_time,
        expire_time=row.expire_time,
        revoke_time=row.revoke_time,
    )


def _grant(row: TokenRow) -> TokenGrant:
    return TokenGrant(token_id=row.token_id, role=row.role, expire_time=row.expire_time)


class TokenService:
    """The token use cases."""

    def __init__(self, repository: TokenRepository, directory: TokenDirectory) -> None:
        self._repository = repository
        self._directory = directory

    async def bootstrap(self, secret: str) -> None:
        """Install the operator's admin token (its secret may have changed since last start)."""
        row = TokenRow(
            token_id=BOOTSTRAP_TOKEN_ID,
            secret_hash=secret_hash(secret),
            secret_prefix=secret[:_PREFIX_SHOWN],
            display_name="bootstrap admin token",
            role=Role.ADMIN,
            create_time=datetime.now(UTC),
            expire_time=None,
            revoke_time=None,
        )
        await self._directory.grant(row.secret_hash, _grant(row))
        await self._repository.upsert_bootstrap(row)

    async def sync(self) -> int:
        """Put every usable token in the directory and take every other one out; answers
        how many are usable.
        """
        now = datetime.now(UTC)
        rows = await self._repository.list_all()
        granted = 0
        for row in rows:
            if _state(row, now) is TokenState.ACTIVE:
                await self._directory.grant(row.secret_hash, _grant(row))
                granted += 1
            else:
                await self._directory.revoke(row.secret_hash)
        log.info("auth.tokens.synced", granted=granted, unusable=len(rows) - granted)
        return granted

    async def create(self, request: CreateTokenRequest) -> CreatedToken:
        """A new token; the answer is the only place its secret ever appears."""
        ttl = request.ttl_seconds
        if ttl is not None and ttl > MAX_TTL_SECONDS:
            raise InvalidArgument(
                f"ttlSeconds must be at most {MAX_TTL_SECONDS} (a century); omit it for never",
                details=[{"field": "ttlSeconds", "problem": "out of range"}],
            )
        now = datetime.now(UTC)
        secret = new_secret()
        expire = now + timedelta(seconds=request.ttl_seconds) if request.ttl_seconds else None
        row = TokenRow(
            token_id=f"tok-{secrets.token_hex(6)}",
            secret_hash=secret_hash(secret),
            secret_prefix=secret[:_PREFIX_SHOWN],
            display_name=request.display_name,
            role=request.role,
            create_time=now,
            expire_time=expire,
            revoke_time=None,
        )
        await self._directory.grant(row.secret_hash, _grant(row))
        await self._repository.insert(row)
        log.info("auth.token.created", token_id=row.token_id, role=row.role.value)
        return CreatedToken(token=_view(row, now), secret=secret)

    async def list(self) -> ListTokensResponse:
        """Every token, newest first, revoked and expired included."""
        now = datetime.now(UTC)
        return ListTokensResponse(
            api_tokens=[_view(row, now) for row in await self._repository.list_all()]
        )

    async def revoke(self, token_id: str) -> ApiToken:
        """Revoke a token everywhere (revoking twice answers the same)."""
        now = datetime.now(UTC)
        row = await self._repository.revoke(token_id, now)
        if row is None:
            raise TokenNotFound(f"there is no API token {token_id!r}")
        await self._directory.revoke(row.secret_hash)
        log.info("auth.token.revoked", token_id=token_id)
        return _view(row, now)
