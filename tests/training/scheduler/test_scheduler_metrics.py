"""The scheduler's gauges (jobs and replicas by state, live executors), as its reconcile
passes set them against real PostgreSQL and NATS: the Training dashboard's first row."""

from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_schemas.jobs import JobState
from support import wait_until
from training.scheduler.harness import Harness, container_pool, harness, joined

pytestmark = pytest.mark.connected


@pytest.fixture
async def h(
    database_settings: DatabaseSettings, db_schema: str, nats_settings: NatsSettings
) -> AsyncIterator[Harness]:
    async with harness(database_settings, db_schema, nats_settings) as running:
        yield running


def _gauges() -> dict[str, float]:
    found: dict[str, float] = {}
    for name in ("mldiag_training_jobs", "mldiag_training_replicas"):
        for state in ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING", "RUNNING", "PENDING"):
            value = REGISTRY.get_sample_value(name, {"state": state})
            if value is not None:
                found[f"{name}{{{state}}}"] = value
    found["executors"] = REGISTRY.get_sample_value("mldiag_training_executors_live") or 0.0
    return found


async def test_a_pass_counts_jobs_and_replicas_by_state_and_live_executors(h: Harness) -> None:
    queued = await h.create_job([container_pool(1)])  # no executor yet: it queues

    async def gauges() -> dict[str, float]:
        return _gauges()

    before = await wait_until(
        gauges, lambda g: g.get("mldiag_training_jobs{JOB_STATE_QUEUED}") == 1
    )
    assert before["executors"] == 0
    ex = h.executor("exec-metrics")
    await joined(h, ex)
    await h.wait_state(queued, JobState.PENDING)
    await ex.wait_commands(1)
    await ex.started(ex.starts()[0].replica)
    await h.wait_state(queued, JobState.RUNNING)
    after = await wait_until(gauges, lambda g: g.get("mldiag_training_replicas{RUNNING}") == 1)
    assert after["mldiag_training_jobs{JOB_STATE_RUNNING}"] == 1
    assert after["mldiag_training_jobs{JOB_STATE_QUEUED}"] == 0  # a state left is set to 0
    assert after["mldiag_training_replicas{PENDING}"] == 0
    assert after["executors"] == 1
