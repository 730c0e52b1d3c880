"""The bus against a real NATS server: dedupe, retry, dead-lettering, poison isolation."""

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import nats
import pytest
from faststream.nats import NatsBroker
from nats.aio.msg import Msg

from mldiag_platform.bus import (
    Consumer,
    ConsumerSpec,
    Delivery,
    Publisher,
    create_broker,
    declare_streams,
)
from mldiag_platform.errors import InvalidArgument
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.bus import Namespace
from mldiag_schemas.telemetry import MetricPoint, MetricPointsReceived
from support import read_stream, wait_until

pytestmark = pytest.mark.connected

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = ConsumerSpec(
    stream=bus.TELEMETRY,
    subject=bus.METRICS_RECEIVED + ".*",
    durable="test-consumer",
    message_type=MetricPointsReceived,
    batch_size=10,
)


def _message(value: float = 1.0) -> MetricPointsReceived:
    return MetricPointsReceived(
        run_id="run-1",
        batch_id=uuid.uuid4(),
        chunk=0,
        points=[MetricPoint(name="loss", step=1, value=value, time=NOW)],
    )


@pytest.fixture
async def broker(nats_settings: NatsSettings) -> AsyncIterator[NatsBroker]:
    broker = create_broker(nats_settings, "test")
    await broker.connect()
    await declare_streams(broker, Namespace(nats_settings.namespace), bus.ALL_STREAMS)
    yield broker
    await broker.stop()


async def _stream_messages(url: str, stream: str) -> int:
    client = await nats.connect(url)
    try:
        info = await client.jetstream().stream_info(stream)
        return info.state.messages
    finally:
        await client.close()


async def _dead_letters(url: str, namespace: str) -> list[Msg]:
    return await read_stream(url, f"{namespace}.deadletter.>", f"{namespace.upper()}_DEADLETTER")


async def test_republishing_the_same_event_id_stores_one_message(
    broker: NatsBroker, nats_settings: NatsSettings
) -> None:
    namespace = Namespace(nats_settings.namespace)
    publisher = Publisher(broker, namespace, nats_settings)
    message = _message()
    await publisher.publish(message)
    await publisher.publish(message)
    await publisher.publish(_message())
    stored = await _stream_messages(nats_settings.url, namespace.stream(bus.TELEMETRY))
    assert stored == 2


async def _run_consumer(
    broker: NatsBroker, nats_settings: NatsSettings, handler: object
) -> Publisher:
    namespace = Namespace(nats_settings.namespace)
    publisher = Publisher(broker, namespace, nats_settings)
    Consumer(SPEC, handler, publisher, namespace, nats_settings).subscribe(broker)  # type: ignore[arg-type]
    await broker.start()
    return publisher


async def test_a_failing_message_is_retried_then_dead_lettered_and_the_rest_flow(
    broker: NatsBroker, nats_settings: NatsSettings
) -> None:
    poison, good = _message(-1.0), _message(2.0)
    attempts: dict[uuid.UUID, int] = {}
    handled: list[uuid.UUID] = []

    async def handler(deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        for delivery in deliveries:
            attempts[delivery.message.event_id] = delivery.num_delivered
            if delivery.message.points[0].value < 0:
                raise RuntimeError("cannot handle negative values")
        handled.extend(d.message.event_id for d in deliveries)

    publisher = await _run_consumer(broker, nats_settings, handler)
    await publisher.publish(poison)
    await publisher.publish(good)

    letters = await wait_until(
        lambda: _dead_letters(nats_settings.url, nats_settings.namespace), timeout=20
    )
    [letter] = letters
    assert letter.headers is not None
    assert "cannot handle negative values" in letter.headers["Mldiag-Reason"]
    assert letter.headers["Mldiag-Attempts"] == str(nats_settings.max_deliver)
    assert (
        letter.subject == f"{nats_settings.namespace}.deadletter.telemetry.metrics.received.run-1"
    )
    assert MetricPointsReceived.model_validate_json(letter.data).event_id == poison.event_id
    assert attempts[poison.event_id] == nats_settings.max_deliver
    # the good message, pulled in the same batch as the poison one, was handled exactly once
    assert handled.count(good.event_id) == 1
    assert poison.event_id not in handled


async def test_undecodable_and_permanent_failures_are_dead_lettered_at_once(
    broker: NatsBroker, nats_settings: NatsSettings
) -> None:
    handled: list[uuid.UUID] = []
    refused = _message(0.0)

    async def handler(deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        for delivery in deliveries:
            if delivery.message.event_id == refused.event_id:
                raise InvalidArgument("this message can never succeed")
        handled.extend(d.message.event_id for d in deliveries)

    publisher = await _run_consumer(broker, nats_settings, handler)
    subject = f"{nats_settings.namespace}.telemetry.metrics.received.run-1"
    await publisher.publish_raw(subject, b"{not json", "garbage-1")
    await publisher.publish(refused)
    after = _message(3.0)
    await publisher.publish(after)

    letters = await wait_until(
        lambda: _dead_letters(nats_settings.url, nats_settings.namespace),
        accept=lambda found: len(found) == 2,
    )
    reasons = sorted(letter.headers["Mldiag-Reason"] for letter in letters if letter.headers)
    assert reasons[0].startswith("InvalidArgument: this message can never succeed")
    assert reasons[1].startswith("undecodable message")
    assert all(letter.headers and letter.headers["Mldiag-Attempts"] == "1" for letter in letters)
    await wait_until(lambda: asyncio.sleep(0, handled), accept=lambda h: after.event_id in h)
