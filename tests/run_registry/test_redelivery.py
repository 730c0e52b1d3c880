"""A consumer that fails once still stores the batch exactly once."""

import asyncio
import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from mldiag_platform.bus import Bus, connect_bus
from mldiag_platform.database import apply_migrations, create_pool, load_migrations
from mldiag_platform.outbox import Outbox, outbox_migrations
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.live.service import LiveFeed
from mldiag_run_registry.metrics.handlers import MetricsBusHandler, metrics_consumer
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_run_registry.metrics.service import MetricsService
from mldiag_run_registry.runs.repository import RunRepository
from mldiag_run_registry.runs.service import RunService
from mldiag_schemas.telemetry import MetricPoint, MetricPointsReceived
from run_registry.helpers import stored_points
from support import failing_once, wait_until

pytestmark = pytest.mark.connected

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("fail", ["before-commit", "after-commit"])
async def test_a_batch_redelivered_after_a_failure_is_stored_exactly_once(
    fail: str, nats_settings: NatsSettings, database_settings: DatabaseSettings, db_schema: str
) -> None:
    pool = await create_pool(database_settings, db_schema)
    migrations = [
        *outbox_migrations(),
        *load_migrations("run-registry", "mldiag_run_registry.migrations"),
        *load_migrations("run-registry-metrics", "mldiag_run_registry.metrics.migrations"),
    ]
    await apply_migrations(pool, db_schema, migrations)
    async with connect_bus(nats_settings, "test") as bus:
        await _check_stored_once(bus, pool, db_schema, fail)
    await pool.execute(f"DROP SCHEMA {db_schema} CASCADE")
    await pool.close()


async def _check_stored_once(bus: Bus, pool: asyncpg.Pool, db_schema: str, fail: str) -> None:
    publisher = bus.publisher
    outbox = Outbox(pool, publisher)
    run_repository = RunRepository(pool, outbox)
    runs = RunService(run_repository, outbox)
    real = MetricsBusHandler(
        MetricsService(MetricsRepository(pool, db_schema), runs, run_repository), LiveFeed(bus)
    )
    deliveries_seen: list[int] = []

    bus.consume(metrics_consumer(50), failing_once(real.on_metrics, fail, deliveries_seen))
    await bus.start()
    messages = [
        MetricPointsReceived(
            run_id="run-1",
            batch_id=uuid.uuid4(),
            chunk=0,
            points=[
                MetricPoint(name="loss", step=i * 10 + j, value=1.0, time=NOW) for j in range(10)
            ],
        )
        for i in range(3)
    ]
    await publisher.publish_many(messages)

    async def stored() -> int:
        return (await stored_points(pool, db_schema, ["run-1"]))[0]

    await wait_until(stored, accept=lambda n: n >= 30)
    await wait_until(lambda: asyncio.sleep(0, deliveries_seen), accept=lambda seen: max(seen) >= 2)
    await asyncio.sleep(0.5)  # let any stray redelivery arrive before counting
    assert await stored() == 30
    assert await stored_points(pool, db_schema, ["run-1"]) == (30, 30)
    assert max(deliveries_seen) == 2  # redelivered once, then acked
