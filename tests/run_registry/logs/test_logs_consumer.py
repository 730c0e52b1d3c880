"""Log batches from the bus: the registry stores and serves them, and a batch redelivered
after a failure (before or after its commit) is stored once (real NATS and PostgreSQL)."""

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from mldiag_platform.bus import Publisher, connect_bus
from mldiag_platform.database import apply_migrations, create_pool, load_migrations
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.logs.handlers import LOGS_CONSUMER, LogsBusHandler
from mldiag_run_registry.logs.repository import LogsRepository
from mldiag_run_registry.logs.service import LogsService
from mldiag_schemas.logs import LogLine, LogLinesReceived, LogStream
from support import failing_once, wait_until

pytestmark = pytest.mark.connected

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def _batch(run_id: str, first: int, count: int) -> LogLinesReceived:
    lines = [
        LogLine(time=T0 + timedelta(seconds=first + i), host=f"h{i % 2}", text=f"line {first + i}")
        for i in range(count)
    ]
    return LogLinesReceived(run_id=run_id, event_id=uuid.uuid4(), lines=lines)


async def test_the_registry_serves_lines_from_the_bus(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    created = await api.post("/v1/machineLearningRuns", json={"runId": "lg-1", "displayName": "x"})
    assert created.status_code == 200, created.text
    await publisher.publish(_batch("lg-1", 0, 3))
    await publisher.publish(
        LogLinesReceived(
            run_id="lg-1",
            lines=[LogLine(time=T0 + timedelta(seconds=9), stream=LogStream.STDERR, text="boom")],
        )
    )

    async def texts() -> list[str]:
        response = await api.get("/v1/machineLearningRuns/lg-1/logs")
        assert response.status_code == 200, response.text
        return [entry["text"] for entry in response.json().get("entries", [])]

    assert await wait_until(texts, accept=lambda t: len(t) == 4) == [
        "line 0",
        "line 1",
        "line 2",
        "boom",
    ]
    full = "/v1/projects/default/locations/local/machineLearningRuns/lg-1/logs"
    grep = await api.get(full, params={"grep": "bo+m", "stream": "stderr"})
    assert [e["text"] for e in grep.json()["entries"]] == ["boom"]
    assert (await api.get("/v1/machineLearningRuns/nope/logs")).status_code == 404
    assert (await api.get("/v1/machineLearningRuns/lg-1/logs?grep=(")).status_code == 400


@pytest.mark.parametrize("fail", ["before-commit", "after-commit"])
async def test_a_batch_redelivered_after_a_failure_is_stored_once(
    fail: str, nats_settings: NatsSettings, database_settings: DatabaseSettings, db_schema: str
) -> None:
    pool = await create_pool(database_settings, db_schema)
    migrations = load_migrations("run-registry-logs", "mldiag_run_registry.logs.migrations")
    await apply_migrations(pool, db_schema, migrations)
    real = LogsBusHandler(LogsService(LogsRepository(pool), runs=None))  # type: ignore[arg-type]
    deliveries_seen: list[int] = []

    async with connect_bus(nats_settings, "test") as bus:
        bus.consume(LOGS_CONSUMER, failing_once(real.on_logs, fail, deliveries_seen))
        await bus.start()
        await bus.publisher.publish_many([_batch("run-1", i * 10, 10) for i in range(3)])

        async def stored() -> int:
            count: int = await pool.fetchval("SELECT coalesce(sum(line_count), 0) FROM log_chunks")
            return count

        await wait_until(stored, accept=lambda n: n >= 30)
        await wait_until(
            lambda: asyncio.sleep(0, deliveries_seen), accept=lambda seen: max(seen) >= 2
        )
        await asyncio.sleep(0.5)  # let any stray redelivery arrive before counting
        assert await stored() == 30
        assert max(deliveries_seen) == 2  # redelivered once, then acked
    await pool.execute(f"DROP SCHEMA {db_schema} CASCADE")
    await pool.close()
