"""Assembling ingestion: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from mldiag_ingestion import handlers
from mldiag_ingestion.otlp import handlers as otlp_handlers
from mldiag_ingestion.otlp.service import OtlpIngestion
from mldiag_ingestion.service import IngestionService
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.auth import open_token_directory
from mldiag_platform.bus import connect_bus
from mldiag_platform.http import HealthCheck, create_http_app, serving_alongside

SERVICE = "ingestion"


def create_app(settings: IngestionSettings | None = None) -> FastAPI:
    """Build the ingestion app; connections open in its lifespan, not here."""
    settings = settings or IngestionSettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with (
            connect_bus(settings.nats, SERVICE) as bus,
            open_token_directory(bus) as directory,
        ):
            app.state.tokens = directory
            service = IngestionService(bus.publisher, settings.max_points_per_request)
            otlp = OtlpIngestion(service, bus.publisher) if settings.otlp_enabled else None
            app.state.doors = handlers.Doors(service, settings.max_request_bytes, otlp)
            bus.consume(handlers.INGEST_CONSUMER, handlers.IngestBusHandler(service).on_ingest)
            await bus.start()
            checks["nats"] = bus.healthy
            async with AsyncExitStack() as otlp_servers:
                if otlp is not None:
                    serving = _serving_otlp(app, otlp, settings, checks)
                    await otlp_servers.enter_async_context(serving)
                try:
                    yield
                finally:
                    checks.clear()

    app = create_http_app(SERVICE, lifespan, checks, _backstop(settings))
    app.include_router(handlers.router)
    if settings.otlp_enabled:
        app.include_router(otlp_handlers.router)
    return app


@asynccontextmanager
async def _serving_otlp(
    app: FastAPI, otlp: OtlpIngestion, settings: IngestionSettings, checks: dict[str, HealthCheck]
) -> AsyncIterator[None]:
    """OTLP's own ports: gRPC, and OTLP/HTTP (the same routes as on the main HTTP port)."""
    grpc_server = otlp_handlers.create_grpc_server(
        otlp, app.state.tokens, settings.max_request_bytes
    )
    address = f"{settings.host}:{settings.otlp_grpc_port}"
    app.state.otlp_grpc_port = grpc_server.add_insecure_port(address)
    await grpc_server.start()
    otlp_http = create_http_app(f"{SERVICE}-otlp", None, checks, _backstop(settings))
    otlp_http.state.doors = app.state.doors
    otlp_http.state.tokens = app.state.tokens
    otlp_http.include_router(otlp_handlers.router)
    try:
        async with serving_alongside(otlp_http, settings.host, settings.otlp_http_port) as port:
            app.state.otlp_http_port = port
            yield
    finally:
        await grpc_server.stop(grace=5)


def _backstop(settings: IngestionSettings) -> int:
    """The platform's body limit for ingestion's apps: above ``max_request_bytes``, which the
    routes' own reader enforces (inflated, answering its documented ``body_too_large``), so it
    only bounds what a route could ever read (gzip never doubles a body)."""
    return 2 * settings.max_request_bytes
