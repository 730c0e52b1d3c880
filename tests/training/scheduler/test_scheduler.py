"""The scheduler against real PostgreSQL and NATS, driven by real messages from fake
executors: placement, dispatch, facts, restarts, cancel, timeout, liveness, idempotency."""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mldiag_platform.auth import secret_hash
from mldiag_platform.errors import FailedPrecondition
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_schemas import bus as subjects
from mldiag_schemas.jobs import CustomJobSpec, JobState, ReplicaState
from mldiag_schemas.replicas import CustomJobStateChanged, ReplicaKey, StartReplica
from mldiag_schemas.runs import Run, RunCreated, RunPhase, RunState
from mldiag_training.scheduler.service import Scheduler
from support import read_messages, wait_until
from training.scheduler.harness import FakeExecutor, Harness, container_pool, harness, joined

pytestmark = pytest.mark.connected


@pytest.fixture
async def h(
    database_settings: DatabaseSettings, db_schema: str, nats_settings: NatsSettings
) -> AsyncIterator[Harness]:
    async with harness(database_settings, db_schema, nats_settings) as running:
        yield running


def _key(start: StartReplica) -> ReplicaKey:
    return start.replica


async def _running_job(h: Harness, ex: FakeExecutor, pools: list[dict[str, Any]], **kw: Any) -> str:
    """A job placed on ``ex`` with every replica reported started."""
    job_id: str = await h.create_job(pools, **kw)
    count = sum(int(p["replicaCount"]) for p in pools if p)
    await ex.wait_commands(len(ex.commands) + count)
    for start in ex.starts()[-count:]:
        await ex.started(start.replica)
    await h.wait_state(job_id, JobState.RUNNING)
    return job_id


async def _states(h: Harness, job_id: str) -> list[tuple[JobState, JobState]]:
    messages = await read_messages(
        h.bus.settings, subjects.JOB_STATE_CHANGED, CustomJobStateChanged
    )
    return [(m.previous_state, m.state) for m in messages if m.job_id == job_id]


async def test_gang_waits_for_its_run_and_for_room_then_spreads(h: Harness) -> None:
    a = h.executor("exec-a", cpus=4.5, gib=17)
    await joined(h, a)
    big = await h.create_job([container_pool(1, "local-large"), container_pool(1, "local-large")])
    not_ready = await h.create_job([container_pool(1, "local-small")], run_ready=False)
    await asyncio.sleep(0.5)
    assert await h.state(big) == JobState.QUEUED  # 8 CPUs asked, 4 there: the gang waits
    assert await h.state(not_ready) == JobState.QUEUED  # room, but no run yet
    assert await h.replicas(big) == []

    now = datetime.now(UTC)
    run = Run(
        name=f"projects/proj/locations/us-central1/machineLearningRuns/{not_ready}",
        run_id=not_ready,
        display_name="job",
        run_set="training-jobs",
        labels={},
        run_phase=RunPhase.ACTIVE,
        state=RunState.ACTIVE,
        create_time=now,
        update_time=now,
    )
    await h.bus.publisher.publish(RunCreated(run=run))
    await h.wait_state(not_ready, JobState.PENDING)  # skip-ahead: the small one goes first

    b = h.executor("exec-b", cpus=4)
    await joined(h, b)
    await h.wait_state(big, JobState.PENDING)
    rows = await h.replicas(big)
    assert {row["executor_id"] for row in rows} == {"exec-a", "exec-b"}
    await b.wait_commands(1)
    start = b.starts()[0]
    assert start.replica.job_id == big
    assert start.launch.command == ["python", "-c", "pass"]
    assert start.launch.resources.cpus == 4
    assert start.launch.logs_uri.endswith(
        f"/jobs/{big}/logs/workerpool{start.replica.pool}-0/attempt-0"
    )
    cluster = json.loads(start.launch.env["CLUSTER_SPEC"])["cluster"]
    ports = {row["executor_id"]: row["port"] for row in rows}
    assert sorted(addr for pool in cluster.values() for addr in pool) == sorted(
        f"{executor}.test:{port}" for executor, port in ports.items()
    )
    token = start.run_token.get_secret_value()
    assert start.launch.env["MLDIAG_TOKEN"] == token
    principal = await h.directory.authenticate(token)
    assert principal.token_id == f"job-{big}"
    assert await _states(h, big) == [(JobState.QUEUED, JobState.PENDING)]


