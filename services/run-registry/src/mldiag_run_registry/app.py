"""Assembling run-registry: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from mldiag_platform.bus import connect_bus
from mldiag_platform.database import database_ok, load_migrations, open_database
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_platform.outbox import Outbox, outbox_migrations, running_sweeper
from mldiag_run_registry import handlers
from mldiag_run_registry.repository import RunRepository
from mldiag_run_registry.service import RegistryService
from mldiag_run_registry.settings import RunRegistrySettings

SERVICE = "run-registry"


def create_app(settings: RunRegistrySettings | None = None) -> FastAPI:
    """Build the registry app; connections open in its lifespan, not here."""
    settings = settings or RunRegistrySettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        migrations = [
            *outbox_migrations(),
            *load_migrations("run-registry", "mldiag_run_registry.migrations"),
        ]
        async with AsyncExitStack() as stack:
            pool = await stack.enter_async_context(
                open_database(settings.database, settings.db_schema, migrations)
            )
            bus = await stack.enter_async_context(connect_bus(settings.nats, SERVICE))
            outbox = Outbox(pool, bus.publisher)
            service = RegistryService(RunRepository(pool, outbox, settings.db_schema), outbox)
            bus_handlers = handlers.BusHandlers(service)
            bus.consume(
                handlers.metrics_consumer(settings.metrics_batch_size), bus_handlers.on_metrics
            )
            bus.consume(handlers.EVENTS_CONSUMER, bus_handlers.on_events)
            bus.consume(handlers.ANALYSES_CONSUMER, bus_handlers.on_analyses)
            await bus.start()
            await outbox.flush()  # whatever a crash left staged
            await stack.enter_async_context(running_sweeper(outbox))

            app.state.service = service
            checks.update(nats=bus.healthy, database=lambda: database_ok(pool))
            stack.callback(checks.clear)
            yield

    app = create_http_app(SERVICE, lifespan, checks)
    app.include_router(handlers.router)
    return app
