"""Assembling the analyzer: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mldiag_analyzer import handlers
from mldiag_analyzer.service import AnalyzerService
from mldiag_analyzer.settings import AnalyzerSettings
from mldiag_platform.bus import connect_bus
from mldiag_platform.http import HealthCheck, create_http_app

SERVICE = "analyzer"


def create_app(settings: AnalyzerSettings | None = None) -> FastAPI:
    """Build the analyzer app; connections open in its lifespan, not here."""
    settings = settings or AnalyzerSettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with connect_bus(settings.nats, SERVICE) as bus:
            service = AnalyzerService(bus.publisher, settings.runbook_base_url)
            bound = handlers.BusHandlers(service)
            bus.consume(handlers.EVENTS_CONSUMER, bound.on_events)
            bus.consume(handlers.UPDATES_CONSUMER, bound.on_updates)
            await bus.start()
            checks["nats"] = bus.healthy
            try:
                yield
            finally:
                checks.clear()

    return create_http_app(SERVICE, lifespan, checks)
