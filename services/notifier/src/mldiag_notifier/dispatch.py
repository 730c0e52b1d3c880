"""Sending: a loop that claims due deliveries, renders each notification, tries its channel
once and records the outcome (DELIVERED, RETRYING after a backoff, or DEAD). Nothing is
published: the delivery rows are the history."""

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import httpx
import structlog
from prometheus_client import Counter

from mldiag_notifier import channels
from mldiag_notifier.channels import DeliveryFailed, Outgoing
from mldiag_notifier.crypto import SecretBox
from mldiag_notifier.repository import DeliveryRow, NotifierRepository, StoredChannel
from mldiag_notifier.routing import backoff_seconds
from mldiag_notifier.settings import NotifierSettings
from mldiag_schemas.alerts import (
    DeliveryState,
    Notification,
    NotificationKind,
    NotifiedRun,
    TestChannelResponse,
    TopCause,
)
from mldiag_schemas.events import WorkloadEvent

log = structlog.get_logger(__name__)

ATTEMPTS = Counter(
    "mldiag_notifier_attempts_total",
    "Delivery attempts, by channel kind and outcome.",
    ["kind", "outcome"],
)


def console_link(public_url: str, run_id: str, event_id: uuid.UUID) -> str:
    """The event in the console (``#/runs/<run>/events/<event>``: the run's events tab with
    the event picked)."""
    return f"{public_url.rstrip('/')}/console/#/runs/{run_id}/events/{event_id}"


def summary(
    kind: NotificationKind, event: WorkloadEvent, run: NotifiedRun, grouped: int = 0
) -> str:
    """One line for people: ``OPEN · <event> · run <run>``."""
    shown = run.display_name or run.run_id
    if grouped > 1:
        return f"OPEN · {grouped} events on run {shown}: {event.display_name} and more"
    word = "RESOLVED" if kind is NotificationKind.RESOLVED else "OPEN"
    return f"{word} · {event.display_name} · run {shown} ({event.severity})"


