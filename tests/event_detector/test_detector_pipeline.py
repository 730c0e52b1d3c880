"""event-detector against real NATS and PostgreSQL: events open once, survive restarts and
replicas, and the clock finds hangs."""

import asyncio
import math
import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from event_detector.feed import immediate
from mldiag_event_detector.app import create_app
from mldiag_event_detector.settings import EventDetectorSettings
from mldiag_platform.bus import Publisher
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.events import (
    EventType,
    WorkloadEventOpened,
    WorkloadEventResolved,
    WorkloadEventUpdated,
)
from mldiag_schemas.logs import LogLine, LogLinesReceived, LogStream
from mldiag_schemas.monitoring import (
    MonitoringRules,
    MonitoringRulesChanged,
    RuleName,
    RuleOverride,
)
from mldiag_schemas.runs import ErrorDetails, Run, RunCreated, RunPhase, RunPhaseChanged, RunState
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived, RunHeartbeat
from support import read_messages, serving, wait_until

pytestmark = pytest.mark.connected


async def _opened(settings: NatsSettings) -> list[WorkloadEventOpened]:
    return await read_messages(settings, bus.WORKLOAD_EVENT_OPENED, WorkloadEventOpened)


async def _resolved(settings: NatsSettings) -> list[WorkloadEventResolved]:
    return await read_messages(settings, bus.WORKLOAD_EVENT_RESOLVED, WorkloadEventResolved)


def _points(
    run_id: str, values: list[float], start: int = 0, metric: str = "loss", host: str = "h0"
) -> MetricPointsReceived:
    return MetricPointsReceived(
        run_id=run_id,
        batch_id=uuid.uuid4(),
        chunk=0,
        series=[
            MetricColumns(
                name=metric,
                host=host,
                steps=list(range(start, start + len(values))),
                values=values,
            )
        ],
    )


@pytest.fixture
def settings(
    nats_settings: NatsSettings, database_settings: DatabaseSettings, db_schema: str
) -> EventDetectorSettings:
    return EventDetectorSettings(
        nats=nats_settings, database=database_settings, db_schema=db_schema, clock_seconds=0.1
    )


async def _drop(database_settings: DatabaseSettings, db_schema: str) -> None:
    conn = await asyncpg.connect(database_settings.url)
    try:
        assert await conn.fetchval(f"SELECT count(*) FROM {db_schema}.outbox") == 0
        await conn.execute(f"DROP SCHEMA {db_schema} CASCADE")
    finally:
        await conn.close()


async def test_nan_opens_one_event_and_replays_open_none(
    publisher: Publisher,
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    settings: EventDetectorSettings,
) -> None:
    bad = _points("run-1", [1.0, 0.5, math.nan])
    async with serving(create_app(settings)) as client:
        assert (await client.get("/healthz")).status_code == 200
        await publisher.publish(_points("run-quiet", [1.0, 0.9, 0.8]))
        await publisher.publish(bad)
        [opened] = await wait_until(lambda: _opened(nats_settings))
        # later NaNs on the same metric, and the same write republished, open nothing new
        await publisher.publish(_points("run-1", [math.nan], start=3))
        await publisher.publish(bad.model_copy(update={"event_id": uuid.uuid4()}))
        conn = await asyncpg.connect(database_settings.url)
        try:
            applied = f"SELECT count(*) FROM {db_schema}.applied_messages"
            await wait_until(lambda: conn.fetchval(applied), accept=lambda n: n == 3)
        finally:
            await conn.close()
        metrics = (await client.get("/metrics")).text
        assert "mldiag_bus_messages_handled_total" in metrics

    assert opened.event.run_id == "run-1"
    assert opened.event.evidence.first_bad_step == 2
    assert opened.event.evidence.last_good_value == 0.5
    assert opened.context is not None
    assert [host.host for host in opened.context.hosts] == ["h0"]
    assert len(await _opened(nats_settings)) == 1
    await _drop(database_settings, db_schema)


async def test_state_survives_a_restart_and_two_replicas_open_each_event_once(
    publisher: Publisher,
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    settings: EventDetectorSettings,
) -> None:
    runs = [f"run-{i}" for i in range(6)]
    # Before the restart: a baseline of step times for every run (whose slowdowns open as
    # soon as seen: this is about restarts and replicas, not materiality).
    async with serving(create_app(settings)):
        await publisher.publish_many([_run_created(run, immediate()) for run in runs])
        for step in range(0, 30, 10):
            await publisher.publish_many(
                [_points(run, [1.0] * 10, start=step, metric="step_time") for run in runs]
            )
        conn = await asyncpg.connect(database_settings.url)
        try:
            await wait_until(
                lambda: conn.fetchval(f"SELECT count(*) FROM {db_schema}.applied_messages"),
                accept=lambda n: n == 24,
            )
        finally:
            await conn.close()
    # After it, with two replicas sharing the consumers: every run regresses, and every
    # run's message is also published twice under new ids.
    async with serving(create_app(settings)), serving(create_app(settings)):
        slow = [_points(run, [2.0] * 10, start=30, metric="step_time") for run in runs]
        await publisher.publish_many(slow)
        await publisher.publish_many(
            [m.model_copy(update={"event_id": uuid.uuid4()}) for m in slow]
        )
        opened = await wait_until(
            lambda: _opened(nats_settings), accept=lambda events: len(events) >= len(runs)
        )
        await asyncio.sleep(0.5)  # time for a double to show up, if there were one
        opened = await _opened(nats_settings)
    assert sorted(o.event.run_id for o in opened) == runs
    assert {o.event.type for o in opened} == {EventType.PERFORMANCE_DEGRADATION}
    # the baseline came from before the restart
    assert {o.event.evidence.windows[0].baseline for o in opened} == {1.0}
    await _drop(database_settings, db_schema)


