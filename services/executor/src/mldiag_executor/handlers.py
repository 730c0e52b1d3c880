"""The executor's bus side: its own durable on the DISPATCH work queue, and announcing
itself on core NATS. The only module that knows about the bus."""

import asyncio
from collections import defaultdict

import structlog

from mldiag_executor.service import ExecutorService
from mldiag_platform.bus import Bus, ConsumerSpec, Delivery
from mldiag_schemas import bus
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.replicas import ReplicaKey, StartReplica, StopReplica

log = structlog.get_logger(__name__)


def dispatch_consumer(executor_id: str) -> ConsumerSpec[Envelope]:
    """``executor-<id>`` on ``dispatch.replica.*.<id>``: this executor's starts and stops.

    The message type is the envelope: the subject carries two commands, told apart here.
    """
    return ConsumerSpec(
        stream=bus.DISPATCH,
        subject=f"{bus.START_REPLICA.rsplit('.', 1)[0]}.*.{executor_id}",
        durable=bus.executor_durable(executor_id),
        message_type=Envelope,
        batch_size=32,
        max_wait_seconds=0.05,
    )


class BusHandlers:
    """The executor's handlers, bound to its service."""

    def __init__(self, service: ExecutorService) -> None:
        self._service = service

    async def on_commands(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Run a batch: one attempt's commands in order, different attempts at once (a
        package install for one job must not hold another job's stop)."""
        by_attempt: defaultdict[ReplicaKey, list[StartReplica | StopReplica]] = defaultdict(list)
        for delivery in deliveries:
            message = delivery.message
            if isinstance(message, StartReplica | StopReplica):
                by_attempt[message.replica].append(message)
            else:
                log.warning("executor.command.unknown", type=message.type)
        results = await asyncio.gather(
            *(self._run(commands) for commands in by_attempt.values()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result  # the consumer retries the batch one message at a time

    async def _run(self, commands: list[StartReplica | StopReplica]) -> None:
        for command in commands:
            structlog.contextvars.bind_contextvars(
                job=command.replica.job_id, event_id=str(command.event_id)
            )
            if isinstance(command, StartReplica):
                await self._service.start_replica(command)
            else:
                await self._service.stop_replica(command)


async def announce_forever(
    connection: Bus, service: ExecutorService, *, first_port: int, port_count: int, interval: float
) -> None:
    """``executors.announced.<id>`` on core NATS every ``interval`` seconds."""
    while True:
        message = service.announcement(
            first_port=first_port, port_count=port_count, interval_seconds=interval
        )
        try:
            await connection.notify(bus.EXECUTOR_ANNOUNCED, service.executor_id, message)
        except Exception as exc:  # noqa: BLE001  # NATS away: the next round tries again
            log.warning("executor.announce.failed", error=repr(exc))
        await asyncio.sleep(interval)
