"""Assembling event-detector: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from mldiag_event_detector import handlers
from mldiag_event_detector.repository import DetectorRepository
from mldiag_event_detector.service import DetectorService
from mldiag_event_detector.settings import EventDetectorSettings
from mldiag_platform.bus import Consumer, Publisher, create_broker, declare_streams
from mldiag_platform.database import (
    apply_migrations,
    create_pool,
    database_ok,
    load_migrations,
)
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_platform.outbox import Outbox, outbox_migrations, running_sweeper
from mldiag_schemas.bus import ALL_STREAMS, Namespace

SERVICE = "event-detector"


def create_app(settings: EventDetectorSettings | None = None) -> FastAPI:
    """Build the detector app; connections open in its lifespan, not here."""
    settings = settings or EventDetectorSettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            pool = await create_pool(settings.database, settings.db_schema)
            stack.push_async_callback(pool.close)
            migrations = load_migrations("event-detector", "mldiag_event_detector.migrations")
            await apply_migrations(pool, settings.db_schema, [*outbox_migrations(), *migrations])

            namespace = Namespace(settings.nats.namespace)
            broker = create_broker(settings.nats, SERVICE)
            await broker.connect()
            stack.push_async_callback(broker.stop)
            await declare_streams(broker, namespace, ALL_STREAMS)

            publisher = Publisher(broker, namespace, settings.nats)
            outbox = Outbox(pool, publisher)
            service = DetectorService(DetectorRepository(pool, outbox), outbox)
            Consumer(
                handlers.metrics_consumer(settings.batch_size),
                handlers.BusHandlers(service).on_metrics,
                publisher,
                namespace,
                settings.nats,
            ).subscribe(broker)
            await broker.start()
            await outbox.flush()  # whatever a crash left staged
            await stack.enter_async_context(running_sweeper(outbox))

            checks["nats"] = lambda: broker.ping(timeout=1.0)
            checks["database"] = lambda: database_ok(pool)
            stack.callback(checks.clear)
            yield

    return create_http_app(SERVICE, lifespan, checks)