async def test_ports_on_one_executor_are_unique(h: Harness) -> None:
    a = h.executor("exec-p", cpus=64, port_count=5)
    await joined(h, a)
    first = await h.create_job([container_pool(1, "local-small"), container_pool(3, "local-small")])
    second = await h.create_job(
        [container_pool(1, "local-small"), container_pool(2, "local-small")]
    )
    await h.wait_state(first, JobState.PENDING)
    await asyncio.sleep(0.4)
    assert await h.state(second) == JobState.QUEUED  # 4 + 3 replicas, 5 ports
    ports = [row["port"] for row in await h.replicas(first)]
    assert sorted(ports) == [20000, 20001, 20002, 20003]


async def test_started_then_chief_exit_zero_succeeds_and_stops_the_others(h: Harness) -> None:
    ex = h.executor("exec-s")
    await joined(h, ex)
    job_id = await _running_job(h, ex, [container_pool(1), container_pool(2)])
    row = await h.job(job_id)
    assert row["start_time"] is not None
    replicas = await h.replicas(job_id)
    assert {r["state"] for r in replicas} == {ReplicaState.RUNNING.value}
    assert {r["host"] for r in replicas} == {"exec-s-host"}
    token = ex.starts()[0].run_token.get_secret_value()

    worker0 = ReplicaKey(job_id=job_id, pool=1, index=0, attempt=0)
    await ex.exited(worker0, 0)
    chief = ReplicaKey(job_id=job_id, pool=0, index=0, attempt=0)
    await ex.exited(chief, 0)
    await h.wait_state(job_id, JobState.SUCCEEDED)
    await ex.wait_commands(4)
    stops = ex.stops()
    assert [(s.replica.pool, s.replica.index, s.reason) for s in stops] == [(1, 1, "completed")]
    assert stops[0].grace_seconds == 7.0
    await ex.exited(stops[0].replica, 143, reason="killed")

    async def replica_states() -> list[str]:
        return [r["state"] for r in await h.replicas(job_id)]

    await wait_until(replica_states, lambda s: s == ["SUCCEEDED", "SUCCEEDED", "CANCELLED"])
    assert await _states(h, job_id) == [
        (JobState.QUEUED, JobState.PENDING),
        (JobState.PENDING, JobState.RUNNING),
        (JobState.RUNNING, JobState.SUCCEEDED),
    ]

    async def revoked() -> bool:
        try:
            await h.directory.authenticate(token)
        except Exception:  # noqa: BLE001  # unauthenticated: what we wait for
            return True
        return False

    await wait_until(revoked)
    assert (await h.job(job_id))["run_token"] is None
    assert await h.directory._fetch(secret_hash(token)) is None


async def test_failures_restart_with_backoff_then_fail(
    database_settings: DatabaseSettings, db_schema: str, nats_settings: NatsSettings
) -> None:
    async with harness(
        database_settings,
        db_schema,
        nats_settings,
        max_restarts=2,
        restart_backoff_seconds=0.3,
        restart_backoff_max_seconds=1.0,
    ) as h:
        ex = h.executor("exec-r")
        await joined(h, ex)
        job_id = await _running_job(h, ex, [container_pool(1)])
        first = ex.starts()[0]
        for attempt in (0, 1):
            key = ReplicaKey(job_id=job_id, pool=0, index=0, attempt=attempt)
            failed_at = datetime.now(UTC)
            await ex.exited(key, 1, message="Traceback ...\nValueError: boom")
            await ex.wait_commands(attempt + 2)
            restart = ex.starts()[-1]
            waited = (restart.occurred_at - failed_at).total_seconds()
            assert restart.replica.attempt == attempt + 1
            assert waited >= 0.3 * 2**attempt - 0.05  # the backoff doubles
            assert (restart.launch.port, restart.executor_id) == (first.launch.port, "exec-r")
            assert restart.launch.env["MLDIAG_ATTEMPT"] == str(attempt + 1)
            assert restart.run_token.get_secret_value() == first.run_token.get_secret_value()
            await ex.started(restart.replica)
        assert (await h.job(job_id))["restarts"] == 2
        await ex.exited(ReplicaKey(job_id=job_id, pool=0, index=0, attempt=2), 1, message="boom")
        await h.wait_state(job_id, JobState.FAILED)
        error = await h.error(job_id)
        assert error["code"] == 3
        assert "workerpool0-0" in error["message"]
        assert "non-zero status of 1" in error["message"]
        assert "boom" in error["message"]
        await asyncio.sleep(0.4)
        assert len(ex.starts()) == 3  # nothing after the end


