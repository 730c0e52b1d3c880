"""A service's connection to the bus: its broker, publisher and consumers, opened and
drained together."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import structlog
from faststream.nats import NatsBroker
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from mldiag_platform.bus.consumer import BatchHandler, Consumer, ConsumerSpec, M
from mldiag_platform.bus.publishing import Publisher, create_broker, declare_streams
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.base import Contract
from mldiag_schemas.bus import ALL_STREAMS, Namespace
from mldiag_schemas.messages import parse_message

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Bus:
    """A service's connection to the bus: its broker, namespace, publisher and consumers."""

    broker: NatsBroker
    namespace: Namespace
    publisher: Publisher
    settings: NatsSettings
    consumers: list[Consumer[Any]] = field(default_factory=list)
    followers: list[tuple[str, Callable[[str, bytes], Awaitable[None]]]] = field(
        default_factory=list
    )
    subscriptions: list[Subscription] = field(default_factory=list)

    def consume(self, spec: ConsumerSpec[M], handler: BatchHandler[M]) -> None:
        """Add a durable consumer running ``handler``; it pulls once :meth:`start` runs."""
        self.consumers.append(
            Consumer(spec, handler, self.publisher, self.namespace, self.settings)
        )

    def follow(
        self,
        base_pattern: str,
        message_type: type[M],
        handler: Callable[[M], Awaitable[None]],
    ) -> None:
        """Add a core NATS subscription (no stream, nothing kept: announcements that repeat)
        that :meth:`start` opens. Each message is parsed as a contract; one of another type,
        an unreadable one, or one whose handler fails is logged and dropped, never fatal."""

        async def deliver(subject: str, payload: bytes) -> None:
            try:
                message = parse_message(payload)
            except Exception as exc:  # noqa: BLE001  # nothing on core NATS is retried
                log.warning("bus.follow.unreadable", subject=subject[:200], error=str(exc)[:300])
                return
            if not isinstance(message, message_type):
                log.warning("bus.follow.unexpected", subject=subject[:200], type=message.type)
                return
            try:
                await handler(message)
            except Exception:  # the next repetition comes anyway
                log.exception("bus.follow.failed", subject=subject[:200])

        self.followers.append((base_pattern, deliver))

    async def start(self) -> None:
        """Start every consumer and open every follow subscription."""
        for consumer in self.consumers:
            await consumer.start(self.broker)
        for pattern, deliver in self.followers:
            self.subscriptions.append(await self.listen(pattern, deliver))

    async def stop_consumers(self) -> None:
        """Close follow subscriptions; let every consumer finish the batch in hand, then stop
        pulling."""
        for subscription in self.subscriptions:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        self.subscriptions.clear()
        await asyncio.gather(*(consumer.stop() for consumer in self.consumers))

    async def healthy(self) -> bool:
        """Health check: the connection answers a ping within a second and every consumer's
        pull loop is running."""
        return all(consumer.alive for consumer in self.consumers) and await self.broker.ping(
            timeout=1.0
        )

    async def notify(self, base_subject: str, token: str, hint: Contract) -> None:
        """Publish a hint on core NATS, in no stream: whoever listens now gets it, nobody
        later (live pages; never facts another service must not miss)."""
        client = self.broker.config.connection_state.connection
        subject = self.namespace.subject(base_subject, token)
        await client.publish(subject, hint.model_dump_json().encode())

    async def listen(
        self, base_pattern: str, callback: Callable[[str, bytes], Awaitable[None]]
    ) -> Subscription:
        """Follow a subject pattern on core NATS (stream subjects included: a core
        subscriber sees every publish). ``callback`` gets the base subject and the payload."""
        client = self.broker.config.connection_state.connection
        namespace = self.namespace

        async def deliver(message: Msg) -> None:
            await callback(namespace.base_subject(message.subject), message.data)

        subscription: Subscription = await client.subscribe(
            namespace.subject(base_pattern), cb=deliver
        )
        await client.flush()  # the server has it: nothing published from now on is missed
        return subscription


@asynccontextmanager
async def connect_bus(settings: NatsSettings, client_name: str) -> AsyncIterator[Bus]:
    """Connect, declare every stream, and drain the connection on exit."""
    namespace = Namespace(settings.namespace)
    broker = create_broker(settings, client_name)
    await broker.connect()
    try:
        await declare_streams(broker, namespace, ALL_STREAMS, settings.stream_replicas)
        bus = Bus(broker, namespace, Publisher(broker, namespace, settings), settings)
        try:
            yield bus
        finally:
            await bus.stop_consumers()
    finally:
        await broker.stop()
