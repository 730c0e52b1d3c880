"""Migrations against a real PostgreSQL (the outbox has tests/platform/test_outbox.py)."""

from datetime import UTC, datetime

import asyncpg
import pytest

from mldiag_platform.database import Migration, apply_migrations, load_migrations

pytestmark = pytest.mark.connected

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def test_migrations_apply_once_in_order(pool: asyncpg.Pool, db_schema: str) -> None:
    migrations = [
        Migration("demo", 1, "create", "CREATE TABLE things (id int PRIMARY KEY)"),
        Migration("demo", 2, "add_column", "ALTER TABLE things ADD COLUMN name text"),
    ]
    assert await apply_migrations(pool, db_schema, migrations) == 2
    assert await apply_migrations(pool, db_schema, migrations) == 0
    await pool.execute("INSERT INTO things (id, name) VALUES (1, 'a')")  # unqualified: search_path
    versions = await pool.fetch(
        f"SELECT component, version FROM {db_schema}.schema_migrations ORDER BY version"
    )
    assert [(r["component"], r["version"]) for r in versions] == [("demo", 1), ("demo", 2)]


async def test_a_failing_migration_leaves_nothing_half_applied(
    pool: asyncpg.Pool, db_schema: str
) -> None:
    good = Migration("demo", 1, "create", "CREATE TABLE good (id int)")
    bad = Migration("demo", 2, "broken", "CREATE TABLE half (id int); SELECT no_such_function()")
    with pytest.raises(asyncpg.UndefinedFunctionError):
        await apply_migrations(pool, db_schema, [good, bad])
    tables = {
        r["tablename"]
        for r in await pool.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1", db_schema
        )
    }
    assert "good" in tables
    assert "half" not in tables
    assert await pool.fetchval(f"SELECT max(version) FROM {db_schema}.schema_migrations") == 1


def test_service_migration_sets_are_numbered_without_gaps() -> None:
    for component, package in [
        ("run-registry", "mldiag_run_registry.migrations"),
        ("event-detector", "mldiag_event_detector.migrations"),
        ("outbox", "mldiag_platform.migrations.outbox"),
    ]:
        migrations = load_migrations(component, package)
        assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
