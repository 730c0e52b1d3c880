"""Publishing: the broker, the streams' declarations, and a publisher that checks every
subject before anything is sent and waits for JetStream's ack."""

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import Protocol

import structlog
from faststream.nats import NatsBroker
from faststream.nats.security import NatsUserPassword
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StreamConfig
from nats.js.errors import APIError, BadRequestError, NotFoundError
from prometheus_client import Counter

from mldiag_platform.errors import InvalidArgument, Unavailable
from mldiag_platform.settings import NatsSettings
from mldiag_platform.substrate import inbox_prefix
from mldiag_schemas.bus import Namespace, StreamSpec, stream_of
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import is_resource_id
from mldiag_schemas.messages import SUBJECT_OF, content_type_of, encode_message

log = structlog.get_logger(__name__)

MESSAGES_PUBLISHED = Counter(
    "mldiag_bus_messages_published_total", "Messages published (acked by JetStream).", ["type"]
)
_SUBJECT = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
"""A concrete subject: plain tokens only (no wildcards, spaces or control characters)."""

DECLARE_BACKOFF_SECONDS = (1.0, 2.0, 4.0, 8.0)
RETENTION_UNCHANGEABLE = 10052
"""JetStream's error code for an update that changes a stream's retention (it answers 500)."""
"""Waits between attempts at declaring a stream, before a service gives up starting."""


def create_broker(settings: NatsSettings, client_name: str) -> NatsBroker:
    """The service's broker.

    faststream's per-message lines go out at DEBUG (we log our own events per batch), but
    its warnings and errors, such as a consume loop failing, still reach the log.
    """
    return NatsBroker(
        # Several servers (a cluster) come comma-separated; nats-py wants them as a list.
        [url.strip() for url in settings.url.split(",")],
        name=client_name,
        logger=logging.getLogger("faststream"),
        log_level=logging.DEBUG,
        connect_timeout=5,
        max_reconnect_attempts=-1,
        graceful_timeout=10.0,
        security=_credentials(settings),
        # Replies come to an inbox of the user's own: the only one its permissions let it read.
        inbox_prefix=inbox_prefix(settings.user),
    )


def _credentials(settings: NatsSettings) -> NatsUserPassword | None:
    if settings.user is None:
        return None  # an open server, as CI's
    password = settings.password.get_secret_value() if settings.password else ""
    return NatsUserPassword(settings.user, password)


def stream_config(namespace: Namespace, spec: StreamSpec, replicas: int = 1) -> StreamConfig:
    """The JetStream config of a shared stream definition."""
    return StreamConfig(
        name=namespace.stream(spec),
        description=spec.description,
        subjects=namespace.stream_subjects(spec),
        max_age=spec.max_age_seconds,
        duplicate_window=spec.duplicate_window_seconds,
        num_replicas=replicas,
        retention=RetentionPolicy(spec.retention),
    )


async def declare_streams(
    broker: NatsBroker, namespace: Namespace, specs: Sequence[StreamSpec], replicas: int = 1
) -> None:
    """Create or update the streams from their shared definitions (the one place they live).

    The broker must be connected. No faststream subscriber declares streams, so nothing
    merges or rewrites these definitions.
    """
    js = broker.config.connection_state.stream
    for spec in specs:
        config = stream_config(namespace, spec, replicas)
        for attempt, delay in enumerate((*DECLARE_BACKOFF_SECONDS, None), start=1):
            try:
                await _declare(js, config)
                break
            except (NatsError, TimeoutError) as exc:
                # A cluster still electing, or busy creating the same replicated stream for
                # another process that started at the same time: wait, then ask again.
                if delay is None:
                    raise
                log.warning(
                    "bus.stream.declare_retry", stream=config.name, attempt=attempt, error=repr(exc)
                )
                await asyncio.sleep(delay)