async def test_the_clock_finds_a_hang_with_project_rules_and_progress_resolves_it(
    publisher: Publisher,
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    settings: EventDetectorSettings,
) -> None:
    run_id = "run-hang"
    rules = MonitoringRules(
        rules={RuleName.HANG: RuleOverride(thresholds={"floorSeconds": 1.0, "stepFactor": 5})}
    )
    async with serving(create_app(settings)):
        await publisher.publish(MonitoringRulesChanged(project="p", location="l", rules=rules))
        run_created = _run_created(run_id)
        await publisher.publish(run_created)
        await asyncio.sleep(0.3)  # the run's project is known before its telemetry
        await publisher.publish(_points(run_id, [0.01] * 5, metric="step_time"))
        await publisher.publish(
            RunHeartbeat(
                run_id=run_id,
                host="h0",
                pid=7,
                interval_seconds=10,
                received_at=datetime.now(UTC),
            )
        )
        [hang] = await wait_until(lambda: _opened(nats_settings), timeout=10)
        assert hang.event.type is EventType.HANG
        assert hang.event.thresholds["floorSeconds"] == 1.0
        assert hang.event.evidence.facts["aliveHosts"] == ["h0"]
        await publisher.publish(_points(run_id, [0.01], start=5, metric="step_time"))
        [resolved] = await wait_until(lambda: _resolved(nats_settings))
        assert resolved.event.event_id == hang.event.event_id
    await _drop(database_settings, db_schema)


async def test_a_late_traceback_updates_the_termination_once_despite_redelivery(
    publisher: Publisher,
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    settings: EventDetectorSettings,
) -> None:
    run_id = "run-crash"
    now = datetime.now(UTC)
    failed = _run_created(run_id).run.model_copy(
        update={
            "run_phase": RunPhase.FAILED,
            "state": RunState.FAILED,
            "error_details": ErrorDetails(message="exited with status 1"),
        }
    )
    lines = [
        LogLine(time=now, host="h0", pid=7, stream=LogStream.STDERR, text=text)
        for text in (
            "Traceback (most recent call last):",
            '  File "/app/train.py", line 40, in train_step',
            "    raise ValueError('bad batch')",
            "ValueError: bad batch",
        )
    ]
    late = LogLinesReceived(run_id=run_id, lines=lines)
    async with serving(create_app(settings)):
        await publisher.publish(_points(run_id, [1.0] * 5, metric="step_time"))
        await publisher.publish(
            RunPhaseChanged(run=failed, previous_phase=RunPhase.ACTIVE, occurred_at=now)
        )
        [opened] = await wait_until(lambda: _opened(nats_settings))
        assert opened.event.type is EventType.TERMINATION
        await publisher.publish(late)
        await publisher.publish(late)  # a redelivered (or retried) batch: the same id
        [updated] = await wait_until(
            lambda: read_messages(nats_settings, bus.WORKLOAD_EVENT_UPDATED, WorkloadEventUpdated)
        )
        conn = await asyncpg.connect(database_settings.url)
        try:
            applied = f"SELECT count(*) FROM {db_schema}.applied_messages"
            await wait_until(lambda: conn.fetchval(applied), accept=lambda n: n == 3)
        finally:
            await conn.close()
        await asyncio.sleep(0.3)  # time for a double to show up, if there were one
        assert (
            len(
                await read_messages(nats_settings, bus.WORKLOAD_EVENT_UPDATED, WorkloadEventUpdated)
            )
            == 1
        )
    assert updated.event.event_id == opened.event.event_id
    assert updated.context is not None
    [excerpt] = updated.context.log_excerpts
    assert excerpt.kind == "traceback"
    assert excerpt.lines[-1] == "ValueError: bad batch"
    await _drop(database_settings, db_schema)


def _run_created(run_id: str, monitoring: MonitoringRules | None = None) -> RunCreated:
    now = datetime.now(UTC)
    return RunCreated(
        run=Run(
            name=f"projects/p/locations/l/machineLearningRuns/{run_id}",
            run_id=run_id,
            display_name=run_id,
            run_set="",
            labels={},
            run_phase=RunPhase.ACTIVE,
            state=RunState.ACTIVE,
            create_time=now,
            update_time=now,
            monitoring=monitoring or MonitoringRules(),
        )
    )
