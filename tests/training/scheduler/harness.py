"""A scheduler on real PostgreSQL and NATS, with fake executors at the bus's edge: test
code that announces on core NATS, takes commands from the DISPATCH work queue and reports
replica facts on TRAINING, as a real executor does."""

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from nats.js import JetStreamContext

from mldiag_platform.auth import TokenDirectory, open_token_directory
from mldiag_platform.bus import Bus, connect_bus
from mldiag_platform.database import apply_migrations, create_pool, load_migrations
from mldiag_platform.outbox import Outbox, outbox_migrations
from mldiag_platform.settings import DatabaseSettings, NatsSettings, StorageSettings
from mldiag_schemas import bus as subjects
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.jobs import JobState
from mldiag_schemas.messages import parse_message
from mldiag_schemas.replicas import (
    ExecutorAnnounced,
    ExitReason,
    ReplicaExited,
    ReplicaKey,
    ReplicaStarted,
    Resources,
    StartReplica,
    StopReplica,
)
from mldiag_training.scheduler import handlers
from mldiag_training.scheduler.machines import MachineTable
from mldiag_training.scheduler.repository import SchedulerRepository
from mldiag_training.scheduler.service import Scheduler
from support import wait_until

GIB = 1024**3


@dataclass(frozen=True)
class Settings:
    """The scheduler's settings, quick for tests."""

    public_api_url: str = "http://api.test:8080"
    machine_types: str = ""
    max_restarts: int = 3
    restart_backoff_seconds: float = 0.1
    restart_backoff_max_seconds: float = 0.4
    permanent_exit_codes: frozenset[int] = frozenset({126, 127})
    executor_timeout_seconds: float = 5.0
    stop_grace_seconds: float = 7.0
    tick_seconds: float = 0.1
    storage: StorageSettings = field(
        default_factory=lambda: StorageSettings(url="file:///srv/mldiag")
    )


def container_pool(count: int = 1, machine: str = "local-medium", **task: Any) -> dict[str, Any]:
    """A worker pool running a command."""
    return {
        "machineSpec": {"machineType": machine},
        "replicaCount": str(count),
        "containerSpec": {"imageUri": "python:3.12", "command": ["python", "-c", "pass"], **task},
    }


class FakeExecutor:
    """An executor as the bus sees it."""

    def __init__(
        self,
        bus: Bus,
        executor_id: str,
        cpus: float = 4,
        gib: int = 16,
        first_port: int = 20000,
        port_count: int = 100,
    ) -> None:
        self.bus = bus
        self.executor_id = executor_id
        self.capacity = Resources(cpus=cpus, memory_bytes=gib * GIB)
        self.first_port = first_port
        self.port_count = port_count
        self.running: set[ReplicaKey] = set()
        self.commands: list[Envelope] = []
        self._announcer: asyncio.Task[None] | None = None
        self._subscription: JetStreamContext.PullSubscription | None = None

    def announcement(self) -> ExecutorAnnounced:
        """What it says about itself now."""
        return ExecutorAnnounced(
            executor_id=self.executor_id,
            backend="local",
            address=f"{self.executor_id}.test",
            capacity=self.capacity,
            first_port=self.first_port,
            port_count=self.port_count,
            running=sorted(self.running, key=lambda k: (k.job_id, k.pool, k.index, k.attempt)),
            interval_seconds=0.2,
        )

    async def announce(self) -> None:
        """Announce once, on core NATS."""
        await self.bus.notify(subjects.EXECUTOR_ANNOUNCED, self.executor_id, self.announcement())

    async def start_announcing(self) -> None:
        """Announce every 0.2 s, like a real executor (every 2 s)."""

        async def loop() -> None:
            while True:
                await self.announce()
                await asyncio.sleep(0.2)

        self._announcer = asyncio.create_task(loop())

    async def silence(self) -> None:
        """Stop announcing (the executor died)."""
        if self._announcer is not None:
            self._announcer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._announcer
            self._announcer = None

    async def close(self) -> None:
        """Stop announcing and taking commands (a pull left open stalls the drain)."""
        await self.silence()
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
            self._subscription = None

    async def take(self, timeout: float = 0.5) -> list[Envelope]:
        """Commands waiting on its DISPATCH subject (acked: the work queue drops them)."""
        if self._subscription is None:
            js = self.bus.broker.config.connection_state.stream
            self._subscription = await js.pull_subscribe(
                self.bus.namespace.subject("dispatch.replica.*", self.executor_id),
                durable=self.bus.namespace.durable(f"fake-{self.executor_id}"),
                stream=self.bus.namespace.stream(subjects.DISPATCH),
            )
        try:
            raws = await self._subscription.fetch(100, timeout=timeout)
        except TimeoutError:
            return []
        taken = []
        for raw in raws:
            await raw.ack()
            taken.append(parse_message(raw.data))
        self.commands.extend(taken)
        return taken

    async def wait_commands(self, count: int, timeout: float = 15.0) -> list[Envelope]:
        """Wait until ``count`` commands have come in all; return all so far."""

        async def probe() -> int:
            await self.take(0.2)
            return len(self.commands)

        await wait_until(probe, lambda n: n >= count, timeout=timeout)
        return self.commands

    def starts(self) -> list[StartReplica]:
        """The StartReplica commands taken so far."""
        return [c for c in self.commands if isinstance(c, StartReplica)]

    def stops(self) -> list[StopReplica]:
        """The StopReplica commands taken so far."""
        return [c for c in self.commands if isinstance(c, StopReplica)]

    async def started(self, key: ReplicaKey) -> ReplicaStarted:
        """Report an attempt started."""
        self.running.add(key)
        fact = ReplicaStarted(
            replica=key,
            executor_id=self.executor_id,
            host=f"{self.executor_id}-host",
            started_at=datetime.now(UTC),
        )
        await self.bus.publisher.publish(fact)
        return fact

    async def exited(
        self, key: ReplicaKey, code: int | None, reason: ExitReason = "exited", message: str = ""
    ) -> ReplicaExited:
        """Report an attempt ended."""
        self.running.discard(key)
        fact = ReplicaExited(
            replica=key,
            executor_id=self.executor_id,
            reason=reason,
            exit_code=code,
            message=message,
            ended_at=datetime.now(UTC),
        )
        await self.bus.publisher.publish(fact)
        return fact


