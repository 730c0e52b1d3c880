"""Assembling run-registry: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from mldiag_platform.bus import Consumer, Publisher, create_broker, declare_streams
from mldiag_platform.database import (
    apply_migrations,
    create_pool,
    database_ok,
    load_migrations,
)
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_platform.outbox import Outbox, outbox_migrations, running_sweeper
from mldiag_run_registry import handlers
from mldiag_run_registry.repository import RunRepository
from mldiag_run_registry.service import RegistryService
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas.bus import ALL_STREAMS, Namespace

SERVICE = "run-registry"


def create_app(settings: RunRegistrySettings | None = None) -> FastAPI:
    """Build the registry app; connections open in its lifespan, not here."""
    settings = settings or RunRegistrySettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            pool = await create_pool(settings.database, settings.db_schema)
            stack.push_async_callback(pool.close)
            await apply_migrations(
                pool,
                settings.db_schema,
                [
                    *outbox_migrations(),
                    *load_migrations("run-registry", "mldiag_run_registry.migrations"),
                ],
            )

            namespace = Namespace(settings.nats.namespace)
            broker = create_broker(settings.nats, SERVICE)
            await broker.connect()
            stack.push_async_callback(broker.stop)
            await declare_streams(broker, namespace, ALL_STREAMS)

            publisher = Publisher(broker, namespace, settings.nats)
            outbox = Outbox(pool, publisher)
            service = RegistryService(RunRepository(pool, outbox, settings.db_schema), outbox)
            bus_handlers = handlers.BusHandlers(service)
            consumers = (
                Consumer(
                    handlers.metrics_consumer(settings.metrics_batch_size),
                    bus_handlers.on_metrics,
                    publisher,
                    namespace,
                    settings.nats,
                ),
                Consumer(
                    handlers.EVENTS_CONSUMER,
                    bus_handlers.on_events,
                    publisher,
                    namespace,
                    settings.nats,
                ),
                Consumer(
                    handlers.ANALYSES_CONSUMER,
                    bus_handlers.on_analyses,
                    publisher,
                    namespace,
                    settings.nats,
                ),
            )
            for consumer in consumers:
                consumer.subscribe(broker)
            await broker.start()
            await outbox.flush()  # whatever a crash left staged
            await stack.enter_async_context(running_sweeper(outbox))

            app.state.service = service
            checks["nats"] = lambda: broker.ping(timeout=1.0)
            checks["database"] = lambda: database_ok(pool)
            stack.callback(checks.clear)
            yield

    app = create_http_app(SERVICE, lifespan, checks)
    app.include_router(handlers.router)
    return app
