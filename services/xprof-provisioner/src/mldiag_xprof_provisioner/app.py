"""Assembling xprof-provisioner: the one place its parts are wired together."""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from nats.aio.subscription import Subscription

from mldiag_platform.auth import open_token_directory
from mldiag_platform.bus import connect_bus
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_platform.storage import open_store
from mldiag_xprof_provisioner.captures import handlers as captures_handlers
from mldiag_xprof_provisioner.captures.process import SubprocessTraceClient
from mldiag_xprof_provisioner.captures.service import CaptureRunner
from mldiag_xprof_provisioner.instances import handlers as instances_handlers
from mldiag_xprof_provisioner.instances.process import SubprocessLauncher
from mldiag_xprof_provisioner.instances.proxy import XProfClient
from mldiag_xprof_provisioner.instances.service import XProfProvisioner
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from mldiag_xprof_provisioner.warm import handlers as warm_handlers
from mldiag_xprof_provisioner.warm.service import SessionWarmer, SubprocessWarmRunner

SERVICE = "xprof-provisioner"


def create_app(settings: XProfProvisionerSettings | None = None) -> FastAPI:
    """Build the provisioner app; connections open and the reaper starts in its lifespan."""
    settings = settings or XProfProvisionerSettings()
    checks: dict[str, HealthCheck] = {}
    # httpx logs every request at INFO: for the proxy that is a second line per UI request
    # (with its query), next to our own http.request.handled.
    logging.getLogger("httpx").setLevel(logging.WARNING)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with (
            connect_bus(settings.nats, SERVICE) as bus,
            open_token_directory(bus) as directory,
        ):
            app.state.tokens = directory
            store = open_store(settings.storage.url)
            service = XProfProvisioner(settings, store, bus.publisher, SubprocessLauncher())
            await service.remove_stale_copies()
            warmer = SessionWarmer(settings, store, bus.publisher, SubprocessWarmRunner(), service)
            sessions = warm_handlers.SessionsBusHandler(service, warmer)
            bus.consume(warm_handlers.SESSIONS_CONSUMER, sessions.on_sessions)
            captures = CaptureRunner(
                settings.capture,
                store,
                bus.publisher,
                SubprocessTraceClient(settings.capture.probe_timeout_seconds),
                work_dir=service.work_dir,
            )
            bus.consume(
                captures_handlers.captures_consumer(settings.capture),
                captures_handlers.CaptureBusHandler(captures).on_commands,
            )
            client = XProfClient(settings.proxy_timeout_seconds, settings.proxy_connections)
            service.on_stop(client.forget)
            reaper = asyncio.create_task(service.run_reaper(), name="xprof-reaper")
            changes: Subscription | None = None
            app.state.service = service
            app.state.xprof_client = client
            try:
                await bus.start()
                changes = await bus.listen(warm_handlers.SESSION_CHANGES, sessions.on_change_seen)
                checks["nats"] = bus.healthy
                yield
            finally:
                checks.clear()
                if changes is not None:
                    await changes.unsubscribe()
                # Before the instances: a warm in hand syncs into them and announces.
                await bus.stop_consumers()
                reaper.cancel()
                await asyncio.wait({reaper})
                await client.aclose()
                # Inside the bus context: the STOPPED announcements still need the broker.
                await service.close()

    app = create_http_app(SERVICE, lifespan, checks)
    app.state.settings = settings
    app.include_router(instances_handlers.router)
    return app
