"""PostgreSQL through asyncpg: one pool per service, in the service's own schema, and
versioned migrations applied at start-up.

A migration set is a package directory of ``NNNN_description.sql`` files. Each set is
recorded under its component name in ``<schema>.schema_migrations``, so a service can apply
its own set and shared ones (the outbox) side by side. An advisory lock serialises
concurrent replicas starting at once.
"""

import re
import zlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

import asyncpg
import structlog

from mldiag_platform.settings import DatabaseSettings

log = structlog.get_logger(__name__)

_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class Migration:
    """One versioned SQL script."""

    component: str
    version: int
    name: str
    sql: str


def load_migrations(component: str, package: str) -> list[Migration]:
    """Read the ``NNNN_*.sql`` files of ``package`` (a package directory), in order."""
    found: list[Migration] = []
    root: Traversable = files(package)
    for entry in root.iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            version, name = int(match.group(1)), match.group(2)
            found.append(Migration(component, version, name, entry.read_text()))
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations of {component} must be numbered 1..n, got {versions}")
    return found


def check_schema_name(schema: str) -> str:
    """Schema names are interpolated into SQL, so only plain identifiers are allowed."""
    if not _SCHEMA_NAME.match(schema):
        raise ValueError(f"invalid schema name {schema!r}")
    return schema


async def create_pool(settings: DatabaseSettings, schema: str) -> asyncpg.Pool:
    """A pool whose connections resolve unqualified names in ``schema`` first."""
    check_schema_name(schema)
    pool: asyncpg.Pool = await asyncpg.create_pool(
        settings.url,
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        server_settings={"search_path": f"{schema},public", "application_name": schema},
    )
    return pool


async def apply_migrations(pool: asyncpg.Pool, schema: str, migrations: Sequence[Migration]) -> int:
    """Apply the migrations not applied yet, each in its own transaction; return the count."""
    check_schema_name(schema)
    applied = 0
    async with pool.acquire() as conn:
        lock_key = zlib.crc32(f"mldiag-migrations:{schema}".encode())
        await conn.execute("SELECT pg_advisory_lock($1)", lock_key)
        try:
            # Only when missing: CREATE SCHEMA needs CREATE on the database even with IF NOT
            # EXISTS, and a service's role owns its schema but may create no other.
            if not await conn.fetchval("SELECT true FROM pg_namespace WHERE nspname = $1", schema):
                await conn.execute(f"CREATE SCHEMA {schema}")
            await conn.execute(
                f"""CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
                    component text NOT NULL,
                    version integer NOT NULL,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (component, version))"""
            )
            rows = await conn.fetch(f"SELECT component, version FROM {schema}.schema_migrations")
            done = {(row["component"], row["version"]) for row in rows}
            for migration in migrations:
                if (migration.component, migration.version) in done:
                    continue
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL search_path TO {schema}")
                    await conn.execute(migration.sql)
                    await conn.execute(
                        f"INSERT INTO {schema}.schema_migrations (component, version, name)"
                        " VALUES ($1, $2, $3)",
                        migration.component,
                        migration.version,
                        migration.name,
                    )
                applied += 1
                log.info(
                    "db.migration.applied",
                    schema=schema,
                    component=migration.component,
                    version=migration.version,
                    migration=migration.name,
                )
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", lock_key)
    return applied


async def database_ok(pool: asyncpg.Pool) -> bool:
    """Health check: the pool can run a query within a second."""
    return bool(await pool.fetchval("SELECT true", timeout=1.0))


@asynccontextmanager
async def open_database(
    settings: DatabaseSettings, schema: str, migrations: Sequence[Migration]
) -> AsyncIterator[asyncpg.Pool]:
    """A pool on ``schema`` with ``migrations`` applied; closed on exit."""
    pool = await create_pool(settings, schema)
    try:
        await apply_migrations(pool, schema, migrations)
        yield pool
    finally:
        await pool.close()
