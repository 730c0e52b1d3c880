"""Poison on the notifier's subjects: each message is dead-lettered once by the durable that
read it, the notifier stays healthy, and the next good event is notified."""

import asyncpg
import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.events import WorkloadEventOpened
from notifier.conftest import Receiver, known_run, make_event, make_run, webhook
from support import read_dead_letters, wait_until

pytestmark = pytest.mark.connected

DEEP = b'{"type": "events.workload.opened", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
NOT_JSON = b"\xff\xfe not json"
# subject -> the notifier durable that reads it
READERS = {
    bus.WORKLOAD_EVENT_OPENED: bus.NOTIFIER_EVENTS_DURABLE,
    bus.ANALYSIS_COMPLETED: bus.NOTIFIER_ANALYSES_DURABLE,
    bus.RUN_CREATED: bus.NOTIFIER_RUNS_DURABLE,
}


async def test_poison_is_dead_lettered_and_the_notifier_carries_on(
    notifier_api: httpx.AsyncClient,
    notifier_db: asyncpg.Pool,
    publisher: Publisher,
    nats_settings: NatsSettings,
    receiver: Receiver,
) -> None:
    namespace = nats_settings.namespace
    for base in READERS:
        for number, poison in enumerate((DEEP, NOT_JSON)):
            await publisher.publish_raw(f"{namespace}.{base}.r1", poison, f"{base}-{number}")
    letters = await wait_until(
        lambda: read_dead_letters(nats_settings),
        accept=lambda found: len(found) >= 2 * len(READERS),
        timeout=30,
    )
    by_reader = sorted(
        (letter.headers["Mldiag-Consumer"], letter.headers["Mldiag-Original-Subject"])
        for letter in letters
        if letter.headers
    )
    expected = sorted(
        (f"{namespace}-{durable}", f"{namespace}.{base}.r1")
        for base, durable in READERS.items()
        for _ in range(2)
    )
    assert by_reader == expected

    await known_run(publisher, notifier_db, make_run("r1"))
    await webhook(notifier_api, receiver)
    await publisher.publish(WorkloadEventOpened(event=make_event("r1")))
    await wait_until(lambda: _found(receiver))
    health = await notifier_api.get("/healthz")
    assert health.status_code == 200, health.text
    assert health.json()["checks"] == {"nats": True, "database": True, "dispatch": True}


async def _found(receiver: Receiver) -> bool:
    return bool(receiver.on("/hook"))
