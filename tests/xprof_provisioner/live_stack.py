"""A provisioner stack of real XProf processes behind the real routes and proxy, for the live
tests of instances and pre-warming: a FileStore over a temp dir, tokens held in memory (no
NATS), a recording publisher, and the sessions bus handler wired to a real warmer."""

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from mldiag_platform.http import create_http_app
from mldiag_platform.settings import StorageSettings
from mldiag_platform.storage import FileStore
from mldiag_xprof_provisioner.instances import handlers
from mldiag_xprof_provisioner.instances.proxy import XProfClient
from mldiag_xprof_provisioner.instances.service import XProfProvisioner
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from mldiag_xprof_provisioner.warm.handlers import SessionsBusHandler
from support import StaticTokens
from xprof_provisioner.xprof_fakes import Recorder

HOST = "host-a"
TRACE_SCRIPT = Path(__file__).with_name("jax_trace.py")
"""Writes a real xplane: ``python jax_trace.py LOGDIR SESSION SECONDS``."""


@dataclass
class Stack:
    client: httpx.AsyncClient
    service: XProfProvisioner
    store: FileStore
    recorder: Recorder
    tokens: StaticTokens
    settings: XProfProvisionerSettings
    handler: SessionsBusHandler

    async def put_session(self, data: bytes, run: str, session: str, host: str = HOST) -> None:
        await self.store.put(f"{run}/plugins/profile/{session}/{host}.xplane.pb", data)

    async def open(self, run: str, session: str, **extra: str) -> str:
        """The open link's redirect target (a path below the proxy)."""
        opened = await self.client.get(
            "/xprof/open", params={"run": run, "session": session, **extra}
        )
        assert opened.status_code == 303, opened.text
        location: str = opened.headers["location"]
        return location


def live_settings(tmp_path: Path, **overrides: Any) -> XProfProvisionerSettings:
    """Settings over ``tmp_path``, on a port range of their own."""
    # A random range: other suites on this machine may run XProfs on the default one.
    base = random.randrange(20_000, 32_000, 20)
    return XProfProvisionerSettings(
        work_dir=tmp_path / "work",
        first_instance_port=base,
        instance_port_count=20,
        storage=StorageSettings(url=f"file://{tmp_path / 'storage'}"),
        public_url="http://mldiag.test",
        **overrides,
    )


def live_app(service: XProfProvisioner, settings: XProfProvisionerSettings) -> FastAPI:
    """The instances' routes over ``service``, with static tokens instead of the bus."""
    app = create_http_app("xprof-provisioner", None, {})
    app.state.service = service
    app.state.tokens = StaticTokens()
    app.state.xprof_client = XProfClient(settings.proxy_timeout_seconds, settings.proxy_connections)
    app.include_router(handlers.router)
    return app