async def _declare(js: JetStreamContext, config: StreamConfig) -> None:
    try:
        await js.stream_info(config.name or "")
    except NotFoundError:
        await js.add_stream(config=config)
        log.info("bus.stream.created", stream=config.name, subjects=config.subjects)
    else:
        try:
            await js.update_stream(config=config)
        except BadRequestError as exc:
            log.warning("bus.stream.update_refused", stream=config.name, error=str(exc))
        except APIError as exc:
            if exc.err_code != RETENTION_UNCHANGEABLE:
                raise
            # A stream made by an older version with another retention (DISPATCH before it
            # was a work queue): it keeps working as it is; only re-creating it changes that.
            log.warning(
                "bus.stream.update_refused",
                stream=config.name,
                error=str(exc),
                wanted_retention=RetentionPolicy(config.retention).value,
                hint="the stream keeps its retention; `nats stream rm` it while the services "
                "are stopped to have it made anew",
            )


class MessagePublisher(Protocol):
    """What domain code needs to announce facts: publish and wait for the stream's ack."""

    async def publish_many(self, messages: Sequence[Envelope]) -> None:
        """Publish ``messages``; return once all are stored."""
        ...


class Publisher:
    """Publishes contract messages, namespaced, with ``Nats-Msg-Id`` = ``event_id``.

    ``publish`` returns only once JetStream has stored the message: callers answer their
    clients or ack their input after that, never before.
    """

    def __init__(self, broker: NatsBroker, namespace: Namespace, settings: NatsSettings) -> None:
        self._broker = broker
        self._namespace = namespace
        self._timeout = settings.publish_timeout_seconds

    def subject_for(self, message: Envelope) -> str:
        """The full subject of ``message``: namespace, base subject, run id.

        Raises :class:`InvalidArgument` when the partition (a run id or a project) is not a
        resource id: a dot would split it into tokens and a control character would break
        the NATS protocol, so such a name must be refused where it came in.
        """
        token = message.partition()
        if not is_resource_id(token):
            raise InvalidArgument(
                f"{token!r} is not a valid resource id (lowercase letters, digits and '-', "
                "at most 63 characters)",
                details=[{"field": "partition", "problem": "not a resource id"}],
            )
        return self._namespace.subject(SUBJECT_OF[type(message)], token)

    async def publish(self, message: Envelope) -> None:
        """Publish one message and wait for JetStream's ack.

        Metric points go as a binary columnar frame, everything else as JSON
        (:func:`~mldiag_schemas.messages.encode_message`); the ``Content-Type`` header says
        which, for people and tools reading the stream (readers sniff the bytes anyway).
        """
        await self.publish_raw(
            self.subject_for(message),
            encode_message(message),
            str(message.event_id),
            {"Content-Type": content_type_of(message)},
        )
        MESSAGES_PUBLISHED.labels(message.type).inc()

    async def publish_many(self, messages: Sequence[Envelope]) -> None:
        """Publish several messages concurrently; returns when all are acked."""
        await asyncio.gather(*(self.publish(message) for message in messages))

    async def publish_raw(
        self,
        subject: str,
        payload: bytes,
        msg_id: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Publish bytes already serialised (outbox rows, dead letters).

        Raises :class:`InvalidArgument` for a subject that is not plain tokens, before
        anything is sent: the server would drop the whole connection over it.
        """
        if _SUBJECT.fullmatch(subject) is None:
            raise InvalidArgument(f"{subject!r} is not a valid subject")
        base = self._namespace.base_subject(subject)
        try:
            await self._broker.publish(
                payload,
                subject,
                headers={"Nats-Msg-Id": msg_id, **(headers or {})},
                stream=self._namespace.stream(stream_of(base)),
                timeout=self._timeout,
            )
        except (NatsError, TimeoutError) as exc:
            # Callers answer 503 (retry later) or redeliver, never a 500: nothing was lost.
            raise Unavailable(f"the bus did not take the message: {exc!r}") from exc
