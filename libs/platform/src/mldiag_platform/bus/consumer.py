"""Consuming: durable pull consumers whose batch handlers run inside the bus's error
boundary (retry with backoff, dead letters, a supervised pull loop)."""

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog
from faststream.nats import NatsBroker
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import BadRequestError
from prometheus_client import Counter, Gauge, Histogram

from mldiag_platform.bus.publishing import Publisher
from mldiag_platform.errors import MldiagError
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import DEADLETTER_PREFIX, Namespace, StreamSpec
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.messages import parse_message

log = structlog.get_logger(__name__)

M = TypeVar("M", bound=Envelope)

MESSAGES_HANDLED = Counter(
    "mldiag_bus_messages_handled_total", "Messages acked after handling.", ["durable"]
)
MESSAGES_RETRIED = Counter(
    "mldiag_bus_messages_retried_total", "Messages nacked for redelivery.", ["durable"]
)
MESSAGES_DEAD_LETTERED = Counter(
    "mldiag_bus_messages_dead_lettered_total", "Messages given up on.", ["durable"]
)
BATCH_SECONDS = Histogram(
    "mldiag_bus_batch_seconds", "Time to handle one pulled batch.", ["durable"]
)
CONSUMER_UP = Gauge(
    "mldiag_bus_consumer_up", "1 while the consumer's pull loop runs, else 0.", ["durable"]
)
CONSUMER_RESTARTS = Counter(
    "mldiag_bus_consumer_restarts_total",
    "Times a pull loop ended by surprise and was restarted.",
    ["durable"],
)
CONSUMER_PENDING = Gauge(
    "mldiag_bus_consumer_pending_messages",
    "Messages in the stream the consumer has not been given yet (its lag).",
    ["durable"],
)
CONSUMER_ACK_PENDING = Gauge(
    "mldiag_bus_consumer_ack_pending_messages",
    "Messages given to the consumer and not settled yet.",
    ["durable"],
)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

LAG_SAMPLE_SECONDS = 10.0
"""How often a consumer reads its lag from the server for the metrics."""

RESTART_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)
"""Waits before restarting a pull loop that ended by surprise, the last one repeated."""


@dataclass(frozen=True)
class Delivery(Generic[M]):
    """A decoded message with what the consumer knows about its delivery."""

    message: M
    subject: str
    num_delivered: int


BatchHandler = Callable[[list[Delivery[M]]], Awaitable[None]]


@dataclass(frozen=True)
class ConsumerSpec(Generic[M]):
    """A durable pull consumer over one base subject pattern of one stream."""

    stream: StreamSpec
    subject: str
    """Base subject pattern, e.g. ``telemetry.metrics.received.*``."""
    durable: str
    message_type: type[M]
    batch_size: int = 100
    max_wait_seconds: float = 0.2
    """How long a pull waits to fill a batch before handing over what it has."""


