"""Authenticating and authorising API calls with tokens, in any service that has endpoints.

A token's secret is random (256 bits), so a plain SHA-256 of it is a safe thing to store and
look up: there is nothing to brute-force that a slow hash would protect. run-registry owns
the tokens (PostgreSQL) and mirrors every usable one into a JetStream key-value bucket, the
*token directory*, keyed by that hash. Every service keeps the directory in memory through a
watch, so checking a request costs a dict lookup, ingestion keeps accepting while the
registry is down, and a revocation reaches every replica within milliseconds.

A grant may be held to one run (``TokenGrant.run_id``: the token a training job's replicas
get). Its caller holds the role's permissions that concern a run (read it, update it, write
its metrics and configs, its profiler sessions and targets, read its job) and is admitted
only by routes that name that run in their path (``{run_id}``, or ``{job_id}``: a job's id
is its run's). Anything else — listing, another run, a route about no run — is
``permission_denied``. Routes whose body names the runs (OTLP) opt in with
``requires(..., runs_in_body=True)`` and check each run with :meth:`Principal.admit_run`.
"""

import asyncio
import base64
import hashlib
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from fastapi import Depends, Request
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from mldiag_platform.bus import Bus
from mldiag_platform.errors import PermissionDenied, Unauthenticated
from mldiag_schemas.auth import Permission, Role, TokenGrant
from mldiag_schemas.bus import TOKEN_DIRECTORY_BUCKET

log = structlog.get_logger(__name__)

SECRET_PREFIX = "mldiag_"  # noqa: S105  # a marker, not a secret
"""Every secret starts with this, so a leaked one is recognisable (and scannable)."""


class TokenDirectoryTampered(RuntimeError):
    """The token directory's bucket is not shaped as mldiag creates it."""


