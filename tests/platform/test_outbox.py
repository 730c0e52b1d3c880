"""The outbox against real PostgreSQL and NATS: one bad row never blocks the others, and a
flush never fails the unit of work whose data already committed."""

import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from mldiag_platform.bus import Publisher, create_broker
from mldiag_platform.database import apply_migrations
from mldiag_platform.outbox import Outbox, outbox_migrations
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import RUN_CREATED, Namespace
from mldiag_schemas.runs import Run, RunCreated, RunState
from support import read_messages

pytestmark = pytest.mark.connected

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
async def _outbox_table(pool: asyncpg.Pool, db_schema: str) -> None:
    await apply_migrations(pool, db_schema, outbox_migrations())


def _created() -> RunCreated:
    run_id = str(uuid.uuid4())
    return RunCreated(
        run=Run(
            name=f"projects/p/locations/l/machineLearningRuns/{run_id}",
            run_id=run_id,
            display_name="x",
            run_set="s",
            labels={},
            state=RunState.ACTIVE,
            create_time=NOW,
            update_time=NOW,
        )
    )


async def _stage(pool: asyncpg.Pool, publisher: Publisher, message: RunCreated) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await Outbox(pool, publisher).add(conn, [message])


async def _stage_raw(pool: asyncpg.Pool, subject: str, payload: bytes = b"{}") -> uuid.UUID:
    """A row as an older version (or a bug) could have left it, bypassing Outbox.add."""
    event_id = uuid.uuid4()
    await pool.execute(
        "INSERT INTO outbox (event_id, subject, payload) VALUES ($1, $2, $3)",
        event_id,
        subject,
        payload,
    )
    return event_id


async def test_outbox_publishes_only_what_committed(
    pool: asyncpg.Pool, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    outbox = Outbox(pool, publisher)
    committed, rolled_back = _created(), _created()
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


async def test_a_row_that_can_never_be_published_is_parked_and_the_rest_go_out(
    pool: asyncpg.Pool, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    # Once, `PATCH /v1/projects/a..b/...` left such a row first in line: every flush failed
    # on it, and every registry write after it answered 500 although it had committed.
    before, after = _created(), _created()
    await _stage(pool, publisher, before)
    bad = await _stage_raw(pool, f"{nats_settings.namespace}.runs.monitoring.changed.a..b")
    await _stage(pool, publisher, after)

    outbox = Outbox(pool, publisher)
    assert await outbox.flush() == 2
    published = await read_messages(nats_settings, RUN_CREATED, RunCreated)
    assert {m.event_id for m in published} == {before.event_id, after.event_id}
    parked = await pool.fetchrow("SELECT parked_reason FROM outbox WHERE event_id = $1", bad)
    assert parked is not None
    assert "not a valid subject" in parked["parked_reason"]
    assert await outbox.flush() == 0  # parked rows are skipped, not retried forever


async def test_a_row_that_fails_while_others_go_out_waits_its_own_backoff(
    pool: asyncpg.Pool, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    no_stream = await _stage_raw(pool, f"{nats_settings.namespace}.nostream.x")
    good = _created()
    await _stage(pool, publisher, good)

    outbox = Outbox(pool, publisher)
    assert await outbox.flush() == 1
    row = await pool.fetchrow(
        "SELECT attempts, next_attempt_at > now() AS waiting, last_error, parked_reason"
        " FROM outbox WHERE event_id = $1",
        no_stream,
    )
    assert row is not None
    assert row["attempts"] == 1
    assert row["waiting"]
    assert row["last_error"]
    assert row["parked_reason"] is None  # it may go out once its stream exists
    assert [m.event_id for m in await read_messages(nats_settings, RUN_CREATED, RunCreated)] == [
        good.event_id
    ]


async def test_a_flush_during_an_outage_returns_without_raising_and_keeps_every_row(
    pool: asyncpg.Pool, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    message = _created()
    await _stage(pool, publisher, message)
    unreachable = NatsSettings(url="nats://127.0.0.1:1", namespace=nats_settings.namespace)
    broker = create_broker(unreachable, "test-outage")
    outbox = Outbox(pool, Publisher(broker, Namespace(nats_settings.namespace), unreachable))

    assert await outbox.flush() == 0  # the unit of work that called it already committed
    row = await pool.fetchrow("SELECT attempts, next_attempt_at <= now() AS due FROM outbox")
    assert row is not None
    assert row["attempts"] == 0  # an outage is nobody's fault: no backoff piles up
    assert row["due"]
    assert await Outbox(pool, publisher).flush() == 1  # and it goes out once NATS is back
