"""Assembling xprof-provisioner: the one place its parts are wired together."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mldiag_platform.bus import Publisher, create_broker, declare_streams
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_platform.storage import open_store
from mldiag_schemas.bus import ALL_STREAMS, Namespace
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
        namespace = Namespace(settings.nats.namespace)
        broker = create_broker(settings.nats, SERVICE)
        await broker.connect()
        await declare_streams(broker, namespace, ALL_STREAMS)
        await broker.start()
        publisher = Publisher(broker, namespace, settings.nats)
        service = XProfProvisioner(
            settings, open_store(settings.storage.url), publisher, SubprocessLauncher()
        )
        await service.remove_stale_copies()
        reaper = asyncio.create_task(service.run_reaper(), name="xprof-reaper")
        app.state.service = service
        checks["nats"] = lambda: broker.ping(timeout=1.0)
        try:
            yield
        finally:
            checks.clear()
            reaper.cancel()
            await asyncio.wait({reaper})
            # Before the broker goes: the STOPPED announcements still need it.
            await service.close()
            await broker.stop()

    app = create_http_app(SERVICE, lifespan, checks)
    app.state.settings = settings
    app.include_router(handlers.router)
    return app
