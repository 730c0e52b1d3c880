"""Share links: create, list, revoke, and recognise the callers that hold one.

A token is checked in this order: its signature (a forged or altered token costs no
lookup), its expiry (carried in the token), then its link's row, so a revocation takes effect
on the very next call, on every replica.
"""

import secrets
from datetime import UTC, datetime, timedelta

import structlog

from mldiag_platform.auth import Principal
from mldiag_run_registry.events.service import EventsService
from mldiag_run_registry.profiles.service import ProfilesService
from mldiag_run_registry.runs.service import RunService
from mldiag_run_registry.shares.errors import ShareLinkExpired, ShareLinkNotFound, ShareLinkRevoked
from mldiag_run_registry.shares.repository import ShareLinkRow, ShareLinksRepository
from mldiag_run_registry.shares.scope import SharedResource, ShareScope, parse_resource
from mldiag_run_registry.shares.signing import SignedClaims, sign, verify
from mldiag_schemas.auth import Role
from mldiag_schemas.sharing import (
    CreatedShareLink,
    CreateShareLinkRequest,
    ListShareLinksResponse,
    ShareLink,
    ShareLinkState,
    ShareScopeKind,
)

log = structlog.get_logger(__name__)

CONSOLE_SHARE_PATH = "/console/#/share/"
"""Where the console opens a share token (after the ``#``, so it never reaches a server log)."""


def _state(row: ShareLinkRow, now: datetime) -> ShareLinkState:
    if row.revoke_time is not None:
        return ShareLinkState.REVOKED
    if row.expire_time <= now:
        return ShareLinkState.EXPIRED
    return ShareLinkState.ACTIVE


def view(row: ShareLinkRow, now: datetime | None = None) -> ShareLink:
    """A stored link as the API shows it."""
    return ShareLink(
        name=f"projects/{row.project}/locations/{row.location}/shareLinks/{row.link_id}",
        link_id=row.link_id,
        resource=row.resource,
        kind=row.kind,
        run_id=row.run_id,
        event_id=row.event_id,
        session_id=row.session_id,
        display_name=row.display_name,
        state=_state(row, now or datetime.now(UTC)),
        created_by=row.created_by,
        create_time=row.create_time,
        expire_time=row.expire_time,
        revoke_time=row.revoke_time,
    )


def _shared(row: ShareLinkRow) -> SharedResource:
    return SharedResource(
        row.project, row.location, row.kind, row.run_id, row.event_id, row.session_id
    )


class ShareLinksService:
    """The share-link use cases."""

    def __init__(
        self,
        repository: ShareLinksRepository,
        runs: RunService,
        events: EventsService,
        profiles: ProfilesService,
        signing_key: bytes | None = None,
    ) -> None:
        self._repository = repository
        self._runs = runs
        self._events = events
        self._profiles = profiles
        self._key = signing_key

    async def start(self) -> None:
        """Load the signing key: the operator's, else the one stored for every replica."""
        if self._key is None:
            self._key = await self._repository.signing_key()

    @property
    def _signing_key(self) -> bytes:
        if self._key is None:
            raise RuntimeError("ShareLinksService.start() was not awaited")
        return self._key

    async def create(
        self,
        project: str,
        location: str,
        request: CreateShareLinkRequest,
        created_by: str,
        base_url: str,
    ) -> CreatedShareLink:
        """A new link to an existing resource; the answer is the only place its token is."""
        shared = parse_resource(request.resource, project, location)
        await self._check_exists(shared)
        now = datetime.now(UTC).replace(microsecond=0)
        row = ShareLinkRow(
            link_id=f"share-{secrets.token_hex(6)}",
            project=shared.project,
            location=shared.location,
            resource=shared.name,
            kind=shared.kind,
            run_id=shared.run_id,
            event_id=shared.event_id,
            session_id=shared.session_id,
            display_name=request.display_name,
            created_by=created_by,
            create_time=now,
            expire_time=now + timedelta(seconds=request.ttl_seconds),
            revoke_time=None,
        )
        await self._repository.insert(row)
        token = sign(self._signing_key, SignedClaims(row.link_id, row.resource, row.expire_time))
        log.info(
            "share_link.created",
            link_id=row.link_id,
            resource=row.resource,
            created_by=created_by,
            expire_time=row.expire_time.isoformat(),
        )
        return CreatedShareLink(
            share_link=view(row, now),
            token=token,
            url=base_url.rstrip("/") + CONSOLE_SHARE_PATH + token,
        )

    async def _check_exists(self, shared: SharedResource) -> None:
        """404 (the resource's own code) unless what is shared exists."""
        project, location, run_id = shared.project, shared.location, shared.run_id
        match shared.kind:
            case ShareScopeKind.RUN:
                await self._runs.get_run(project, location, run_id)
            case ShareScopeKind.EVENT:
                await self._events.get_event(project, location, run_id, str(shared.event_id))
            case ShareScopeKind.PROFILER_SESSION:
                await self._profiles.get_session(project, location, run_id, shared.session_id or "")

    async def list(
        self, project: str, location: str, resource: str | None
    ) -> ListShareLinksResponse:
        """A parent's links, or one resource's, newest first."""
        name = parse_resource(resource, project, location).name if resource else None
        now = datetime.now(UTC)
        rows = await self._repository.list(project, location, name)
        return ListShareLinksResponse(share_links=[view(row, now) for row in rows])

    async def revoke(self, project: str, location: str, link_id: str) -> ShareLink:
        """Revoke a link: it stops working on the next call (revoking twice answers the same)."""
        row = await self._repository.revoke(project, location, link_id, datetime.now(UTC))
        if row is None:
            raise ShareLinkNotFound(f"there is no share link {link_id!r}")
        log.info("share_link.revoked", link_id=link_id, resource=row.resource)
        return view(row)

    async def authenticate(self, token: str) -> tuple[Principal, ShareLink]:
        """The caller a share token stands for, held to its resource, and its link."""
        claims = verify(self._signing_key, token)
        now = datetime.now(UTC)
        if claims.expire_time <= now:
            raise ShareLinkExpired(f"the share link expired at {claims.expire_time.isoformat()}")
        row = await self._repository.get(claims.link_id)
        if row is None or row.resource != claims.resource:
            raise ShareLinkRevoked("the share link no longer exists")
        if row.revoke_time is not None:
            raise ShareLinkRevoked(f"the share link was revoked at {row.revoke_time.isoformat()}")
        principal = Principal(row.link_id, Role.VIEWER, ShareScope(_shared(row)))
        return principal, view(row, now)

    async def link(self, link_id: str) -> ShareLink:
        """One link by id, whatever its parent (the caller holding it asks)."""
        row = await self._repository.get(link_id)
        if row is None:
            raise ShareLinkNotFound(f"there is no share link {link_id!r}")
        return view(row)
