"""Assembling the analyzer: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mldiag_analyzer import handlers
from mldiag_analyzer.service import AnalyzerService
from mldiag_analyzer.settings import AnalyzerSettings
from mldiag_platform.bus import Consumer, Publisher, create_broker, declare_streams
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_schemas.bus import ALL_STREAMS, Namespace

SERVICE = "analyzer"


def create_app(settings: AnalyzerSettings | None = None) -> FastAPI:
    """Build the analyzer app; connections open in its lifespan, not here."""
    settings = settings or AnalyzerSettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        namespace = Namespace(settings.nats.namespace)
        broker = create_broker(settings.nats, SERVICE)
        await broker.connect()
        await declare_streams(broker, namespace, ALL_STREAMS)
        publisher = Publisher(broker, namespace, settings.nats)
        service = AnalyzerService(publisher, settings.runbook_base_url)
        Consumer(
            handlers.EVENTS_CONSUMER,
            handlers.BusHandlers(service).on_events,
            publisher,
            namespace,
            settings.nats,
        ).subscribe(broker)
        await broker.start()
        checks["nats"] = lambda: broker.ping(timeout=1.0)
        try:
            yield
        finally:
            checks.clear()
            await broker.stop()

    return create_http_app(SERVICE, lifespan, checks)