@dataclass
class Harness:
    """Everything a scheduler test drives."""

    pool: asyncpg.Pool
    bus: Bus
    directory: TokenDirectory
    scheduler: Scheduler
    settings: Settings
    schema: str
    fakes: list[FakeExecutor] = field(default_factory=list)

    def executor(self, executor_id: str, **kw: Any) -> FakeExecutor:
        """A fake executor on this bus (silenced when the harness closes)."""
        fake = FakeExecutor(self.bus, executor_id, **kw)
        self.fakes.append(fake)
        return fake

    async def create_job(
        self,
        pools: list[dict[str, Any]],
        *,
        run_ready: bool = True,
        timeout: timedelta = timedelta(days=7),
        scheduling: dict[str, Any] | None = None,
        nudge: bool = True,
        created: datetime | None = None,
    ) -> str:
        """Insert a QUEUED job as the jobs room does; with its run ready, reconcile at once."""
        job_id = str(random.randrange(10**17, 10**18))
        now = created or datetime.now(UTC)
        spec: dict[str, Any] = {"workerPoolSpecs": pools}
        if scheduling:
            spec["scheduling"] = scheduling
        await self.pool.execute(
            "INSERT INTO custom_jobs (job_id, project, location, display_name, spec, state,"
            " run_ready, deadline, create_time, update_time)"
            " VALUES ($1, 'proj', 'us-central1', 'job', $2::jsonb, $3, $4, $5, $6, $6)",
            job_id,
            json.dumps(spec),
            JobState.QUEUED.value,
            run_ready,
            now + timeout,
            now,
        )
        if nudge and run_ready:  # as run_created would: a job whose run exists is placed
            await self.scheduler.reconcile()
        return job_id

    async def request_cancel(self, job_id: str) -> None:
        """Cancel as the jobs room does: the flag, CANCELLING, then the nudge."""
        await self.pool.execute(
            "UPDATE custom_jobs SET cancel_requested = true, state = $2"
            " WHERE job_id = $1 AND state = ANY($3::text[])",
            job_id,
            JobState.CANCELLING.value,
            [JobState.QUEUED.value, JobState.PENDING.value, JobState.RUNNING.value],
        )
        await self.scheduler.cancel_requested(job_id)

    async def job(self, job_id: str) -> asyncpg.Record:
        """The job's row."""
        row = await self.pool.fetchrow("SELECT * FROM custom_jobs WHERE job_id = $1", job_id)
        assert row is not None
        return row

    async def state(self, job_id: str) -> JobState:
        """The job's state."""
        return JobState((await self.job(job_id))["state"])

    async def wait_state(self, job_id: str, state: JobState, timeout: float = 15.0) -> None:
        """Wait for the job to reach ``state``."""

        async def probe() -> JobState:
            return await self.state(job_id)

        await wait_until(probe, lambda s: s == state, timeout=timeout)

    async def replicas(self, job_id: str) -> list[asyncpg.Record]:
        """The job's replica rows by pool and index."""
        return list(
            await self.pool.fetch(
                "SELECT * FROM replicas WHERE job_id = $1 ORDER BY pool, index", job_id
            )
        )

    async def error(self, job_id: str) -> dict[str, Any]:
        """The job's error."""
        raw = (await self.job(job_id))["error"]
        assert raw is not None
        value: dict[str, Any] = json.loads(raw)
        return value


@contextlib.asynccontextmanager
async def harness(
    database_settings: DatabaseSettings,
    db_schema: str,
    nats_settings: NatsSettings,
    *,
    tick: bool = True,
    **overrides: Any,
) -> AsyncIterator[Harness]:
    """A scheduler with its consumers registered and (unless ``tick=False``) its loop."""
    settings = Settings(**overrides)
    pool = await create_pool(database_settings, db_schema)
    try:
        await apply_migrations(
            pool,
            db_schema,
            [*load_migrations("training", "mldiag_training.migrations"), *outbox_migrations()],
        )
        async with (
            connect_bus(nats_settings, "training-test") as bus,
            open_token_directory(bus) as directory,
        ):
            outbox = Outbox(pool, bus.publisher)
            scheduler = Scheduler(
                repository=SchedulerRepository(pool, outbox),
                outbox=outbox,
                directory=directory,
                settings=settings,
                machines=MachineTable.from_settings(settings),
            )
            handlers.register(bus, scheduler)
            await bus.start()
            async with contextlib.AsyncExitStack() as stack:
                if tick:
                    await stack.enter_async_context(handlers.running(scheduler))
                running = Harness(pool, bus, directory, scheduler, settings, db_schema)
                try:
                    yield running
                finally:
                    for fake in running.fakes:
                        await fake.close()
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {db_schema} CASCADE")
        await pool.close()


async def joined(h: Harness, *executors: FakeExecutor) -> None:
    """Start the executors announcing and wait until the scheduler knows them all."""
    for executor in executors:
        await executor.start_announcing()
    wanted = {executor.executor_id for executor in executors}

    async def probe() -> set[str]:
        rows = await h.pool.fetch("SELECT executor_id FROM executors")
        return {row["executor_id"] for row in rows}

    await wait_until(probe, lambda seen: wanted <= seen)
