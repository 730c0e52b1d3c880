"""Assembling the notifier: the one place its parts are wired together."""

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
from fastapi import FastAPI

from mldiag_notifier import handlers
from mldiag_notifier.admin import AlertsAdmin
from mldiag_notifier.crypto import SecretBox, load_key
from mldiag_notifier.dispatch import Dispatcher, running
from mldiag_notifier.repository import NotifierRepository
from mldiag_notifier.service import RoutingService
from mldiag_notifier.settings import NotifierSettings
from mldiag_platform.auth import open_token_directory
from mldiag_platform.bus import connect_bus
from mldiag_platform.database import database_ok, load_migrations, open_database
from mldiag_platform.http import HealthCheck, create_http_app

SERVICE = "notifier"


def quiet_senders() -> None:
    """Keep the HTTP client's and Apprise's own records out of the log: they name the URLs
    they call, and a Slack webhook's or an Apprise URL is the secret itself. Attempts are
    logged by the dispatcher, with the secrets scrubbed."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    logging.getLogger("apprise").setLevel(logging.CRITICAL)


def create_app(settings: NotifierSettings | None = None) -> FastAPI:
    """Build the notifier app; connections open in its lifespan, not here."""
    settings = settings or NotifierSettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        quiet_senders()
        # Read first, so a bad key stops the service before it touches anything.
        box = SecretBox(load_key(settings.secret_key.get_secret_value(), settings.key_file))
        async with AsyncExitStack() as stack:
            pool = await stack.enter_async_context(
                open_database(
                    settings.database,
                    settings.db_schema,
                    load_migrations("notifier", "mldiag_notifier.migrations"),
                )
            )
            # Outbound calls honour HTTP(S)_PROXY and NO_PROXY: Slack and the like are often
            # reached through one.
            client = await stack.enter_async_context(
                httpx.AsyncClient(follow_redirects=False, trust_env=True)
            )
            repository = NotifierRepository(pool)
            dispatcher = Dispatcher(repository, box, client, settings)
            # Sending starts before consuming and stops after it (the stack unwinds in
            # reverse), so a delivery decided while stopping is still sent.
            await stack.enter_async_context(
                running(dispatcher, grace_seconds=settings.send_timeout_seconds + 1)
            )
            bus = await stack.enter_async_context(connect_bus(settings.nats, SERVICE))
            directory = await stack.enter_async_context(open_token_directory(bus))
            routing = RoutingService(repository, dispatcher.wake, settings.analysis_wait_seconds)
            handlers.register(bus, routing)
            await bus.start()
            app.state.tokens = directory
            app.state.admin = AlertsAdmin(repository, box, dispatcher)
            checks.update(
                nats=bus.healthy,
                database=lambda: database_ok(pool),
                dispatch=dispatcher.healthy,
            )
            stack.callback(checks.clear)
            yield

    app = create_http_app(SERVICE, lifespan, checks, settings.max_body_bytes)
    app.include_router(handlers.router)
    return app
