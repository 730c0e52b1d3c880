"""The decisions the repository makes under its locks, raced on a real PostgreSQL."""

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from mldiag_notifier.repository import NotifierRepository, Plan
from mldiag_notifier.routing import RunFacts
from mldiag_platform.database import load_migrations, open_database
from mldiag_platform.settings import DatabaseSettings
from mldiag_schemas.alerts import AlertRule, TopCause
from notifier.conftest import make_event

pytestmark = pytest.mark.connected

RUN = RunFacts("r1", "default", "local")


@pytest.fixture
async def pool(database_settings: DatabaseSettings, db_schema: str) -> AsyncIterator[asyncpg.Pool]:
    migrations = load_migrations("notifier", "mldiag_notifier.migrations")
    async with open_database(database_settings, db_schema, migrations) as opened:
        yield opened


async def test_an_analysis_racing_the_decision_never_leaves_the_notification_waiting(
    pool: asyncpg.Pool,
) -> None:
    repository = NotifierRepository(pool)
    plan = Plan(
        AlertRule(display_name="r", rule_id="r", channels=["c"], group_window_seconds=0), "c"
    )
    cause = TopCause(analyzer="a", details="d")
    for _ in range(20):
        event = make_event("r1")
        await asyncio.gather(
            repository.decide_opened(RUN, event, [plan], wait_seconds=30.0),
            repository.save_analysis(event.event_id, cause, 1.0, datetime.now(UTC)),
        )
    waiting = await pool.fetchval(
        "SELECT count(*) FROM deliveries WHERE next_attempt_time > now() + interval '5 seconds'"
    )
    assert await pool.fetchval("SELECT count(*) FROM deliveries") == 20
    assert waiting == 0


async def test_two_deciders_of_one_event_store_one_delivery(pool: asyncpg.Pool) -> None:
    repository = NotifierRepository(pool)
    plan = Plan(AlertRule(display_name="r", rule_id="r", channels=["c"]), "c")
    event = make_event("r1")
    queued = await asyncio.gather(
        *(repository.decide_opened(RUN, event, [plan], wait_seconds=0.0) for _ in range(5))
    )
    assert sorted(queued) == [0, 0, 0, 0, 1]
    assert await pool.fetchval("SELECT count(*) FROM deliveries") == 1
