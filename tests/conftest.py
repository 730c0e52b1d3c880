"""Real servers for the connected and end-to-end tiers, isolated per test run.

Servers come from, in order: URLs in the environment (``MLDIAG_TEST_NATS_URL``,
``MLDIAG_TEST_DATABASE_URL``; CI sets them), testcontainers when a Docker engine answers,
or the embedded binaries ``mldiag up`` uses. Each run gets its own database and each test
its own NATS namespace (streams are deleted afterwards).
"""

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import asyncpg
import pytest

from mldiag_platform.auth import new_secret, open_token_directory, secret_hash
from mldiag_platform.bus import Publisher, connect_bus
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_schemas.auth import Role, TokenGrant
from support import drop_namespace, free_port, world_readable_tempdir


@pytest.fixture(autouse=True, scope="session")
def _no_stored_login(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A developer's own ``mldiag login`` never reaches a test (nor a process it starts): the
    user config directory is an empty one of the session's; tests of the login set theirs."""
    patch = pytest.MonkeyPatch()
    patch.setenv("MLDIAG_CONFIG_DIR", str(tmp_path_factory.mktemp("mldiag-config")))
    yield
    patch.undo()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests without a tier marker are unit tests."""
    tiers = {"connected", "e2e", "bench"}
    for item in items:
        if not tiers & {marker.name for marker in item.iter_markers()}:
            item.add_marker(pytest.mark.unit)


def _docker_answers() -> bool:
    try:
        import docker  # noqa: PLC0415  # only present with testcontainers

        docker.from_env().ping()
    except Exception:  # noqa: BLE001  # any failure means: no engine
        return False
    return True


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    """A NATS server with JetStream."""
    if url := os.environ.get("MLDIAG_TEST_NATS_URL"):
        yield url
        return
    if _docker_answers():
        from testcontainers.nats import NatsContainer  # noqa: PLC0415

        with NatsContainer(jetstream=True) as container:
            yield container.nats_uri()
        return
    from mldiag.local.nats import EmbeddedNats  # noqa: PLC0415

    home = world_readable_tempdir("mldiag-test-nats-")
    server = EmbeddedNats(home / "data", port=free_port(), monitor_port=free_port())
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """A PostgreSQL server (its maintenance database)."""
    if url := os.environ.get("MLDIAG_TEST_DATABASE_URL"):
        yield url
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer  # noqa: PLC0415

        with PostgresContainer("postgres:16", driver=None) as container:
            yield container.get_connection_url()
        return
    from mldiag.local.postgres import EmbeddedPostgres  # noqa: PLC0415

    home = world_readable_tempdir("mldiag-test-pg-")
    server = EmbeddedPostgres(home / "data", port=free_port())
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
async def database_url(postgres_server_url: str) -> AsyncIterator[str]:
    """A fresh database for this test run, dropped at the end."""
    name = f"mldiag_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base, _, _ = postgres_server_url.rpartition("/")
    yield f"{base}/{name}"
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
def database_settings(database_url: str) -> DatabaseSettings:
    """Settings pointing at this run's database."""
    return DatabaseSettings(url=database_url, pool_min_size=1, pool_max_size=4)


@pytest.fixture
def db_schema() -> str:
    """A schema of its own for one test."""
    return f"t_{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def namespace(nats_url: str) -> AsyncIterator[str]:
    """A NATS namespace of its own for one test; its streams are deleted afterwards."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    yield prefix
    await drop_namespace(nats_url, prefix)


@pytest.fixture
def nats_settings(nats_url: str, namespace: str) -> NatsSettings:
    """Settings for this test's namespace, with quick retries."""
    return NatsSettings(
        url=nats_url, namespace=namespace, max_deliver=3, retry_backoff_seconds=0.05
    )


@pytest.fixture
async def publisher(nats_settings: NatsSettings) -> AsyncIterator[Publisher]:
    """A publisher on this test's namespace, its streams declared."""
    async with connect_bus(nats_settings, "test-publisher") as bus:
        yield bus.publisher


@dataclass(frozen=True)
class ApiTokens:
    """One usable token per role, granted in this test's token directory."""

    viewer: str
    editor: str
    admin: str

    def secret(self, role: Role) -> str:
        """The secret of ``role``'s token."""
        return {Role.VIEWER: self.viewer, Role.EDITOR: self.editor, Role.ADMIN: self.admin}[role]

    def headers(self, role: Role = Role.EDITOR) -> dict[str, str]:
        """An ``Authorization`` header for ``role``."""
        return {"Authorization": f"Bearer {self.secret(role)}"}


@pytest.fixture
async def api_tokens(nats_settings: NatsSettings) -> ApiTokens:
    """Tokens of every role, usable by every service on this test's namespace."""
    secrets = {role: new_secret() for role in Role}
    async with (
        connect_bus(nats_settings, "test-tokens") as bus,
        open_token_directory(bus) as directory,
    ):
        for role, secret in secrets.items():
            grant = TokenGrant(token_id=f"test-{role.value}", role=role)
            await directory.grant(secret_hash(secret), grant)
    return ApiTokens(secrets[Role.VIEWER], secrets[Role.EDITOR], secrets[Role.ADMIN])
