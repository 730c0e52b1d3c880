"""Assembling event-detector: the one place its parts are wired together."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime

import structlog
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
LEDGER_SWEEP_SECONDS = 600.0

log = structlog.get_logger(__name__)


async def _run_clock(
    service: DetectorService, repository: DetectorRepository, interval: float
) -> None:
    """Let time pass for the rules that wait on it; prune the ledger now and then."""
    last_sweep = 0.0
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval)
        try:
            await service.on_clock(datetime.now(UTC))
            if loop.time() - last_sweep > LEDGER_SWEEP_SECONDS:
                last_sweep = loop.time()
                await repository.forget_old_messages(datetime.now(UTC))
        except Exception as exc:  # noqa: BLE001  # the clock's error boundary: keep ticking
            log.warning("detector.clock.failed", error=repr(exc))


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
            repository = DetectorRepository(pool, outbox)
            service = DetectorService(repository, outbox)
            bus_handlers = handlers.BusHandlers(service)
            for spec in handlers.consumers(settings.batch_size):
                bus.consume(spec, bus_handlers.on_messages)
            await bus.start()
            await outbox.flush()  # whatever a crash left staged
            await stack.enter_async_context(running_sweeper(outbox))
            clock = asyncio.create_task(_run_clock(service, repository, settings.clock_seconds))
            stack.push_async_callback(_cancel, clock)
            checks.update(nats=bus.healthy, database=lambda: database_ok(pool))
            stack.callback(checks.clear)
            yield

    return create_http_app(SERVICE, lifespan, checks)


async def _cancel(task: "asyncio.Task[None]") -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
