"""Assembling the executor: the one place its parts are wired together."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mldiag_executor import handlers
from mldiag_executor.backends import create_backend
from mldiag_executor.launch import LaunchConfig, Storage
from mldiag_executor.service import ExecutorService
from mldiag_executor.settings import ExecutorSettings
from mldiag_platform.bus import connect_bus
from mldiag_platform.http import HealthCheck, create_http_app

SERVICE = "executor"


def create_app(settings: ExecutorSettings | None = None) -> FastAPI:
    """Build the executor app (health and metrics over HTTP); the backend, the bus and the
    loops start in its lifespan, not here."""
    settings = settings or ExecutorSettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        config = LaunchConfig(
            storage=Storage(settings.storage.url),
            state_dir=settings.state_dir,
            images=settings.images,
            pip_timeout_seconds=settings.pip_timeout_seconds,
        )
        backend = create_backend(settings)
        async with connect_bus(settings.nats, f"{SERVICE}-{settings.executor_id}") as bus:
            service = ExecutorService(settings.executor_id, backend, config, bus.publisher)
            # Before taking commands: a redelivered start must find what still runs.
            await service.recover()
            loops = [
                asyncio.create_task(service.report_exits(), name="executor-exits"),
                asyncio.create_task(
                    handlers.announce_forever(
                        bus,
                        service,
                        first_port=settings.first_port,
                        port_count=settings.port_count,
                        interval=settings.announce_seconds,
                    ),
                    name="executor-announce",
                ),
            ]
            bus.consume(
                handlers.dispatch_consumer(settings.executor_id),
                handlers.BusHandlers(service).on_commands,
            )
            await bus.start()

            async def healthy() -> bool:
                return all(not loop.done() for loop in loops) and await bus.healthy()

            checks["nats"] = healthy
            try:
                yield
            finally:
                checks.clear()
                await bus.stop_consumers()
                for loop in loops:
                    loop.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await loop
                await backend.close()

    return create_http_app(SERVICE, lifespan, checks)
