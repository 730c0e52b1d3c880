"""ingestion's bus door: IngestMetrics on ``telemetry.metrics.ingest.<run>`` → the same
MetricPointsReceived chunks as HTTP; a write that breaks a rule is dead-lettered."""

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from nats.aio.msg import Msg

from mldiag_ingestion.app import create_app
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import (
    ALL_STREAMS,
    DEADLETTER_PREFIX,
    METRICS_INGEST,
    METRICS_RECEIVED,
    Namespace,
)
from mldiag_schemas.telemetry import (
    IngestMetrics,
    MetricPointsReceived,
    MetricSeries,
    WriteMetricsRequest,
)
from support import read_messages, read_stream, serving, wait_until

pytestmark = pytest.mark.connected


def _command(**series: object) -> IngestMetrics:
    fields: dict[str, object] = {"name": "loss", "steps": [1, 2], "values": [0.5, 0.25], **series}
    return IngestMetrics(
        run_id="run-1", request=WriteMetricsRequest(series=[MetricSeries.model_validate(fields)])
    )


async def test_a_bus_write_becomes_stored_chunks_and_a_bad_one_a_dead_letter(
    nats_settings: NatsSettings, publisher: Publisher
) -> None:
    good = _command(labels={"device": "0"})
    future = datetime.now(UTC) + timedelta(days=2)
    bad = _command(steps=[3], values=[1.0], times=[future])
    async with serving(
        create_app(IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0))
    ):
        await publisher.publish_many([good, bad, good])  # the repeat is deduplicated

        async def stored() -> list[MetricPointsReceived]:
            return await read_messages(nats_settings, METRICS_RECEIVED, MetricPointsReceived)

        [message] = await wait_until(stored)
        assert message.batch_id == good.event_id  # no batchId: the command's id stands in
        assert [(p.step, p.labels) for p in message.points] == [
            (1, {"device": "0"}),
            (2, {"device": "0"}),
        ]
        namespace = Namespace(nats_settings.namespace)

        async def dead() -> list[Msg]:
            return await read_stream(
                nats_settings.url,
                namespace.subject(DEADLETTER_PREFIX, ">"),
                namespace.stream(ALL_STREAMS[-1]),
            )

        [letter] = await wait_until(dead)
        assert "TimestampInFuture" in (letter.headers or {})["Mldiag-Reason"]
        assert IngestMetrics.model_validate_json(letter.data).event_id == bad.event_id


async def test_a_bus_write_keeps_its_good_series_and_points_and_dead_letters_nothing(
    nats_settings: NatsSettings, publisher: Publisher
) -> None:
    command = {
        "type": "telemetry.metrics.ingest",
        "eventId": str(uuid.uuid4()),
        "runId": "run-1",
        "request": {
            "series": [
                {"name": "loss", "steps": [1, 2**63, 3], "values": [0.5, 0.4, 0.3]},
                {"name": "loss", "host": "h\x00", "steps": [1], "values": [0.5]},
                {"name": "loss", "steps": [4], "values": [0.2], "processIndex": 2**40},
            ]
        },
    }
    namespace = Namespace(nats_settings.namespace)
    async with serving(
        create_app(IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0))
    ):
        await publisher.publish_raw(
            namespace.subject(METRICS_INGEST, "run-1"),
            json.dumps(command).encode(),
            command["eventId"],
        )

        async def stored() -> list[MetricPointsReceived]:
            return await read_messages(nats_settings, METRICS_RECEIVED, MetricPointsReceived)

        [message] = await wait_until(stored)
        assert [(s.host, list(s.steps)) for s in message.series] == [("", [1, 3])]
        dead = await read_stream(
            nats_settings.url,
            namespace.subject(DEADLETTER_PREFIX, ">"),
            namespace.stream(ALL_STREAMS[-1]),
        )
        assert dead == []