async def test_a_permanent_exit_code_fails_at_once(h: Harness) -> None:
    ex = h.executor("exec-127")
    await joined(h, ex)
    job_id = await _running_job(h, ex, [container_pool(1)])
    await ex.exited(ReplicaKey(job_id=job_id, pool=0, index=0, attempt=0), 127)
    await h.wait_state(job_id, JobState.FAILED)
    assert "permanent" in (await h.error(job_id))["message"]
    assert (await h.job(job_id))["restarts"] == 0
    await asyncio.sleep(0.3)
    assert len(ex.starts()) == 1


async def test_disable_retries_fails_at_the_first_failure(h: Harness) -> None:
    ex = h.executor("exec-nr")
    await joined(h, ex)
    job_id = await _running_job(
        h, ex, [container_pool(1), container_pool(1)], scheduling={"disableRetries": True}
    )
    await ex.exited(ReplicaKey(job_id=job_id, pool=1, index=0, attempt=0), 2, "setup_failed")
    await h.wait_state(job_id, JobState.FAILED)
    assert (await h.error(job_id))["code"] == 9
    await ex.wait_commands(3)
    assert [(s.replica.pool, s.reason) for s in ex.stops()] == [(0, "failed")]


async def test_gang_restart_stops_everyone_and_restarts_all_together(h: Harness) -> None:
    ex = h.executor("exec-g")
    await joined(h, ex)
    job_id = await _running_job(
        h,
        ex,
        [container_pool(1), container_pool(2)],
        scheduling={"restartJobOnWorkerRestart": True},
    )
    await ex.exited(ReplicaKey(job_id=job_id, pool=1, index=1, attempt=0), 1)
    await ex.wait_commands(5)
    stops = ex.stops()
    assert sorted((s.replica.pool, s.replica.index, s.reason) for s in stops) == [
        (0, 0, "restart"),
        (1, 0, "restart"),
    ]
    await asyncio.sleep(0.4)
    assert len(ex.starts()) == 3  # nobody restarts while an old attempt still runs
    for stop in stops:
        await ex.exited(stop.replica, 143, reason="killed")
    await ex.wait_commands(8)
    restarted = ex.starts()[3:]
    assert sorted((s.replica.pool, s.replica.index, s.replica.attempt) for s in restarted) == [
        (0, 0, 1),
        (1, 0, 1),
        (1, 1, 1),
    ]
    assert (await h.job(job_id))["restarts"] == 1
    assert await h.state(job_id) == JobState.RUNNING


async def test_cancel_stops_replicas_then_cancels(h: Harness) -> None:
    ex = h.executor("exec-c")
    await joined(h, ex)
    job_id = await _running_job(h, ex, [container_pool(1), container_pool(1)])
    await h.request_cancel(job_id)
    await ex.wait_commands(4)
    stops = ex.stops()
    assert {(s.reason, s.grace_seconds) for s in stops} == {("cancelled", 7.0)}
    assert await h.state(job_id) == JobState.CANCELLING
    await ex.exited(stops[0].replica, 143, reason="killed")
    await asyncio.sleep(0.3)
    assert await h.state(job_id) == JobState.CANCELLING  # one is still running
    await ex.exited(stops[1].replica, 0)
    await h.wait_state(job_id, JobState.CANCELLED)
    assert (await h.error(job_id))["code"] == 1
    assert (await h.job(job_id))["end_time"] is not None


async def test_cancel_of_a_queued_job_is_immediate(h: Harness) -> None:
    job_id = await h.create_job([container_pool(1)])  # no executor: it queues
    assert await h.state(job_id) == JobState.QUEUED
    await h.request_cancel(job_id)
    assert await h.state(job_id) == JobState.CANCELLED


async def test_timeout_fails_with_deadline_exceeded(h: Harness) -> None:
    ex = h.executor("exec-t")
    await joined(h, ex)
    job_id = await _running_job(h, ex, [container_pool(1)], timeout=timedelta(seconds=1.5))
    await h.wait_state(job_id, JobState.FAILED)
    error = await h.error(job_id)
    assert error["code"] == 4
    await ex.wait_commands(2)
    assert [s.reason for s in ex.stops()] == ["timeout"]