class Consumer(Generic[M]):
    """Runs a batch handler with retry, backoff and dead-lettering around it.

    The pull loop is our own, on the broker's nats-py connection, rather than faststream's
    subscriber: faststream 0.7.8 catches ``nats.errors.TimeoutError`` while nats-py 2.16's
    ``fetch`` can raise a plain ``asyncio.TimeoutError`` mid-batch, which kills faststream's
    loop and strands the messages already fetched until ``ack_wait`` expires.
    """

    def __init__(
        self,
        spec: ConsumerSpec[M],
        handler: BatchHandler[M],
        publisher: Publisher,
        namespace: Namespace,
        settings: NatsSettings,
    ) -> None:
        self.spec = spec
        self._handler = handler
        self._publisher = publisher
        self._namespace = namespace
        self._settings = settings
        self.durable = namespace.durable(spec.durable)
        self._log = log.bind(durable=self.durable)
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._subscription: JetStreamContext.PullSubscription | None = None
        self._js: JetStreamContext

    def consumer_config(self) -> ConsumerConfig:
        """The durable consumer's server-side configuration."""
        return ConsumerConfig(
            durable_name=self.durable,
            filter_subject=self._namespace.subject(self.spec.subject),
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self._settings.ack_wait_seconds,
            # Our own counter dead-letters at max_deliver; the server's limit is a backstop
            # for a message that kills the process before it can be settled.
            max_deliver=self._settings.max_deliver + 2,
            max_ack_pending=max(1000, self.spec.batch_size * 10),
        )

    @property
    def alive(self) -> bool:
        """Whether the pull loop is running (it restarts itself after a surprise end)."""
        return self._task is not None and not self._task.done()

    async def start(self, broker: NatsBroker) -> None:
        """Create (or update) the durable consumer and start pulling from it."""
        js = broker.config.connection_state.stream
        stream = self._namespace.stream(self.spec.stream)
        try:
            await js.add_consumer(stream, config=self.consumer_config())
        except BadRequestError as exc:  # an existing consumer whose config cannot change
            self._log.warning("bus.consumer.update_refused", error=str(exc))
        self._js = js
        self._subscription = await js.pull_subscribe_bind(self.durable, stream)
        self._task = asyncio.create_task(self._supervise(), name=self.durable)

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Finish the batch in hand (up to ``grace_seconds``), then stop pulling."""
        if self._task is None:
            return
        self._stopping.set()
        task, self._task = self._task, None
        if not task.done():  # a task cancelled from outside has nothing left to finish
            try:
                await asyncio.wait_for(asyncio.shield(task), grace_seconds)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        CONSUMER_UP.labels(self.durable).set(0)
        if self._subscription is not None:
            # Otherwise the connection's drain waits its full timeout on this inbox.
            await self._subscription.unsubscribe()
            self._subscription = None

    async def _supervise(self) -> None:
        """Run the pull loop until stopped; a loop that ends by surprise starts again, on a
        fresh subscription.

        Every known failure is settled inside the loop, so getting here means a bug or a
        failure nobody foresaw: without this the consumer would stop for good while the
        process, its health check and its ingestion door carried on as if nothing happened.
        """
        restarts = 0
        while not self._stopping.is_set():
            CONSUMER_UP.labels(self.durable).set(1)
            if self._subscription is None:  # stopped
                break
            try:
                await self._pull(self._subscription)
            except Exception:  # noqa: BLE001  # the loop's own boundary: restart it
                CONSUMER_UP.labels(self.durable).set(0)
                CONSUMER_RESTARTS.labels(self.durable).inc()
                delay = RESTART_BACKOFF_SECONDS[min(restarts, len(RESTART_BACKOFF_SECONDS) - 1)]
                restarts += 1
                self._log.exception("bus.consumer.restarting", attempt=restarts, delay_s=delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
                await self._resubscribe()
        CONSUMER_UP.labels(self.durable).set(0)

    async def _resubscribe(self) -> None:
        """Bind a new pull subscription, in case the old one is what broke; on failure keep
        the old one (the next restart tries again)."""
        stream = self._namespace.stream(self.spec.stream)
        try:
            fresh = await self._js.pull_subscribe_bind(self.durable, stream)
        except Exception as exc:  # noqa: BLE001  # NATS away: the next restart tries again
            self._log.warning("bus.consumer.resubscribe_failed", error=repr(exc))
            return
        old, self._subscription = self._subscription, fresh
        if old is not None:
            with contextlib.suppress(Exception):
                await old.unsubscribe()

    async def _pull(self, subscription: JetStreamContext.PullSubscription) -> None:
        lag_sampled_at = 0.0
        while not self._stopping.is_set():
            if time.monotonic() - lag_sampled_at >= LAG_SAMPLE_SECONDS:
                lag_sampled_at = time.monotonic()
                await self._sample_lag()
            try:
                raws = await subscription.fetch(
                    self.spec.batch_size, timeout=self.spec.max_wait_seconds
                )
            except TimeoutError:  # nothing to do (nats-py raises its own and asyncio's)
                continue
            except Exception as exc:  # noqa: BLE001  # reconnecting: keep pulling
                self._log.warning("bus.fetch.failed", error=repr(exc))
                await asyncio.sleep(1.0)
                continue
            try:
                await self._on_batch(raws)
            except Exception as exc:  # noqa: BLE001  # e.g. an ack lost in an outage
                # What was not settled comes back after ack_wait; keep pulling meanwhile.
                self._log.warning("bus.batch.unsettled", count=len(raws), error=repr(exc))
                await asyncio.sleep(1.0)

    async def _sample_lag(self) -> None:
        """Read the consumer's lag for the metrics; a failure only skips one sample."""
        try:
            info = await self._js.consumer_info(
                self._namespace.stream(self.spec.stream), self.durable, timeout=1.0
            )
        except Exception as exc:  # noqa: BLE001  # metrics must never stop the consumer
            self._log.debug("bus.lag.unavailable", error=repr(exc))
            return
        CONSUMER_PENDING.labels(self.durable).set(info.num_pending or 0)
        CONSUMER_ACK_PENDING.labels(self.durable).set(info.num_ack_pending or 0)

    async def _on_batch(self, raws: list[Msg]) -> None:
        started = time.perf_counter()
        pending: list[tuple[Msg, Delivery[M]]] = []
        for raw in raws:
            delivery = await self._decode(raw)
            if delivery is not None:
                pending.append((raw, delivery))
        if not pending:
            return
        # A long handler (a profile capture, a cache pre-warm) must not outlive ack_wait:
        # the server would redeliver the message to another replica while it still runs.
        try:
            async with self._in_progress([raw for raw, _ in pending]):
                await self._handler([delivery for _, delivery in pending])
        except Exception as exc:  # noqa: BLE001  # the bus error boundary: settle each message
            if len(pending) == 1:
                await self._settle_failure(*pending[0], exc)
            else:
                self._log.warning("bus.batch.failed", count=len(pending), error=repr(exc))
                # One at a time now, so the ones waiting their turn must stay in progress too.
                async with self._in_progress([raw for raw, _ in pending]):
                    for raw, delivery in pending:
                        await self._handle_one(raw, delivery)
        else:
            await asyncio.gather(*(raw.ack() for raw, _ in pending))
            MESSAGES_HANDLED.labels(self.durable).inc(len(pending))
        BATCH_SECONDS.labels(self.durable).observe(time.perf_counter() - started)
        self._log.debug(
            "bus.batch.handled",
            count=len(pending),
            duration_ms=round((time.perf_counter() - started) * 1000, 2),
        )

    @contextlib.asynccontextmanager
    async def _in_progress(self, raws: list[Msg]) -> AsyncIterator[None]:
        """While the body runs, tell the server every third of ack_wait that it still does."""
        pinger = asyncio.get_running_loop().create_task(self._keep_alive(raws))
        try:
            yield
        finally:
            pinger.cancel()

    async def _keep_alive(self, raws: list[Msg]) -> None:
        interval = self._settings.ack_wait_seconds / 3
        while True:
            await asyncio.sleep(interval)
            results = await asyncio.gather(
                *(raw.in_progress() for raw in raws), return_exceptions=True
            )
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                self._log.warning(
                    "bus.in_progress.failed", count=len(failed), error=repr(failed[0])
                )

    async def _handle_one(self, raw: Msg, delivery: Delivery[M]) -> None:
        try:
            await self._handler([delivery])
        except Exception as exc:  # noqa: BLE001  # the bus error boundary
            await self._settle_failure(raw, delivery, exc)
        else:
            await raw.ack()
            MESSAGES_HANDLED.labels(self.durable).inc()

    async def _decode(self, raw: Msg) -> Delivery[M] | None:
        try:
            message = parse_message(raw.data)
        except Exception as exc:  # noqa: BLE001  # whatever the bytes do, they are poison
            await self._dead_letter(raw, f"undecodable message: {type(exc).__name__}: {exc}")
            return None
        if not isinstance(message, self.spec.message_type):
            await self._dead_letter(raw, f"unexpected message type {message.type!r}")
            return None
        return Delivery(message, raw.subject, raw.metadata.num_delivered or 1)

    async def _settle_failure(self, raw: Msg, delivery: Delivery[M], exc: Exception) -> None:
        permanent = isinstance(exc, MldiagError) and not exc.retryable
        if permanent or delivery.num_delivered >= self._settings.max_deliver:
            reason = f"{type(exc).__name__}: {exc}"
            await self._dead_letter(raw, reason, attempts=delivery.num_delivered)
            return
        delay = self._settings.retry_backoff_seconds * 2 ** (delivery.num_delivered - 1)
        self._log.warning(
            "bus.message.retry",
            subject=delivery.subject,
            event_id=str(delivery.message.event_id),
            attempt=delivery.num_delivered,
            delay_s=delay,
            error=repr(exc),
        )
        await raw.nak(delay=delay)
        MESSAGES_RETRIED.labels(self.durable).inc()

    async def _dead_letter(self, raw: Msg, reason: str, attempts: int | None = None) -> None:
        """Republish to ``deadletter.<base subject>`` with the reason, then ack the original."""
        base = self._namespace.base_subject(raw.subject)
        stream_seq = raw.metadata.sequence.stream if raw.metadata.sequence else 0
        headers: dict[str, Any] = {
            # A header value is one line of printable text: an exception's message is not.
            "Mldiag-Reason": _CONTROL.sub(" ", reason)[:1000],
            "Mldiag-Original-Subject": raw.subject,
            "Mldiag-Consumer": self.durable,
            "Mldiag-Attempts": str(attempts or raw.metadata.num_delivered or 1),
        }
        await self._publisher.publish_raw(
            self._namespace.subject(DEADLETTER_PREFIX, base),
            raw.data,
            # one dead letter per (consumer, original message), however often we get here
            f"{self.durable}:{stream_seq}",
            headers,
        )
        await raw.ack()
        MESSAGES_DEAD_LETTERED.labels(self.durable).inc()
        self._log.error("bus.message.dead_lettered", subject=raw.subject, reason=reason)
