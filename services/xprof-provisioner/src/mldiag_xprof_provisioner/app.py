"""Assembling xprof-provisioner: the one place its parts are wired together."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mldiag_platform.auth import open_token_directory
from mldiag_platform.bus import connect_bus
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_platform.storage import open_store
from mldiag_xprof_provisioner import handlers
from mldiag_xprof_provisioner.process import SubprocessLauncher
from mldiag_xprof_provisioner.service import XProfProvisioner
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings

SERVICE = "xprof-provisioner"


def create_app(settings: XProfProvisionerSettings | None = None) -> FastAPI:
    """Build the provisioner app; connections open and the reaper starts in its lifespan."""
    settings = settings or XProfProvisionerSettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with (
            connect_bus(settings.nats, SERVICE) as bus,
            open_token_directory(bus) as directory,
        ):
            app.state.tokens = directory
            service = XProfProvisioner(
                settings, open_store(settings.storage.url), bus.publisher, SubprocessLauncher()
            )
            await service.remove_stale_copies()
            reaper = asyncio.create_task(service.run_reaper(), name="xprof-reaper")
            app.state.service = service
            checks["nats"] = bus.healthy
            try:
                yield
            finally:
                checks.clear()
                reaper.cancel()
                await asyncio.wait({reaper})
                # Inside the bus context: the STOPPED announcements still need the broker.
                await service.close()

    app = create_http_app(SERVICE, lifespan, checks)
    app.state.settings = settings
    app.include_router(handlers.router)
    return app
