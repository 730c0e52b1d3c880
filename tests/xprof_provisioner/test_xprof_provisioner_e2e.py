"""`python -m mldiag_xprof_provisioner` as a real process: its XProfs never outlive it,
whether it is stopped with SIGTERM or killed with SIGKILL."""

import asyncio
import os
import random
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.storage import FileStore
from mldiag_xprof_provisioner.instances.process import SubprocessLauncher
from mldiag_xprof_provisioner.instances.service import XProfProvisioner
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from support import wait_until
from xprof_provisioner.xprof_fakes import Recorder

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds children in /proc"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _children(parent: int) -> list[int]:
    """Pids of XProf children of ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # The command may contain spaces and parentheses: ppid is the 2nd field after ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"mldiag_xprof_provisioner.instances.child" in cmdline:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; it is only waiting to be reaped


@dataclass
class Provisioner:
    process: asyncio.subprocess.Process
    client: httpx.AsyncClient
    work_dir: Path
    log: Path


@asynccontextmanager
async def _provisioner(
    tmp_path: Path, nats_url: str, namespace: str, token: str
) -> AsyncIterator[Provisioner]:
    storage = FileStore(tmp_path / "storage")
    await storage.put("run-e2e/plugins/profile/session1/host1.xplane.pb", b"xplane")
    port = _free_port()
    env = {
        **os.environ,
        "MLDIAG_XPROF_PROVISIONER_PORT": str(port),
        "MLDIAG_XPROF_PROVISIONER_WORK_DIR": str(tmp_path / "work"),
        "MLDIAG_XPROF_PROVISIONER_FIRST_INSTANCE_PORT": str(random.randrange(20_000, 32_000, 20)),
        "MLDIAG_XPROF_PROVISIONER_INSTANCE_PORT_COUNT": "20",
        "MLDIAG_NATS_URL": nats_url,
        "MLDIAG_NATS_NAMESPACE": namespace,
        "MLDIAG_STORAGE_URL": storage.url,
        "MLDIAG_LOG_FORMAT": "json",
    }
    log = tmp_path / "provisioner.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mldiag_xprof_provisioner", env=env, stdout=out, stderr=out
        )
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            timeout=30,
            headers={"Authorization": f"Bearer {token}"},
        ) as client:

            async def health() -> int:
                assert process.returncode is None, log.read_text()
                try:
                    return (await client.get("/healthz")).status_code
                except httpx.TransportError:
                    return 0

            await wait_until(health, lambda status: status == 200, timeout=30)
            yield Provisioner(process, client, tmp_path / "work", log)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def _start_xprof(provisioner: Provisioner) -> tuple[dict[str, object], int]:
    response = await provisioner.client.post("/v1/xprofInstances", json={"runIds": ["run-e2e"]})
    assert response.status_code == 201, response.text
    [child] = _children(provisioner.process.pid)
    return response.json(), child


async def _until_dead(pid: int) -> None:
    async def alive() -> bool:
        return _alive(pid)

    await wait_until(alive, lambda is_alive: not is_alive, timeout=10)


async def test_sigterm_stops_every_xprof_and_removes_the_copies(
    tmp_path: Path, nats_url: str, namespace: str, api_tokens: ApiTokens
) -> None:
    async with _provisioner(tmp_path, nats_url, namespace, api_tokens.editor) as provisioner:
        instance, child = await _start_xprof(provisioner)
        provisioner.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            status = await provisioner.process.wait()
        log = provisioner.log.read_text()
        # uvicorn re-raises the signal once its shutdown is done, so the status says SIGTERM.
        assert status in (0, -signal.SIGTERM), log
        assert "Application shutdown complete" in log
        assert not _alive(child)
        assert not Path(str(instance["logdir"])).parent.exists()
        assert "xprof.instance.stopped" in log


async def test_sigkill_takes_the_xprofs_with_it_and_the_next_start_clears_the_copies(
    tmp_path: Path, nats_url: str, namespace: str, api_tokens: ApiTokens
) -> None:
    async with _provisioner(tmp_path, nats_url, namespace, api_tokens.editor) as provisioner:
        instance, child = await _start_xprof(provisioner)
        provisioner.process.kill()
        await provisioner.process.wait()
        await _until_dead(child)
        copy = Path(str(instance["logdir"])).parent
        assert copy.exists()  # nobody could clean up after a SIGKILL...
        settings = XProfProvisionerSettings(work_dir=provisioner.work_dir)
        successor = XProfProvisioner(
            settings, FileStore(tmp_path / "storage"), Recorder(), SubprocessLauncher()
        )
        await successor.remove_stale_copies()
        assert not copy.exists()  # ...so the next provisioner does
