"""The locked-down PostgreSQL of `mldiag up`: SCRAM logins only and a role per service.

One real server plays the upgrade a user lives through: a data directory an older version
filled on trust (tables made by the superuser), then started locked down. Nothing logs in
without a password, each service's role owns its schema and nothing else.
"""

import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import asyncpg
import pytest

from mldiag.local.postgres import EmbeddedPostgres
from mldiag_platform import substrate
from mldiag_platform.database import Migration, apply_migrations
from support import free_port, world_readable_tempdir

pytestmark = pytest.mark.connected

SECRETS = {name: f"secret-of-{name}" for name in substrate.SECRET_NAMES}


@dataclass
class Locked:
    server: EmbeddedPostgres

    def url(self, service: str) -> str:
        return substrate.database_url(service, SECRETS, "127.0.0.1", self.server.port)

    def superuser_url(self, password: str | None) -> str:
        secret = f":{password}" if password is not None else ""
        return f"postgresql://mldiag{secret}@127.0.0.1:{self.server.port}/mldiag"


@pytest.fixture(scope="module")
def locked() -> Iterator[Locked]:
    home = world_readable_tempdir("mldiag-test-locked-pg-")
    port = free_port()
    # An older version: trust, and the registry's tables made by the superuser.
    legacy = EmbeddedPostgres(home / "data", port=port)
    legacy.start()
    try:
        legacy._psql(  # the superuser's own door, as the old version used
            "CREATE SCHEMA run_registry;"
            "CREATE TABLE run_registry.runs (id bigserial PRIMARY KEY, name text);"
            "INSERT INTO run_registry.runs (name) VALUES ('kept');",
            variables={},
            database="mldiag",
        )
    finally:
        legacy.stop()
    server = EmbeddedPostgres(
        home / "data",
        port=port,
        password=SECRETS[substrate.POSTGRES_SUPERUSER_KEY],
        setup_sql=substrate.database_roles_sql(SECRETS),
    )
    server.start()
    try:
        yield Locked(server)
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
async def registry(locked: Locked) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(locked.url("run-registry"))
    yield connection
    await connection.close()


async def test_no_login_without_the_password(locked: Locked) -> None:
    for url in (locked.superuser_url(None), locked.superuser_url("mldiag")):
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(url)
    wrong = locked.url("event-detector").replace("secret-of-", "guess-")
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(wrong)
    hba = (locked.server.data_dir / "pg_hba.conf").read_text()
    assert "trust" not in hba.replace("# ", "")
    assert "scram-sha-256" in hba


async def test_the_upgraded_tables_belong_to_the_service(registry: asyncpg.Connection) -> None:
    assert await registry.fetchval("SELECT name FROM run_registry.runs") == "kept"
    await registry.execute("INSERT INTO run_registry.runs (name) VALUES ('new')")
    assert await registry.fetchval("SELECT count(*) FROM run_registry.runs") == 2


async def test_a_service_cannot_read_another_ones_schema(locked: Locked) -> None:
    detector = await asyncpg.connect(locked.url("event-detector"))
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await detector.fetch("SELECT * FROM run_registry.runs")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await detector.execute("CREATE SCHEMA elsewhere")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await detector.execute("CREATE TABLE public.spill (x int)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await detector.execute("ALTER SCHEMA run_registry OWNER TO mldiag_event_detector")
    finally:
        await detector.close()


async def test_migrations_run_as_the_services_own_role(locked: Locked) -> None:
    # The platform's migration runner, as a service runs it: the schema exists already
    # (CREATE SCHEMA IF NOT EXISTS would need CREATE on the database, which roles lack).
    pool = await asyncpg.create_pool(locked.url("event-detector"), min_size=1, max_size=1)
    try:
        migration = Migration("test", 1, "first", "CREATE TABLE state (run text PRIMARY KEY);")
        assert await apply_migrations(pool, "event_detector", [migration]) == 1
        assert await apply_migrations(pool, "event_detector", [migration]) == 0
        owner = await pool.fetchval(
            "SELECT tableowner FROM pg_tables WHERE schemaname = 'event_detector'"
            " AND tablename = 'state'"
        )
        assert owner == "mldiag_event_detector"
    finally:
        await pool.close()


async def test_a_restart_with_a_new_superuser_password_still_starts(locked: Locked) -> None:
    # The kept secret lost and made anew: the next start sets it before the server listens.
    server = locked.server
    server.stop()
    server.password = "a-new-one"
    try:
        server.start()
        connection = await asyncpg.connect(locked.superuser_url("a-new-one"))
        await connection.close()
    finally:
        server.stop()
        server.password = SECRETS[substrate.POSTGRES_SUPERUSER_KEY]
        server.start()
