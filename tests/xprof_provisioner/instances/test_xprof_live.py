"""Real XProf processes, started through the service (fake publisher, no NATS needed) and
through the assembled app (real NATS)."""

import asyncio
import gzip
import json
import os
import random
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

from conftest import ApiTokens
from mldiag_platform.settings import NatsSettings, StorageSettings
from mldiag_platform.storage import FileStore
from mldiag_schemas.bus import Namespace
from mldiag_schemas.messages import parse_message
from mldiag_schemas.profiling import XProfInstanceChanged, XProfInstanceState
from mldiag_xprof_provisioner.app import create_app
from mldiag_xprof_provisioner.errors import XProfStartFailed
from mldiag_xprof_provisioner.instances.backend import LaunchSpec
from mldiag_xprof_provisioner.instances.child import SECRET_HEADER
from mldiag_xprof_provisioner.instances.process import SubprocessLauncher, XProfChild, port_is_free
from mldiag_xprof_provisioner.instances.service import XProfProvisioner
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from support import serving, wait_until
from xprof_provisioner.xprof_fakes import Recorder

pytestmark = pytest.mark.connected

PROFILE_KEY = "{run}/plugins/profile/session1/host1.xplane.pb"


class RecordingLauncher(SubprocessLauncher):
    """The real launcher, keeping hold of what it launched so tests can inspect it."""

    def __init__(self) -> None:
        super().__init__()
        self.children: list[XProfChild] = []
        self.specs: list[LaunchSpec] = []

    async def launch(self, spec: LaunchSpec) -> XProfChild:
        child = await super().launch(spec)
        self.children.append(child)
        self.specs.append(spec)
        return child


def _settings(tmp_path: Path, **overrides: float) -> XProfProvisionerSettings:
    # A random range: other suites on this machine may run XProfs on the default one.
    # Below 32768, where Linux hands out ephemeral ports for outgoing connections.
    base = random.randrange(20_000, 32_000, 20)
    return XProfProvisionerSettings(
        work_dir=tmp_path / "work",
        first_instance_port=base,
        instance_port_count=20,
        storage=StorageSettings(url=f"file://{tmp_path / 'storage'}"),
        **overrides,
    )


