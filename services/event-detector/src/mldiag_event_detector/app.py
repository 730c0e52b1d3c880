"""Assembling event-detector: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from mldiag_event_detector import handlers
from mldiag_event_detector.repository import DetectorRepository
from mldiag_event_detector.service import DetectorService
from mldiag_event_detector.settings import EventDetectorSettings
from mldiag_platform.bus import connect_bus
from mldiag_platform.database import database_ok, load_migrations, open_database
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_platform.outbox import Outbox, outbox_migrations, running_sweeper

SERVICE = "event-detector"


def create_app(settings: EventDetectorSettings | None = None) -> FastAPI:
    """Build the detector app; connections open in its lifespan, not here."""
    settings = settings or EventDetectorSettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        migrations = [
            *outbox_migrations(),
            *load_migrations("event-detector", "mldiag_event_detector.migrations"),
        ]
        async with AsyncExitStack() as stack:
            pool = await stack.enter_async_context(
                open_database(settings.database, settings.db_schema, migrations)
            )
            bus = await stack.enter_async_context(connect_bus(settings.nats, SERVICE))
            outbox = Outbox(pool, bus.publisher)
            service = DetectorService(DetectorRepository(pool, outbox), outbox)
            bus.consume(
                handlers.metrics_consumer(settings.batch_size),
                handlers.BusHandlers(service).on_metrics,
            )
            await bus.start()
            await outbox.flush()  # whatever a crash left staged
            await stack.enter_async_context(running_sweeper(outbox))
            checks.update(nats=bus.healthy, database=lambda: database_ok(pool))
            stack.callback(checks.clear)
            yield

    return create_http_app(SERVICE, lifespan, checks)
