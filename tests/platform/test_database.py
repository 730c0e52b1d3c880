"""Migrations and the outbox against a real PostgreSQL (and NATS for the outbox)."""

import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from mldiag_platform.bus import Publisher, create_broker, declare_streams
from mldiag_platform.database import Migration, apply_migrations, load_migrations
from mldiag_platform.outbox import Outbox, outbox_migrations
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import ALL_STREAMS, RUN_CREATED, Namespace
from mldiag_schemas.runs import Run, RunCreated, RunState
from support import read_messages

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


def _run() -> Run:
    run_id = str(uuid.uuid4())
    return Run(
        name=f"projects/p/locations/l/machineLearningRuns/{run_id}",
        run_id=run_id,
        display_name="x",
        run_set="s",
        labels={},
        state=RunState.ACTIVE,
        create_time=NOW,
        update_time=NOW,
    )


async def test_outbox_publishes_only_what_committed(
    pool: asyncpg.Pool, db_schema: str, nats_settings: NatsSettings
) -> None:
    await apply_migrations(pool, db_schema, outbox_migrations())
    namespace = Namespace(nats_settings.namespace)
    broker = create_broker(nats_settings, "test")
    await broker.connect()
    await declare_streams(broker, namespace, ALL_STREAMS)
    outbox = Outbox(pool, Publisher(broker, namespace, nats_settings))
    committed, rolled_back = RunCreated(run=_run()), RunCreated(run=_run())
    try:
        async with pool.acquire() as conn:
            async with conn.transaction():
                await outbox.add(conn, [committed])
            with pytest.raises(RuntimeError):
                async with conn.transaction():
                    await outbox.add(conn, [rolled_back])
                    raise RuntimeError("abort")
        # nothing is published before a flush: a crash here leaves the row for the sweeper
        assert await read_messages(nats_settings, RUN_CREATED, RunCreated) == []
        assert await outbox.flush() == 1
        assert await outbox.flush() == 0
        published = await read_messages(nats_settings, RUN_CREATED, RunCreated)
        assert [m.event_id for m in published] == [committed.event_id]
        assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
    finally:
        await broker.stop()
