"""The registry's token check: API tokens through the bus's directory, share tokens here."""

from mldiag_platform.auth import Principal, TokenDirectory, secret_from_authorization
from mldiag_run_registry.shares.service import ShareLinksService
from mldiag_run_registry.shares.signing import is_share_token
from mldiag_schemas.auth import Permission


class SharingAuthorizer:
    """Recognises both kinds of bearer: an API token, or a share link's signed token."""

    def __init__(self, directory: TokenDirectory, shares: ShareLinksService) -> None:
        self._directory = directory
        self._shares = shares

    async def identify(self, authorization: str | None) -> Principal:
        """The caller behind an ``Authorization`` header, or ``unauthenticated``."""
        secret = secret_from_authorization(authorization)
        if secret is not None and is_share_token(secret):
            principal, _link = await self._shares.authenticate(secret)
            return principal
        return await self._directory.authenticate(secret)

    async def authorize(self, authorization: str | None, permission: Permission) -> Principal:
        """The caller behind an ``Authorization`` header, if it holds ``permission``."""
        principal = await self.identify(authorization)
        principal.require(permission)
        return principal
