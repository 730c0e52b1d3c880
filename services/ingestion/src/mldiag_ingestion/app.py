"""Assembling ingestion: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mldiag_ingestion import handlers
from mldiag_ingestion.service import IngestionService
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.bus import Publisher, create_broker, declare_streams
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_schemas.bus import ALL_STREAMS, Namespace

SERVICE = "ingestion"


def create_app(settings: IngestionSettings | None = None) -> FastAPI:
    """Build the ingestion app; connections open in its lifespan, not here."""
    settings = settings or IngestionSettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        namespace = Namespace(settings.nats.namespace)
        broker = create_broker(settings.nats, SERVICE)
        await broker.connect()
        await declare_streams(broker, namespace, ALL_STREAMS)
        await broker.start()
        publisher = Publisher(broker, namespace, settings.nats)
        app.state.service = IngestionService(publisher, settings.max_points_per_request)
        checks["nats"] = lambda: broker.ping(timeout=1.0)
        try:
            yield
        finally:
            checks.clear()
            await broker.stop()

    app = create_http_app(SERVICE, lifespan, checks)
    app.state.settings = settings
    app.include_router(handlers.router)
    return app
