"""Poison on the real subjects, read by the real consumers of the registry, the detector and
the analyzer: each is dead-lettered once per durable, every service stays healthy, and a NaN
sent afterwards (by a newer publisher, with fields these readers do not know) is stored and
still opens its event and gets its analysis.

Before, a message nested 100,000 levels deep or a v1 metrics message without points killed
the pull task of every durable that read it, silently: ingestion still answered 202, nothing
was stored, no event opened and ``/healthz`` stayed 200.
"""

import contextlib
import json
import math
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from conftest import ApiTokens
from mldiag_analyzer.app import create_app as create_analyzer
from mldiag_analyzer.settings import AnalyzerSettings
from mldiag_event_detector.app import create_app as create_detector
from mldiag_event_detector.settings import EventDetectorSettings
from mldiag_platform.bus import Publisher
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas import bus
from mldiag_schemas.auth import Role
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived
from support import get_json, read_dead_letters, serving, wait_until

pytestmark = pytest.mark.connected

RUN = "poisoned"
DEEP = b'{"type": "telemetry.metrics.received", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
V1_WITHOUT_POINTS = (
    b'{"type": "telemetry.metrics.received", "schemaVersion": 1, "runId": "poisoned",'
    b' "batchId": "8d8f5a9e-51a5-4a43-9d0c-1f1c1d1e1f10", "chunk": 0}'
)

# subject -> the durables that read it, each of which must dead-letter the poison once
READERS = {
    bus.METRICS_RECEIVED: {bus.REGISTRY_METRICS_DURABLE, bus.DETECTOR_METRICS_DURABLE},
    bus.HEARTBEAT_RECEIVED: {bus.REGISTRY_HEARTBEATS_DURABLE, bus.DETECTOR_HEARTBEATS_DURABLE},
    bus.RUN_CREATED: {bus.DETECTOR_RUNS_DURABLE},
    bus.WORKLOAD_EVENT_OPENED: {bus.REGISTRY_EVENTS_DURABLE, bus.ANALYZER_EVENTS_DURABLE},
}


@contextlib.asynccontextmanager
async def _platform(
    nats: NatsSettings, database: DatabaseSettings, tokens: ApiTokens
) -> AsyncIterator[list[httpx.AsyncClient]]:
    registry = RunRegistrySettings(
        nats=nats, database=database, db_schema=f"r_{uuid.uuid4().hex[:8]}"
    )
    detector = EventDetectorSettings(
        nats=nats, database=database, db_schema=f"d_{uuid.uuid4().hex[:8]}"
    )
    analyzer = AnalyzerSettings(nats=nats)
    async with (
        serving(create_registry(registry), tokens.headers(Role.ADMIN)) as api,
        serving(create_detector(detector)) as detector_client,
        serving(create_analyzer(analyzer)) as analyzer_client,
    ):
        yield [api, detector_client, analyzer_client]


async def test_poison_is_dead_lettered_by_every_reader_and_the_pipeline_flows_on(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    api_tokens: ApiTokens,
    publisher: Publisher,
) -> None:
    async with _platform(nats_settings, database_settings, api_tokens) as clients:
        api = clients[0]
        created = await api.post(
            "/v1/machineLearningRuns", json={"runId": RUN, "displayName": "poisoned"}
        )
        assert created.status_code == 200, created.text
        for base in READERS:
            subject = f"{nats_settings.namespace}.{base}.{RUN}"
            for number, poison in enumerate((DEEP, V1_WITHOUT_POINTS)):
                await publisher.publish_raw(subject, poison, f"{base}-{number}")

        letters = await wait_until(
            lambda: read_dead_letters(nats_settings),
            accept=lambda found: len(found) >= 2 * sum(len(d) for d in READERS.values()),
            timeout=30,
        )
        by_reader = {
            (letter.headers["Mldiag-Consumer"], letter.headers["Mldiag-Original-Subject"])
            for letter in letters
            if letter.headers
        }
        expected = {
            (f"{nats_settings.namespace}-{durable}", f"{nats_settings.namespace}.{base}.{RUN}")
            for base, durables in READERS.items()
            for durable in durables
        }
        assert expected <= by_reader

        nan = MetricPointsReceived(
            run_id=RUN,
            batch_id=uuid.uuid4(),
            chunk=0,
            series=[
                MetricColumns(name="loss", host="h0", steps=[1, 2, 3], values=[0.9, 0.8, math.nan])
            ],
        )
        # From a newer ingestion: a field these readers do not know yet, at two depths.
        newer = json.loads(nan.model_dump_json())
        newer["addedLater"] = {"any": "shape"}
        newer["series"][0]["unit"] = "nats"
        await publisher.publish_raw(
            publisher.subject_for(nan), json.dumps(newer).encode(), str(nan.event_id)
        )
        events = await wait_until(
            lambda: get_json(api, f"/v1/machineLearningRuns/{RUN}/events"),
            accept=lambda body: any(
                e.get("type") == "NUMERICAL_INSTABILITY" and e.get("analyzerInsightFound")
                for e in body.get("events", [])
            ),
            timeout=30,
        )
        [event] = events["events"]
        assert event["evidence"]["firstBadStep"] == 3
        points = await get_json(api, f"/v1/machineLearningRuns/{RUN}/metrics/loss")
        assert [p["step"] for p in points["points"]] == [1, 2, 3]
        for client in clients:
            health = await client.get("/healthz")
            assert health.status_code == 200, health.text
