"""The scheduler's doors to the bus: runs created (a job's run exists), replica facts,
executors' announcements (core NATS); and the loop that ticks the reconcile."""

import asyncio
import contextlib

import structlog

from mldiag_platform.bus import Bus, ConsumerSpec, Delivery
from mldiag_platform.periodic import periodically
from mldiag_schemas import bus as subjects
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.replicas import ExecutorAnnounced, ReplicaExited, ReplicaStarted
from mldiag_schemas.runs import RunCreated
from mldiag_training.scheduler.service import Scheduler

log = structlog.get_logger(__name__)

RUNS_CONSUMER: ConsumerSpec[RunCreated] = ConsumerSpec(
    stream=subjects.RUNS,
    subject=subjects.RUN_CREATED + ".*",
    durable=subjects.TRAINING_RUNS_DURABLE,
    message_type=RunCreated,
)
REPLICAS_CONSUMER: ConsumerSpec[Envelope] = ConsumerSpec(
    stream=subjects.TRAINING,
    subject="training.replica.*.*",
    durable=subjects.TRAINING_REPLICAS_DURABLE,
    message_type=Envelope,
    # Facts are applied one at a time under the scheduler's lock: small batches keep the
    # ack wait far away.
    batch_size=20,
)
ANNOUNCEMENTS = subjects.EXECUTOR_ANNOUNCED + ".*"
"""Executors' announcements, on core NATS."""


class SchedulerBusHandler:
    """Hands facts to the scheduler, one at a time, with the job bound to the log."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    async def on_runs(self, deliveries: list[Delivery[RunCreated]]) -> None:
        """Mark the jobs whose runs now exist (other runs are ignored)."""
        for delivery in deliveries:
            await self._scheduler.run_created(delivery.message.run.run_id)

    async def on_replica_facts(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Apply ReplicaStarted and ReplicaExited (anything else on the subject is ignored)."""
        for delivery in deliveries:
            message = delivery.message
            with structlog.contextvars.bound_contextvars(
                subject=delivery.subject, event_id=str(message.event_id)
            ):
                if isinstance(message, ReplicaStarted):
                    await self._scheduler.replica_started(message)
                elif isinstance(message, ReplicaExited):
                    await self._scheduler.replica_exited(message)

    async def on_announced(self, message: ExecutorAnnounced) -> None:
        """Record an executor's announcement."""
        await self._scheduler.executor_announced(message)


def register(bus: Bus, scheduler: Scheduler) -> None:
    """Add the scheduler's consumers and its announcements subscription (both start with
    ``bus.start()``)."""
    handler = SchedulerBusHandler(scheduler)
    bus.consume(RUNS_CONSUMER, handler.on_runs)
    bus.consume(REPLICAS_CONSUMER, handler.on_replica_facts)
    bus.follow(ANNOUNCEMENTS, ExecutorAnnounced, handler.on_announced)


def running(scheduler: Scheduler) -> contextlib.AbstractAsyncContextManager[asyncio.Task[None]]:
    """Tick the scheduler every ``tick_seconds`` for the lifetime of the block (at once, then
    each interval; a failing pass is retried at the next tick, never fatal)."""
    return periodically(
        scheduler.tick,
        scheduler.tick_seconds,
        name="training-scheduler",
        failed="scheduler.tick_failed",
        first_now=True,
    )
