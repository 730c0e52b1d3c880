"""event-detector against real NATS and PostgreSQL: a NaN opens one event, replays add none."""

import math
import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from mldiag_event_detector.app import create_app
from mldiag_event_detector.settings import EventDetectorSettings
from mldiag_platform.bus import Publisher
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_schemas.bus import WORKLOAD_EVENT_OPENED
from mldiag_schemas.events import WorkloadEventOpened
from mldiag_schemas.telemetry import MetricPoint, MetricPointsReceived
from support import read_messages, serving, wait_until

pytestmark = pytest.mark.connected

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def _opened_events(settings: NatsSettings) -> list[WorkloadEventOpened]:
    return await read_messages(settings, WORKLOAD_EVENT_OPENED, WorkloadEventOpened)


def _points(run_id: str, values: list[float], start: int = 0) -> MetricPointsReceived:
    return MetricPointsReceived(
        run_id=run_id,
        batch_id=uuid.uuid4(),
        chunk=0,
        points=[
            MetricPoint(name="loss", step=start + i, value=v, time=NOW, host="h0")
            for i, v in enumerate(values)
        ],
    )


async def test_nan_opens_one_event_and_replays_open_none(
    publisher: Publisher,
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
) -> None:
    settings = EventDetectorSettings(
        nats=nats_settings, database=database_settings, db_schema=db_schema
    )
    bad = _points("run-1", [1.0, 0.5, math.nan])
    async with serving(create_app(settings)) as client:
        assert (await client.get("/healthz")).status_code == 200
        await publisher.publish(_points("run-quiet", [1.0, 0.9, 0.8]))
        await publisher.publish(bad)
        [opened] = await wait_until(lambda: _opened_events(nats_settings))
        # later NaNs on the same metric, and a replay of the same message, open nothing new
        await publisher.publish(_points("run-1", [math.nan], start=3))
        replay = bad.model_copy(update={"event_id": uuid.uuid4()})
        await publisher.publish(replay)
        conn = await asyncpg.connect(database_settings.url)
        try:
            applied = f"SELECT count(*) FROM {db_schema}.applied_messages"
            await wait_until(lambda: conn.fetchval(applied), accept=lambda n: n == 4)
        finally:
            await conn.close()
        metrics = (await client.get("/metrics")).text
        assert "mldiag_bus_messages_handled_total" in metrics

    assert opened.event.run_id == "run-1"
    assert opened.event.evidence.first_bad_step == 2
    assert opened.event.evidence.last_good_value == 0.5
    # the detector has stopped: whatever it handled is committed; exactly one event exists
    assert len(await _opened_events(nats_settings)) == 1
    conn = await asyncpg.connect(database_settings.url)
    try:
        assert await conn.fetchval(f"SELECT count(*) FROM {db_schema}.outbox") == 0
        await conn.execute(f"DROP SCHEMA {db_schema} CASCADE")
    finally:
        await conn.close()