async def test_a_lost_executor_restarts_its_replicas_elsewhere(
    database_settings: DatabaseSettings, db_schema: str, nats_settings: NatsSettings
) -> None:
    async with harness(
        database_settings, db_schema, nats_settings, executor_timeout_seconds=1.0
    ) as h:
        a, b = h.executor("exec-a", cpus=1), h.executor("exec-b", cpus=1)
        await joined(h, a)
        job_id = await _running_job(h, a, [container_pool(1)])
        await joined(h, b)
        await a.silence()
        await b.wait_commands(1)
        restart = b.starts()[0]
        assert (restart.replica.attempt, restart.executor_id) == (1, "exec-b")
        replica = (await h.replicas(job_id))[0]
        assert (replica["executor_id"], replica["restarts"]) == ("exec-b", 1)
        assert "went silent" in replica["message"]
        # The lost executor comes back still running the old attempt: it is told to stop.
        await a.start_announcing()
        await a.wait_commands(2)
        assert [(s.replica.attempt, s.reason) for s in a.stops()] == [(0, "superseded")]
        await a.silence()


async def test_stale_attempts_are_stopped(h: Harness) -> None:
    ex = h.executor("exec-x")
    await joined(h, ex)
    job_id = await _running_job(h, ex, [container_pool(1)])
    ghost = ReplicaKey(job_id=job_id, pool=0, index=0, attempt=5)
    await ex.started(ghost)
    await ex.wait_commands(2)
    assert [(s.replica, s.reason) for s in ex.stops()] == [(ghost, "superseded")]
    unknown = ReplicaKey(job_id="999", pool=1, index=3, attempt=0)
    ex.running.add(unknown)  # the next announcement lists it
    await ex.wait_commands(3)
    assert ex.stops()[-1].replica == unknown
    assert await h.state(job_id) == JobState.RUNNING


async def test_redelivered_facts_change_nothing(h: Harness) -> None:
    ex = h.executor("exec-d")
    await joined(h, ex)
    job_id = await _running_job(h, ex, [container_pool(1)])
    key = ReplicaKey(job_id=job_id, pool=0, index=0, attempt=0)
    fact = await ex.exited(key, 1)
    await ex.wait_commands(2)
    for _ in range(3):  # the same fact again, and a copy with a new event id
        await h.scheduler.replica_exited(fact)
        await h.scheduler.replica_exited(fact.model_copy(update={"event_id": uuid.uuid4()}))
    again = ex.starts()[-1]
    started = await ex.started(again.replica)
    await h.scheduler.replica_started(started)
    await h.scheduler.replica_started(started.model_copy(update={"event_id": uuid.uuid4()}))
    await asyncio.sleep(0.4)
    await ex.take()
    assert len(ex.starts()) == 2
    assert (await h.job(job_id))["restarts"] == 1
    replica = (await h.replicas(job_id))[0]
    assert (replica["attempt"], replica["state"]) == (1, "RUNNING")


async def test_terminal_states_are_sticky(h: Harness) -> None:
    ex = h.executor("exec-k")
    await joined(h, ex)
    job_id = await _running_job(h, ex, [container_pool(1), container_pool(1)])
    await ex.exited(ReplicaKey(job_id=job_id, pool=0, index=0, attempt=0), 0)
    await h.wait_state(job_id, JobState.SUCCEEDED)
    await ex.exited(ReplicaKey(job_id=job_id, pool=1, index=0, attempt=0), 1)
    await h.request_cancel(job_id)
    await h.pool.execute(
        "UPDATE custom_jobs SET deadline = now() - interval '1 hour' WHERE job_id = $1", job_id
    )
    await asyncio.sleep(0.5)
    assert await h.state(job_id) == JobState.SUCCEEDED
    assert (await h.job(job_id))["error"] is None
    assert [s for _, s in await _states(h, job_id)][-1] == JobState.SUCCEEDED
    assert len(ex.starts()) == 2