class Dispatcher:
    """Sends due deliveries: polled every ``poll_seconds`` and woken when one is queued."""

    def __init__(
        self,
        repository: NotifierRepository,
        box: SecretBox,
        client: httpx.AsyncClient,
        settings: NotifierSettings,
    ) -> None:
        self._repository = repository
        self._box = box
        self._client = client
        self._settings = settings
        self._wakeup = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Look for due deliveries now rather than at the next poll."""
        self._wakeup.set()

    async def run(self) -> None:
        """Send due deliveries until :meth:`stop`; a failing round is logged, not fatal."""
        while not self._stopping:
            self._wakeup.clear()
            try:
                sent = await self.send_due()
            except Exception:  # the database may be away a moment: the next round retries
                log.exception("notifier.dispatch.failed")
                sent = 0
            if sent >= self._settings.send_batch or self._stopping:
                continue  # more may be due
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self._settings.poll_seconds)

    def start(self) -> None:
        """Start :meth:`run` as a task of its own."""
        self._task = asyncio.create_task(self.run(), name="notifier-dispatch")

    async def healthy(self) -> bool:
        """Health check: the send loop is running."""
        return self._task is not None and not self._task.done()

    def stop(self) -> None:
        """End :meth:`run` after the round in hand."""
        self._stopping = True
        self._wakeup.set()

    async def stopped(self, grace_seconds: float) -> None:
        """Wait for :meth:`run` to end after :meth:`stop` (cut short past the grace)."""
        if self._task is None:
            return
        try:
            await asyncio.wait_for(self._task, grace_seconds)
        except TimeoutError:
            log.warning("notifier.dispatch.cut_short")

    async def send_due(self) -> int:
        """Claim the due deliveries (one batch) and attempt each; returns how many."""
        rows = await self._repository.claim_due(
            self._settings.send_batch, self._settings.claim_seconds
        )
        await asyncio.gather(*(self._attempt(row) for row in rows))
        return len(rows)

    async def _attempt(self, row: DeliveryRow) -> None:
        delivery = row.delivery
        bound = log.bind(
            delivery_id=str(delivery.delivery_id),
            run=delivery.run_id,
            event_id=str(delivery.event_id),
            channel=delivery.channel,
            rule=delivery.rule,
            kind=delivery.kind.value,
        )
        attempts = delivery.attempts + 1
        stored = await self._repository.channel(row.project, row.location, delivery.channel)
        if stored is None or not stored.channel.enabled:
            reason = "the channel was deleted" if stored is None else "the channel is disabled"
            await self._repository.settle(
                delivery.delivery_id, DeliveryState.DEAD, attempts, reason
            )
            bound.info("notifier.delivery.dead", reason=reason)
            return
        try:
            outgoing = await self._outgoing(row)
            await self._send(stored, outgoing)
        except DeliveryFailed as failure:
            await self._failed(row, stored, attempts, failure, bound)
            return
        except Exception as exc:  # noqa: BLE001  # a bug in one channel must not stop the others
            bound.exception("notifier.delivery.crashed")
            crash = DeliveryFailed(f"internal error: {type(exc).__name__}")
            await self._failed(row, stored, attempts, crash, bound)
            return
        await self._repository.settle(delivery.delivery_id, DeliveryState.DELIVERED, attempts, "")
        ATTEMPTS.labels(stored.channel.kind.value, "delivered").inc()
        bound.info("notifier.delivery.delivered", attempts=attempts)

    async def _failed(
        self,
        row: DeliveryRow,
        stored: StoredChannel,
        attempts: int,
        failure: DeliveryFailed,
        bound: structlog.typing.FilteringBoundLogger,
    ) -> None:
        delivery_id = row.delivery.delivery_id
        if failure.permanent or attempts >= self._settings.max_attempts:
            await self._repository.settle(delivery_id, DeliveryState.DEAD, attempts, failure.reason)
            ATTEMPTS.labels(stored.channel.kind.value, "dead").inc()
            bound.warning("notifier.delivery.dead", attempts=attempts, reason=failure.reason)
            return
        wait = backoff_seconds(
            attempts, self._settings.backoff_seconds, self._settings.backoff_max_seconds
        )
        await self._repository.settle(
            delivery_id, DeliveryState.RETRYING, attempts, failure.reason, retry_in=wait
        )
        ATTEMPTS.labels(stored.channel.kind.value, "retrying").inc()
        bound.info(
            "notifier.delivery.retrying", attempts=attempts, reason=failure.reason, wait_s=wait
        )

    async def _send(self, stored: StoredChannel, outgoing: Outgoing) -> None:
        try:
            secrets = self._box.open(stored.sealed)
        except ValueError as exc:
            raise DeliveryFailed(str(exc), permanent=True) from None
        channel = stored.channel
        try:
            await channels.send(self._client, channel.kind, dict(channel.config), secrets, outgoing)
        except DeliveryFailed as failure:
            # A library's message may quote a URL that is itself the secret (Slack, Apprise).
            reason = failure.reason
            for value in secrets.values():
                if len(value) >= 4:
                    reason = reason.replace(value, "***")
            raise DeliveryFailed(reason, permanent=failure.permanent) from None

    async def _outgoing(self, row: DeliveryRow) -> Outgoing:
        """The notification of a delivery, rendered from what is stored now."""
        delivery, event = row.delivery, row.event
        if event is None:  # only TEST deliveries have none, and they are never queued
            raise DeliveryFailed("the delivery has no event", permanent=True)
        facts = await self._repository.run(event.run_id)
        run = NotifiedRun(
            run_id=event.run_id,
            name=facts.name if facts else "",
            display_name=facts.display_name if facts else "",
            run_set=facts.run_set if facts else "",
            labels=dict(facts.labels) if facts else {},
        )
        grouped = (
            await self._repository.grouped_events(delivery.delivery_id) if row.is_group else []
        )
        if grouped:
            event = grouped[0]
        cause: TopCause | None = None
        time_lost = event.time_lost_seconds
        if analysis := await self._repository.analysis(event.event_id):
            cause, time_lost = analysis[0], max(time_lost, analysis[1])
        notification = Notification(
            notification_id=delivery.delivery_id,
            kind=delivery.kind,
            summary=summary(delivery.kind, event, run, len(grouped)),
            event=event,
            run=run,
            top_cause=cause,
            time_lost_seconds=time_lost,
            link=console_link(self._settings.public_url, event.run_id, event.event_id),
            grouped=grouped,
            rule=delivery.rule,
            sent_time=datetime.now(UTC),
        )
        return self._outgoing_of(notification)

    def _outgoing_of(self, notification: Notification) -> Outgoing:
        return Outgoing(
            delivery_id=str(notification.notification_id),
            notification=notification,
            body=notification.model_dump_json(by_alias=True).encode(),
            timeout=self._settings.send_timeout_seconds,
        )

    async def send_test(
        self, project: str, location: str, stored: StoredChannel
    ) -> TestChannelResponse:
        """Send one TEST notification (no retries) and record it."""
        channel = stored.channel
        notification = Notification(
            notification_id=uuid.uuid4(),
            kind=NotificationKind.TEST,
            summary=f"TEST · mldiag notification channel {channel.display_name}",
            link=f"{self._settings.public_url.rstrip('/')}/console/",
            sent_time=datetime.now(UTC),
        )
        error = ""
        try:
            await self._send(stored, self._outgoing_of(notification))
        except DeliveryFailed as failure:
            error = failure.reason
        delivery = await self._repository.record_test(
            project, location, channel.channel_id, not error, error
        )
        ATTEMPTS.labels(channel.kind.value, "dead" if error else "delivered").inc()
        log.info(
            "notifier.channel.tested",
            channel=channel.channel_id,
            delivered=not error,
            reason=error,
        )
        return TestChannelResponse(delivered=not error, error=error, delivery=delivery)


@asynccontextmanager
async def running(dispatcher: Dispatcher, grace_seconds: float) -> AsyncIterator[None]:
    """Run the dispatcher's loop while the block runs; on exit let the round in hand finish
    (up to ``grace_seconds``: a send cut short is claimed again after the claim runs out)."""
    dispatcher.start()
    try:
        yield
    finally:
        dispatcher.stop()
        await dispatcher.stopped(grace_seconds)
