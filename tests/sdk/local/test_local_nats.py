"""EmbeddedNats against the real nats-server binary: JetStream works, data persists, stop
leaves nothing running, and a taken port is refused without touching its owner."""

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import nats
import pytest

from mldiag.local.errors import PortInUse
from mldiag.local.nats import MAX_FILE_STORE, MAX_MEMORY_STORE, EmbeddedNats
from mldiag.local.process import pid_alive
from support import free_port, world_readable_tempdir

pytestmark = pytest.mark.e2e


@pytest.fixture
def data_home() -> Iterator[Path]:
    home = world_readable_tempdir("mldiag-test-local-nats-")
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def server(data_home: Path) -> Iterator[EmbeddedNats]:
    embedded = EmbeddedNats(data_home / "nats", port=free_port(), monitor_port=free_port())
    embedded.start()
    yield embedded
    embedded.stop()


async def test_jetstream_accepts_and_keeps_messages_across_restarts(
    server: EmbeddedNats,
) -> None:
    assert server.url == f"nats://127.0.0.1:{server.port}"
    client = await nats.connect(server.url)
    try:
        js = client.jetstream()
        await js.add_stream(name="LOCALTEST", subjects=["localtest.>"])
        ack = await js.publish("localtest.one", b"hello")
        assert ack.stream == "LOCALTEST"
    finally:
        await client.close()

    server.stop()
    server.start()

    client = await nats.connect(server.url)
    try:
        message = await client.jetstream().get_last_msg("LOCALTEST", "localtest.one")
        assert message.data == b"hello"
    finally:
        await client.close()


def test_jetstream_limits_are_capped(server: EmbeddedNats) -> None:
    config = httpx.get(f"{server.monitor_url}/jsz", trust_env=False).json()["config"]
    assert config["max_memory"] == MAX_MEMORY_STORE
    assert config["max_storage"] == MAX_FILE_STORE
    assert config["store_dir"].startswith(str(server.data_dir))


def test_stop_leaves_no_process(server: EmbeddedNats) -> None:
    pid = server.pid
    assert pid is not None
    assert pid_alive(pid)
    server.stop()
    assert not pid_alive(pid)
    assert server.pid is None
    server.stop()  # a second stop is a no-op


def test_refuses_a_port_in_use(data_home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        embedded = EmbeddedNats(data_home / "nats", port=port, monitor_port=free_port())
        with pytest.raises(PortInUse, match=str(port)):
            embedded.start()
        assert embedded.pid is None