def _fetch_json(url: str, secret: str) -> object:
    request = urllib.request.Request(url, headers={SECRET_HEADER: secret})  # noqa: S310
    # XProf gzips its answers whether asked to or not.
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310  # http to ourselves
        raw = response.read()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _listening(pid: int) -> set[tuple[str, int]]:
    """The TCP addresses ``pid`` listens on, from /proc (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            raw = bytes.fromhex(address)
            if width == 8:
                ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
            else:
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                ip = socket.inet_ntop(socket.AF_INET6, words)
            found.add((ip, int(port, 16)))
    return found


async def test_a_real_xprof_lists_the_runs_session_and_stops_without_a_trace(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path)
    store = FileStore(tmp_path / "storage")
    await store.put(PROFILE_KEY.format(run="run-live"), b"\x00 not much of an xplane")
    launcher = RecordingLauncher()
    recorder = Recorder()
    service = XProfProvisioner(settings, store, recorder, launcher)

    started_at = time.perf_counter()
    started = await service.start(["run-live"], "token-live")
    start_seconds = time.perf_counter() - started_at

    instance = started.instance
    assert instance.state is XProfInstanceState.RUNNING, instance.error
    [child] = launcher.children
    try:
        direct = f"http://127.0.0.1:{instance.port}/data/plugin/profile/runs"
        [spec] = launcher.specs
        runs = await asyncio.to_thread(_fetch_json, direct, spec.secret)
        assert runs == ["run-live/session1"]
        # The secret is the instance's own: nothing the API returns carries it.
        assert spec.secret not in instance.model_dump_json()
        assert spec.secret not in repr(spec)
        with pytest.raises(urllib.error.HTTPError) as refused:
            await asyncio.to_thread(_fetch_json, direct, "a guess")
        assert refused.value.code == 403
        # Loopback only, and no gRPC worker: the proxy is the only way in.
        assert _listening(child.pid) == {("127.0.0.1", instance.port)}
        assert instance.grpc_port == 0
        assert not port_is_free(instance.port)
        assert (Path(instance.logdir).parent / "xprof.log").is_file()
        print(  # noqa: T201  # the figures the report quotes
            f"\nxprof start: {start_seconds:.2f} s, idle RSS: {_rss_mib(child.pid):.0f} MiB"
        )
    finally:
        stopped = await service.stop(instance.instance_id)

    assert stopped.state is XProfInstanceState.STOPPED
    assert child.returncode is not None
    assert _gone(child.pid)
    assert port_is_free(instance.port)
    assert not Path(instance.logdir).parent.exists()
    assert recorder.states() == [
        XProfInstanceState.STARTING,
        XProfInstanceState.RUNNING,
        XProfInstanceState.STOPPED,
    ]


async def test_the_idle_reaper_stops_a_real_xprof(tmp_path: Path) -> None:
    settings = _settings(tmp_path, idle_timeout_seconds=0.5)
    launcher = RecordingLauncher()
    recorder = Recorder()
    store = FileStore(tmp_path / "storage")
    await store.put(PROFILE_KEY.format(run="run-idle"), b"xplane")
    service = XProfProvisioner(settings, store, recorder, launcher)
    reaper = asyncio.create_task(service.run_reaper())
    try:
        instance = (await service.start(["run-idle"], "token-idle")).instance
        assert instance.state is XProfInstanceState.RUNNING, instance.error

        async def state() -> XProfInstanceState:
            [listed] = await service.list_instances()  # listing is not use
            return listed.state

        await wait_until(state, lambda s: s is XProfInstanceState.STOPPED, timeout=10)
    finally:
        reaper.cancel()
        await asyncio.wait({reaper})
        await service.close()
    [child] = launcher.children
    assert _gone(child.pid)
    assert port_is_free(instance.port)


class LyingLauncher(RecordingLauncher):
    """Believes every port is free, as a probe would in a race with another process."""

    def port_is_free(self, port: int) -> bool:  # noqa: ARG002
        return True


async def test_an_xprof_that_cannot_bind_is_failed_with_its_log(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    store = FileStore(tmp_path / "storage")
    await store.put(PROFILE_KEY.format(run="run-squatted"), b"xplane")
    service = XProfProvisioner(settings, store, Recorder(), LyingLauncher())
    with socket.socket(socket.AF_INET6) as squatter:
        squatter.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        squatter.bind(("::", settings.first_instance_port))
        squatter.listen()
        with pytest.raises(XProfStartFailed, match="exited with status") as caught:
            await service.start(["run-squatted"], "token-squatter")
    print(caught.value.message)  # noqa: T201
    [failed] = await service.list_instances()
    assert failed.state is XProfInstanceState.FAILED
    assert "Log tail" in failed.error


async def _changes(nats_url: str, namespace: str, run_id: str) -> list[XProfInstanceChanged]:
    import nats  # noqa: PLC0415

    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        subject = Namespace(namespace).subject("profiling.instance.changed", run_id)
        subscription = await js.pull_subscribe(subject, durable=None)
        found: list[XProfInstanceChanged] = []
        try:
            for raw in await subscription.fetch(10, timeout=1):
                message = parse_message(raw.data)
                assert isinstance(message, XProfInstanceChanged)
                found.append(message)
        except TimeoutError:
            pass
        return found
    finally:
        await client.close()


def _states(messages: Sequence[XProfInstanceChanged]) -> list[XProfInstanceState]:
    return [m.instance.state for m in messages]


async def test_the_app_serves_the_api_announces_changes_and_stops_xprof_on_shutdown(
    tmp_path: Path, nats_settings: NatsSettings, nats_url: str, api_tokens: ApiTokens
) -> None:
    settings = _settings(tmp_path).model_copy(update={"nats": nats_settings})
    await FileStore(tmp_path / "storage").put(PROFILE_KEY.format(run="run-app"), b"xplane")
    async with serving(create_app(settings), api_tokens.headers()) as client:
        health = await client.get("/healthz")
        assert health.status_code == 200
        assert health.json()["checks"] == {"nats": True}
        created = await client.post("/v1/xprofInstances", json={"runIds": ["run-app"]})
        assert created.status_code == 201, created.text
        instance = created.json()
        assert instance["state"] == "RUNNING"
        assert instance["url"] == f"/xprof/{instance['instanceId']}/data/plugin/profile/"
        runs = await client.get(f"{instance['url']}runs")
        assert runs.status_code == 200, runs.text
        assert runs.json() == ["run-app/session1"]
        got = await client.get(f"/v1/xprofInstances/{instance['instanceId']}")
        assert got.json()["state"] == "RUNNING"
    # The lifespan's exit (SIGTERM to the service) stopped XProf.
    assert port_is_free(instance["port"])
    assert not Path(instance["logdir"]).parent.exists()
    messages = await _changes(nats_url, nats_settings.namespace, "run-app")
    assert _states(messages) == [
        XProfInstanceState.STARTING,
        XProfInstanceState.RUNNING,
        XProfInstanceState.STOPPED,
    ]
    assert {m.instance.instance_id for m in messages} == {instance["instanceId"]}
