"""The bus against a real NATS server: dedupe, retry, dead-lettering, poison isolation."""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import nats
import pytest
from prometheus_client import REGISTRY

from mldiag_platform.bus import BatchHandler, Bus, ConsumerSpec, Delivery, Publisher, connect_bus
from mldiag_platform.errors import InvalidArgument, Unavailable
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import METRICS_RECEIVED, TELEMETRY
from mldiag_schemas.columnar import CONTENT_TYPE
from mldiag_schemas.messages import encode_message, parse_message
from mldiag_schemas.telemetry import MetricColumns, MetricPoint, MetricPointsReceived
from support import read_dead_letters, wait_until

pytestmark = pytest.mark.connected

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = ConsumerSpec(
    stream=TELEMETRY,
    subject=METRICS_RECEIVED + ".*",
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
async def bus(nats_settings: NatsSettings) -> AsyncIterator[Bus]:
    async with connect_bus(nats_settings, "test") as connected:
        yield connected


async def _stream_messages(url: str, stream: str) -> int:
    client = await nats.connect(url)
    try:
        info = await client.jetstream().stream_info(stream)
        return info.state.messages
    finally:
        await client.close()


async def test_republishing_the_same_event_id_stores_one_message(
    bus: Bus, nats_settings: NatsSettings
) -> None:
    publisher = bus.publisher
    message = _message()
    await publisher.publish(message)
    await publisher.publish(message)
    await publisher.publish(_message())
    stored = await _stream_messages(nats_settings.url, bus.namespace.stream(TELEMETRY))
    assert stored == 2


async def test_metric_points_travel_as_frames_with_their_content_type(
    bus: Bus, nats_settings: NatsSettings
) -> None:
    message = _message(float("nan"))
    await bus.publisher.publish(message)
    client = await nats.connect(nats_settings.url)
    try:
        stored = await client.jetstream().get_last_msg(
            bus.namespace.stream(TELEMETRY), bus.publisher.subject_for(message)
        )
    finally:
        await client.close()
    assert stored.headers is not None
    assert stored.headers["Content-Type"] == CONTENT_TYPE
    assert stored.data is not None
    assert stored.data.startswith(b"MLDC")
    [columns] = parse_message(stored.data).series  # type: ignore[attr-defined]
    assert list(columns.steps) == [1]


async def _run_consumer(bus: Bus, handler: BatchHandler[MetricPointsReceived]) -> Publisher:
    bus.consume(SPEC, handler)
    await bus.start()
    return bus.publisher


async def test_a_failing_message_is_retried_then_dead_lettered_and_the_rest_flow(
    bus: Bus, nats_settings: NatsSettings
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

    publisher = await _run_consumer(bus, handler)
    await publisher.publish(poison)
    await publisher.publish(good)

    letters = await wait_until(lambda: read_dead_letters(nats_settings), timeout=20)
    [letter] = letters
    assert letter.headers is not None
    assert "cannot handle negative values" in letter.headers["Mldiag-Reason"]
    assert letter.headers["Mldiag-Attempts"] == str(nats_settings.max_deliver)
    assert (
        letter.subject == f"{nats_settings.namespace}.deadletter.telemetry.metrics.received.run-1"
    )
    assert parse_message(letter.data).event_id == poison.event_id
    assert attempts[poison.event_id] == nats_settings.max_deliver
    # the good message, pulled in the same batch as the poison one, was handled exactly once
    assert handled.count(good.event_id) == 1
    assert poison.event_id not in handled


async def test_undecodable_and_permanent_failures_are_dead_lettered_at_once(
    bus: Bus, nats_settings: NatsSettings
) -> None:
    handled: list[uuid.UUID] = []
    refused = _message(0.0)

    async def handler(deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        for delivery in deliveries:
            if delivery.message.event_id == refused.event_id:
                raise InvalidArgument("this message can never succeed")
        handled.extend(d.message.event_id for d in deliveries)

    publisher = await _run_consumer(bus, handler)
    subject = f"{nats_settings.namespace}.telemetry.metrics.received.run-1"
    await publisher.publish_raw(subject, b"{not json", "garbage-1")
    await publisher.publish(refused)
    after = _message(3.0)
    await publisher.publish(after)

    letters = await wait_until(
        lambda: read_dead_letters(nats_settings),
        accept=lambda found: len(found) == 2,
    )
    reasons = sorted(letter.headers["Mldiag-Reason"] for letter in letters if letter.headers)
    assert reasons[0].startswith("InvalidArgument: this message can never succeed")
    assert reasons[1].startswith("undecodable message")
    assert all(letter.headers and letter.headers["Mldiag-Attempts"] == "1" for letter in letters)
    await wait_until(lambda: asyncio.sleep(0, handled), accept=lambda h: after.event_id in h)


async def test_a_handler_running_past_ack_wait_gets_its_message_once(
    nats_settings: NatsSettings,
) -> None:
    # A profile capture can outlast ack_wait; the consumer's in-progress pings keep the
    # server from redelivering it meanwhile to another replica (here: a second, idle one).
    settings = nats_settings.model_copy(update={"ack_wait_seconds": 0.6})
    deliveries: list[uuid.UUID] = []
    done = asyncio.Event()

    async def slow(batch: list[Delivery[MetricPointsReceived]]) -> None:
        deliveries.extend(d.message.event_id for d in batch)
        await asyncio.sleep(2.0)  # more than three times ack_wait
        done.set()

    async with (
        connect_bus(settings, "test-slow") as first,
        connect_bus(settings, "test-2") as second,
    ):
        publisher = await _run_consumer(first, slow)
        await _run_consumer(second, slow)
        await publisher.publish(_message())
        await asyncio.wait_for(done.wait(), 10)
        await asyncio.sleep(1.0)  # a redelivery would have come by now
    assert len(deliveries) == 1


async def test_poison_bytes_are_dead_lettered_and_the_consumer_keeps_pulling(
    bus: Bus, nats_settings: NatsSettings
) -> None:
    # Each of these once escaped decoding and killed the pull task for good, silently.
    handled: list[uuid.UUID] = []

    async def handler(deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        handled.extend(d.message.event_id for d in deliveries)

    publisher = await _run_consumer(bus, handler)
    subject = f"{nats_settings.namespace}.telemetry.metrics.received.run-1"
    deep = b'{"type": "telemetry.metrics.received", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    v1_without_points = (
        b'{"type": "telemetry.metrics.received", "schemaVersion": 1, "runId": "run-1",'
        b' "batchId": "' + str(uuid.uuid4()).encode() + b'", "chunk": 0}'
    )
    frame = encode_message(_message(1.0))
    truncated_frame, bad_header = frame[:-1], frame[:9] + b"{" * (len(frame) - 9)
    # built without validation, as a buggy or hostile publisher would send it
    bad_columns = MetricColumns.model_construct(
        name="loss", host="", process_index=None, labels={}, steps=[-5], values=[1.0]
    )
    negative_step = encode_message(_message(1.0).model_copy(update={"series": [bad_columns]}))
    poisons = (deep, v1_without_points, b"[]", truncated_frame, bad_header, negative_step)
    for number, poison in enumerate(poisons):
        await publisher.publish_raw(subject, poison, f"poison-{number}")
    good = _message(1.0)
    await publisher.publish(good)

    letters = await wait_until(
        lambda: read_dead_letters(nats_settings),
        accept=lambda found: len(found) == len(poisons),
    )
    reasons = sorted(letter.headers["Mldiag-Reason"] for letter in letters if letter.headers)
    assert all(reason.startswith("undecodable message") for reason in reasons)
    assert any("nests too deep" in reason for reason in reasons)
    assert any("FrameError" in reason and "truncated" in reason for reason in reasons)
    assert any("header is not JSON" in reason for reason in reasons)
    assert any("steps must lie within" in reason for reason in reasons)
    # a dead letter keeps the frame's bytes as they came
    assert {letter.data for letter in letters} >= {truncated_frame, negative_step}
    await wait_until(lambda: asyncio.sleep(0, handled), accept=lambda h: good.event_id in h)
    assert await bus.healthy()


async def test_a_pull_loop_that_ends_by_surprise_is_restarted(
    bus: Bus, nats_settings: NatsSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    handled: list[uuid.UUID] = []

    async def handler(deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        handled.extend(d.message.event_id for d in deliveries)

    publisher = await _run_consumer(bus, handler)
    [consumer] = bus.consumers
    restarts = _sample("mldiag_bus_consumer_restarts_total", consumer.durable)
    first_subscription = consumer._subscription

    # Something nobody foresaw ends the loop: the next fetch raises past every handler.
    real_sample_lag = consumer._sample_lag
    monkeypatch.setattr(consumer, "_sample_lag", _raise_once(real_sample_lag))
    monkeypatch.setattr("mldiag_platform.bus.consumer.LAG_SAMPLE_SECONDS", 0.0)

    message = _message(5.0)
    await publisher.publish(message)
    await wait_until(lambda: asyncio.sleep(0, handled), accept=lambda h: message.event_id in h)
    assert _sample("mldiag_bus_consumer_restarts_total", consumer.durable) == restarts + 1
    assert consumer._subscription is not first_subscription  # in case the old one broke
    assert consumer.alive
    assert _sample("mldiag_bus_consumer_up", consumer.durable) == 1
    assert await bus.healthy()


async def test_a_dead_consumer_makes_the_service_unhealthy(bus: Bus) -> None:
    async def handler(deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        return None

    await _run_consumer(bus, handler)
    [consumer] = bus.consumers
    assert await bus.healthy()
    assert consumer._task is not None
    consumer._task.cancel()
    await asyncio.sleep(0.05)
    assert not consumer.alive
    assert not await bus.healthy()


async def test_a_newer_message_with_an_added_field_is_handled_not_dead_lettered(
    bus: Bus, nats_settings: NatsSettings
) -> None:
    handled: list[MetricPointsReceived] = []

    async def handler(deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        handled.extend(d.message for d in deliveries)

    publisher = await _run_consumer(bus, handler)
    message = _message(7.0)
    newer = json.loads(message.model_dump_json())
    newer["addedInNextVersion"] = {"shape": "unknown to this reader"}
    await publisher.publish_raw(
        publisher.subject_for(message), json.dumps(newer).encode(), str(message.event_id)
    )
    await wait_until(lambda: asyncio.sleep(0, handled), accept=lambda h: len(h) == 1)
    assert handled == [message]
    assert await read_dead_letters(nats_settings) == []


@pytest.mark.parametrize("run_id", ["a..b", "a\x0bb", "a b", "run-1\n"])
async def test_a_name_that_is_no_subject_token_is_refused_before_publishing(
    bus: Bus, run_id: str
) -> None:
    message = _message().model_copy(update={"run_id": run_id})
    with pytest.raises(InvalidArgument, match="not a valid resource id"):
        await bus.publisher.publish(message)
    with pytest.raises(InvalidArgument, match="not a valid subject"):
        await bus.publisher.publish_raw(f"{bus.namespace.prefix}.runs.x.{run_id}", b"{}", "x")
    assert await bus.healthy()  # the connection was never put at risk


def _sample(name: str, durable: str) -> float:
    return REGISTRY.get_sample_value(name, {"durable": durable}) or 0.0


def _raise_once(then: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    raised = False

    async def sample() -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise RuntimeError("a bug in the pull loop")
        await then()

    return sample


async def test_a_publish_the_bus_does_not_take_is_unavailable_not_a_crash(bus: Bus) -> None:
    # As when every node is down or a cluster is electing: nobody acknowledges the write.
    # Over HTTP that is a 503 to retry, not a 500.
    await bus.broker.config.connection_state.stream.delete_stream(bus.namespace.stream(TELEMETRY))
    with pytest.raises(Unavailable, match="did not take the message"):
        await bus.publisher.publish(_message())