def new_secret() -> str:
    """A fresh token secret."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    """The key a secret is stored and looked up under."""
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_from_authorization(header: str | None) -> str | None:
    """The secret in an ``Authorization`` header: ``Bearer <secret>``, or HTTP Basic with the
    secret as password (``http://user:SECRET@host`` in a base URL) or as user with no password.
    """
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return value or None
    if scheme.lower() == "basic":
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8 inside
            raise Unauthenticated("the Basic credentials are not valid base64") from None
        return password or user or None
    raise Unauthenticated(f"unsupported Authorization scheme {scheme!r}: use Bearer or Basic")


class Scope(Protocol):
    """What a caller restricted to part of the API (a share link, a run) may reach."""

    @property
    def permissions(self) -> frozenset[Permission]:
        """The permissions the caller holds, whatever its role."""
        ...

    def admit(self, permission: Permission, request: Request) -> None:
        """Raise ``permission_denied`` unless ``request`` stays inside the scope."""
        ...


RUN_SCOPED_PERMISSIONS = frozenset(
    {
        Permission.RUNS_GET,
        Permission.RUNS_UPDATE,
        Permission.METRICS_WRITE,
        Permission.CONFIGS_WRITE,
        Permission.PROFILER_SESSIONS_CREATE,
        Permission.PROFILER_SESSIONS_GET,
        Permission.PROFILER_SESSIONS_LIST,
        Permission.PROFILER_TARGETS_CREATE,
        Permission.PROFILER_TARGETS_LIST,
        Permission.CUSTOM_JOBS_GET,
    }
)
"""The most a token held to one run can do (less if its role grants less): read and write
that run. Creating, deleting and listing runs, operations, tokens, share links and XProf
instances are about more than one run and stay closed."""

RUN_PATH_PARAMETERS = ("run_id", "job_id")
"""Path parameters that name a run (a custom job's id is its run's id)."""


@dataclass(frozen=True)
class RunScope:
    """Holds a token to one run (``TokenGrant.run_id``)."""

    run_id: str
    role: Role

    @property
    def permissions(self) -> frozenset[Permission]:
        """The role's permissions that concern one run."""
        return self.role.permissions & RUN_SCOPED_PERMISSIONS

    def admit(self, permission: Permission, request: Request) -> None:
        """Raise ``permission_denied`` unless the request's path names this run."""
        named = [
            request.path_params[name] for name in RUN_PATH_PARAMETERS if name in request.path_params
        ]
        if not named:
            raise PermissionDenied(
                f"this token is held to run {self.run_id}: {permission.value} on"
                f" {request.url.path} names no run",
                details=[{"run": self.run_id, "path": request.url.path}],
            )
        for other in named:
            self.admit_run(other)

    def admit_run(self, run_id: str) -> None:
        """Raise ``permission_denied`` unless ``run_id`` is this run."""
        if run_id != self.run_id:
            raise PermissionDenied(
                f"this token is held to run {self.run_id}: run {run_id[:80]!r} is not its run",
                details=[{"run": self.run_id, "requestedRun": run_id[:80]}],
            )


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token and its role, and the scope it is held to (a share link's
    resource, or one run)."""

    token_id: str
    role: Role
    scope: Scope | None = None

    @property
    def permissions(self) -> frozenset[Permission]:
        """Every permission the caller holds."""
        return self.scope.permissions if self.scope is not None else self.role.permissions

    @property
    def run_id(self) -> str | None:
        """The one run this caller may touch; None when it is not held to a run."""
        return self.scope.run_id if isinstance(self.scope, RunScope) else None

    def admit_run(self, run_id: str) -> None:
        """Raise ``permission_denied`` unless this caller may touch run ``run_id`` (for
        routes whose body, not their path, names the runs)."""
        if isinstance(self.scope, RunScope):
            self.scope.admit_run(run_id)

    def require(self, permission: Permission) -> None:
        """Raise ``permission_denied`` unless this caller holds ``permission``."""
        if permission in self.permissions:
            return
        if isinstance(self.scope, RunScope):
            raise PermissionDenied(
                f"a token held to run {self.scope.run_id} does not grant {permission.value}",
                details=[
                    {"permission": permission.value, "role": self.role.value, "run": self.run_id}
                ],
            )
        if self.scope is not None:
            raise PermissionDenied(
                f"a share link does not grant {permission.value}",
                details=[{"permission": permission.value, "role": "shared"}],
            )
        raise PermissionDenied(
            f"the {self.role.value} role does not grant {permission.value}",
            details=[{"permission": permission.value, "role": self.role.value}],
        )


class Authorizer(Protocol):
    """What a route's permission check needs from ``app.state.tokens``."""

    async def identify(self, authorization: str | None) -> Principal:
        """The caller behind an ``Authorization`` header, or ``unauthenticated``."""
        ...

    async def authorize(self, authorization: str | None, permission: Permission) -> Principal:
        """The caller behind an ``Authorization`` header, if it holds ``permission``."""
        ...


class TokenDirectory:
    """The usable tokens, by secret hash: an in-memory copy of the key-value bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv
        self._grants: dict[str, TokenGrant] = {}
        self._synced = asyncio.Event()

    async def authenticate(self, secret: str | None) -> Principal:
        """The caller a secret belongs to, or ``unauthenticated``."""
        if not secret:
            raise Unauthenticated(
                "this call needs an API token: send `Authorization: Bearer <token>` (or the"
                " token as the HTTP Basic password)"
            )
        key = secret_hash(secret)
        grant = self._grants.get(key) or await self._fetch(key)
        if grant is None:
            raise Unauthenticated("the API token is not valid (unknown or revoked)")
        if grant.expire_time is not None and grant.expire_time <= datetime.now(UTC):
            raise Unauthenticated(f"the API token expired at {grant.expire_time.isoformat()}")
        if grant.run_id is not None:
            return Principal(grant.token_id, grant.role, RunScope(grant.run_id, grant.role))
        return Principal(grant.token_id, grant.role)

    async def identify(self, authorization: str | None) -> Principal:
        """Authenticate an ``Authorization`` header."""
        return await self.authenticate(secret_from_authorization(authorization))

    async def authorize(self, authorization: str | None, permission: Permission) -> Principal:
        """Authenticate an ``Authorization`` header and check that it grants ``permission``."""
        principal = await self.identify(authorization)
        principal.require(permission)
        return principal

    async def grant(self, key: str, grant: TokenGrant) -> None:
        """Make a token usable everywhere (the registry calls this)."""
        await self._kv.put(key, grant.model_dump_json().encode())
        self._grants[key] = grant

    async def revoke(self, key: str) -> None:
        """Make a token unusable everywhere (idempotent)."""
        self._grants.pop(key, None)
        with suppress(KeyNotFoundError):
            await self._kv.delete(key)

    async def synced(self, within: float) -> bool:
        """Wait up to ``within`` seconds for the watch to hold every grant; whether it does."""
        try:
            await asyncio.wait_for(self._synced.wait(), within)
        except TimeoutError:
            return False
        return True

    async def _fetch(self, key: str) -> TokenGrant | None:
        """Ask the bucket directly: a token granted a moment ago may not have reached the watch."""
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        if entry.value is None:
            return None
        grant = TokenGrant.model_validate_json(entry.value)
        self._grants[key] = grant
        return grant

    async def watch(self) -> None:
        """Follow the bucket for as long as the task runs, re-watching after a failure."""
        while True:
            try:
                await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception:  # a broken watch is retried, never fatal
                log.exception("auth.directory.watch_failed")
                await asyncio.sleep(1.0)

    async def _follow(self) -> None:
        watcher = await self._kv.watchall()
        seen: set[str] = set()
        try:
            async for entry in watcher:
                if entry is None:  # the initial values are all in: drop what is gone
                    for stale in self._grants.keys() - seen:
                        self._grants.pop(stale, None)
                    self._synced.set()
                    continue
                seen.add(entry.key)
                if entry.operation in (KV_DEL, KV_PURGE) or entry.value is None:
                    self._grants.pop(entry.key, None)
                else:
                    self._grants[entry.key] = TokenGrant.model_validate_json(entry.value)
        finally:
            with suppress(Exception):
                await watcher.stop()  # type: ignore[no-untyped-call]


async def _bucket(bus: Bus) -> KeyValue:
    js = bus.broker.config.connection_state.stream
    name = bus.namespace.bucket(TOKEN_DIRECTORY_BUCKET)
    try:
        bucket: KeyValue = await js.key_value(name)
    except BucketNotFoundError:
        # As many copies as the streams: on a cluster the directory must outlive a node.
        bucket = await js.create_key_value(
            bucket=name,
            history=1,
            description="API token grants",
            replicas=bus.settings.stream_replicas,
        )
    await _check_shape(js, name)
    return bucket


async def _check_shape(js: JetStreamContext, name: str) -> None:
    """Refuse a bucket that takes grants from anywhere but its own subjects.

    Every service may create the empty bucket (so none has to start first), but only
    run-registry may publish into it: a bucket created with extra subjects, sources, a
    mirror or a subject transform would let another user write grants past that rule.
    """
    config = (await js.stream_info(f"KV_{name}")).config
    if (
        config.subjects != [f"$KV.{name}.>"]
        or config.mirror is not None
        or config.sources
        or config.subject_transform is not None
    ):
        log.error("auth.directory.tampered", bucket=name, subjects=config.subjects)
        raise TokenDirectoryTampered(
            f"the token directory {name} takes messages from outside its own subjects;"
            " delete the bucket (run-registry recreates it and republishes every grant)"
        )


@asynccontextmanager
async def open_token_directory(
    bus: Bus, sync_timeout: float = 5.0
) -> AsyncIterator[TokenDirectory]:
    """The token directory of the bus's namespace, followed until the block exits."""
    directory = TokenDirectory(await _bucket(bus))
    task = asyncio.create_task(directory.watch(), name="token-directory")
    try:
        # Misses are fetched from the bucket anyway; waiting only makes the first calls cheap.
        await directory.synced(sync_timeout)
        yield directory
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


def requires(permission: Permission, *, runs_in_body: bool = False) -> Any:
    """A FastAPI dependency that lets a request through only with ``permission`` (and, for a
    caller held to a scope, only inside it).

    ``runs_in_body``: the route's body, not its path, names the runs it touches (OTLP), so a
    caller held to a run passes here and the route checks every run it finds with
    :meth:`Principal.admit_run` (the dependency yields the principal for that).

    The directory is ``app.state.tokens``. The returned dependency carries the permission
    as ``.permission`` so tests (and docs) can read what each route demands.
    """

    async def authorize(request: Request) -> Principal:
        directory: Authorizer = request.app.state.tokens
        principal = await directory.authorize(request.headers.get("authorization"), permission)
        if principal.scope is not None and not (runs_in_body and principal.run_id is not None):
            principal.scope.admit(permission, request)
        return principal

    authorize.permission = permission  # type: ignore[attr-defined]
    return Depends(authorize)


async def _identify(request: Request) -> Principal:
    directory: Authorizer = request.app.state.tokens
    return await directory.identify(request.headers.get("authorization"))


_identify.any_caller = True  # type: ignore[attr-defined]  # what tests read, like .permission


def authenticated() -> Any:
    """A FastAPI dependency that lets any authenticated caller through and yields who it is
    (for routes about the caller itself, like ``GET /v1/caller``)."""
    return Depends(_identify)
