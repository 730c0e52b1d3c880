"""A 202 means stored: ingestion, the registry and the detector on real NATS and PostgreSQL.

Before, ingestion accepted what the store refused: one request of 1,000 good points and one
step of 2**63 got ``acceptedPoints: 1001``, the whole bus message was dead-lettered with the
good points in it (0 stored), and the detector opened a HANG with that step as its endStep.
"""

import contextlib
import json
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from conftest import ApiTokens
from mldiag_event_detector.app import create_app as create_detector
from mldiag_event_detector.settings import EventDetectorSettings
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas.auth import Role
from mldiag_schemas.telemetry import MAX_STEP
from support import get_json, read_dead_letters, serving, wait_until

pytestmark = pytest.mark.connected

RUN = "stored-run"


@contextlib.asynccontextmanager
async def _platform(
    nats: NatsSettings, database: DatabaseSettings, tokens: ApiTokens
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    registry = RunRegistrySettings(
        nats=nats, database=database, db_schema=f"r_{uuid.uuid4().hex[:8]}"
    )
    detector = EventDetectorSettings(
        nats=nats, database=database, db_schema=f"d_{uuid.uuid4().hex[:8]}"
    )
    ingestion = IngestionSettings(nats=nats, otlp_grpc_port=0, otlp_http_port=0)
    async with (
        serving(create_registry(registry), tokens.headers(Role.ADMIN)) as api,
        serving(create_detector(detector)),
        serving(create_ingestion(ingestion), tokens.headers(Role.EDITOR)) as ingest,
    ):
        yield api, ingest


async def test_what_a_202_accepts_is_stored_and_nothing_is_dead_lettered(
    nats_settings: NatsSettings, database_settings: DatabaseSettings, api_tokens: ApiTokens
) -> None:
    async with _platform(nats_settings, database_settings, api_tokens) as (api, ingest):
        created = await api.post("/v1/machineLearningRuns", json={"runId": RUN, "displayName": RUN})
        assert created.status_code == 200, created.text
        body = {
            "series": [
                {
                    "name": "loss",
                    "host": "h0",
                    "steps": [*range(1000), MAX_STEP + 1],
                    "values": [1.0] * 1001,
                },
                {"name": "loss", "host": "h\x00", "steps": [5], "values": [1.0]},
                {
                    "name": "acc",
                    "host": "h0",
                    "steps": [5],
                    "values": [1.0],
                    "labels": {"k": "\x00"},
                },
            ]
        }
        written = await ingest.post(
            f"/v1/machineLearningRuns/{RUN}/metrics:write", content=json.dumps(body)
        )
        assert written.status_code == 202, written.text
        assert (written.json()["acceptedPoints"], written.json()["rejectedPoints"]) == (1000, 3)
        beat = {"host": "h0", "intervalSeconds": 5, "step": 999, "pid": 42}
        refused = await ingest.post(
            f"/v1/machineLearningRuns/{RUN}:heartbeat", json={**beat, "pid": 2**31}
        )
        assert refused.status_code == 400, refused.text
        beating = await ingest.post(f"/v1/machineLearningRuns/{RUN}:heartbeat", json=beat)
        assert beating.status_code == 204, beating.text

        metrics = await wait_until(
            lambda: get_json(api, f"/v1/machineLearningRuns/{RUN}/metrics"),
            accept=lambda found: [m["pointCount"] for m in found.get("metrics", [])] == [1000],
        )
        assert metrics["metrics"] == [{"name": "loss", "pointCount": 1000, "lastStep": 999}]
        beats = await wait_until(
            lambda: get_json(api, f"/v1/machineLearningRuns/{RUN}/heartbeats"),
            accept=lambda found: bool(found.get("heartbeats")),
        )
        assert [(b["host"], b["pid"], b["step"]) for b in beats["heartbeats"]] == [("h0", 42, 999)]
        events = await api.get(f"/v1/machineLearningRuns/{RUN}/events")
        assert events.status_code == 200, events.text
        assert str(MAX_STEP + 1) not in events.text  # no event ends at the refused step
        assert await read_dead_letters(nats_settings) == []