async def test_two_schedulers_never_double_book(
    database_settings: DatabaseSettings, db_schema: str, nats_settings: NatsSettings
) -> None:
    async with harness(database_settings, db_schema, nats_settings, tick=False) as h:
        ex = h.executor("exec-2", cpus=4)
        await joined(h, ex)
        jobs = [await h.create_job([container_pool(1)], nudge=False) for _ in range(10)]
        twin = Scheduler(
            repository=h.scheduler._repository,
            outbox=h.scheduler._outbox,
            directory=h.directory,
            settings=h.settings,
            machines=h.scheduler._machines,
        )
        await asyncio.gather(*(s.reconcile() for s in [h.scheduler, twin] * 3))
        placed = [job for job in jobs if await h.state(job) == JobState.PENDING]
        assert len(placed) == 4  # 4 CPUs, 1 each
        rows = await h.pool.fetch("SELECT port FROM replicas")
        assert len({row["port"] for row in rows}) == len(rows) == 4
        await ex.wait_commands(4)
        await asyncio.sleep(0.3)
        await ex.take()
        assert len(ex.starts()) == 4


async def test_refuse_unfittable(h: Harness) -> None:
    spec = CustomJobSpec.model_validate(
        {"workerPoolSpecs": [container_pool(1, "local-small"), container_pool(1, "n1-standard-8")]}
    )
    await h.scheduler.refuse_unfittable(spec)  # nobody known: it may queue
    await joined(h, h.executor("exec-u", cpus=4))
    with pytest.raises(FailedPrecondition) as caught:
        await h.scheduler.refuse_unfittable(spec)
    assert caught.value.message.startswith("jobSpec.workerPoolSpecs[1]")
    assert "the largest has 4 CPUs" in caught.value.message
    gang = CustomJobSpec.model_validate(
        {"workerPoolSpecs": [container_pool(1, "local-large"), container_pool(1, "local-large")]}
    )
    with pytest.raises(FailedPrecondition, match="never fit at once"):
        await h.scheduler.refuse_unfittable(gang)
    fits = CustomJobSpec.model_validate({"workerPoolSpecs": [container_pool(1, "local-large")]})
    await h.scheduler.refuse_unfittable(fits)


async def test_an_ended_jobs_replica_on_a_silent_executor_is_let_go(
    database_settings: DatabaseSettings, db_schema: str, nats_settings: NatsSettings
) -> None:
    async with harness(
        database_settings, db_schema, nats_settings, executor_timeout_seconds=1.0
    ) as h:
        a = h.executor("exec-l", cpus=1, gib=2)
        await joined(h, a)
        job_id = await _running_job(h, a, [container_pool(1)])
        await h.request_cancel(job_id)
        await a.wait_commands(2)
        await a.silence()  # dies before reporting the stopped attempt's exit
        await h.wait_state(job_id, JobState.CANCELLED)
        assert [r["state"] for r in await h.replicas(job_id)] == ["CANCELLED"]
        # Its capacity is free again: the next job fits when it comes back.
        await a.start_announcing()
        nxt = await h.create_job([container_pool(1)])
        await h.wait_state(nxt, JobState.PENDING)


async def test_a_start_after_the_cancel_is_stopped_again(h: Harness) -> None:
    ex = h.executor("exec-late")
    await joined(h, ex)
    job_id = await h.create_job([container_pool(1)])
    await ex.wait_commands(1)
    await h.request_cancel(job_id)  # the stop may reach the executor before the start
    await ex.wait_commands(2)
    await ex.started(ex.starts()[0].replica)
    await ex.wait_commands(3)
    assert [s.reason for s in ex.stops()] == ["cancelled", "superseded"]
    assert await h.state(job_id) == JobState.CANCELLING
    await ex.exited(ex.starts()[0].replica, 143, reason="killed")
    await h.wait_state(job_id, JobState.CANCELLED)


async def test_a_bad_announcement_is_dropped_and_the_next_one_heard(h: Harness) -> None:
    client = h.bus.broker.config.connection_state.connection
    await client.publish(h.bus.namespace.subject(subjects.EXECUTOR_ANNOUNCED, "junk"), b"{nope")
    ex = h.executor("exec-after-junk")
    await joined(h, ex)
    row = await h.pool.fetchrow(
        "SELECT address, first_port, port_count FROM executors WHERE executor_id = $1",
        "exec-after-junk",
    )
    assert row is not None
    assert tuple(row) == ("exec-after-junk.test", 20000, 100)
