"""A real xplane and a live provisioner stack, for the live tests of instances and warm."""

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from mldiag_platform.storage import FileStore
from mldiag_schemas.auth import Role
from mldiag_xprof_provisioner.instances.process import SubprocessLauncher
from mldiag_xprof_provisioner.instances.service import XProfProvisioner
from mldiag_xprof_provisioner.warm.handlers import SessionsBusHandler
from mldiag_xprof_provisioner.warm.service import SessionWarmer, SubprocessWarmRunner
from support import StaticTokens
from xprof_provisioner.live_stack import TRACE_SCRIPT, Stack, live_app, live_settings
from xprof_provisioner.xprof_fakes import Recorder


@pytest.fixture(scope="session")
def xplane(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real (small) xplane: a JAX loop traced with the python tracer on."""
    logdir = tmp_path_factory.mktemp("jax-trace")
    subprocess.run(  # our own script
        [sys.executable, "-P", str(TRACE_SCRIPT), str(logdir), "trace", "0.1"],
        check=True,
        timeout=120,
        capture_output=True,
    )
    [path] = (logdir / "plugins" / "profile" / "trace").glob("*.xplane.pb")
    data = path.read_bytes()
    shutil.rmtree(logdir)
    return data


@pytest.fixture
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """Real XProfs behind the real routes; parametrize it (indirect) with settings overrides."""
    overrides = getattr(request, "param", {})
    settings = live_settings(tmp_path, **overrides)
    store = FileStore(tmp_path / "storage")
    recorder = Recorder()
    service = XProfProvisioner(settings, store, recorder, SubprocessLauncher())
    warmer = SessionWarmer(settings, store, recorder, SubprocessWarmRunner(), service)
    app = live_app(service, settings)
    tokens: StaticTokens = app.state.tokens
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://mldiag.test",
        headers=tokens.headers(Role.VIEWER),
        timeout=120,
    ) as client:
        try:
            yield Stack(
                client,
                service,
                store,
                recorder,
                tokens,
                settings,
                SessionsBusHandler(service, warmer),
            )
        finally:
            await service.close()
            await app.state.xprof_client.aclose()
