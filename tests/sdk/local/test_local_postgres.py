"""EmbeddedPostgres against real PostgreSQL binaries: data survives a restart, stop leaves no
process, taken ports and closed directories are refused with clear errors."""

import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from mldiag.local.errors import NotAccessible, PortInUse
from mldiag.local.postgres import EmbeddedPostgres, probe
from mldiag.local.process import children_of, pid_alive
from support import free_port, world_readable_tempdir

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def template() -> Iterator[Path]:
    """One initdb per module (the slow part); each test starts a copy."""
    home = world_readable_tempdir("mldiag-test-local-pg-template-")
    embedded = EmbeddedPostgres(home / "pg", port=free_port())
    embedded.start()
    embedded.stop()
    yield embedded.data_dir
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def data_home() -> Iterator[Path]:
    home = world_readable_tempdir("mldiag-test-local-pg-")
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def server(template: Path, data_home: Path) -> Iterator[EmbeddedPostgres]:
    shutil.copytree(template, data_home / "pg", symlinks=True)
    embedded = EmbeddedPostgres(data_home / "pg", port=free_port())
    embedded.start()
    yield embedded
    embedded.stop()


def test_first_start_initialises_the_data_directory(data_home: Path) -> None:
    embedded = EmbeddedPostgres(data_home / "fresh", port=free_port())
    with embedded:
        assert probe("127.0.0.1", embedded.port)
        assert (embedded.data_dir / "PG_VERSION").exists()
        assert embedded.log_file == embedded.data_dir / "postgres.log"
    assert not embedded.running


async def test_restart_keeps_data(server: EmbeddedPostgres) -> None:
    assert server.url == f"postgresql://mldiag@127.0.0.1:{server.port}/mldiag"
    connection = await asyncpg.connect(server.url)
    try:
        await connection.execute("CREATE TABLE kept (value text)")
        await connection.execute("INSERT INTO kept VALUES ('survives')")
    finally:
        await connection.close()

    server.stop()
    assert not probe("127.0.0.1", server.port)
    server.start()

    connection = await asyncpg.connect(server.url)
    try:
        assert await connection.fetchval("SELECT value FROM kept") == "survives"
        assert await connection.fetchval("SHOW server_encoding") == "UTF8"
    finally:
        await connection.close()


async def test_create_database_is_idempotent(server: EmbeddedPostgres) -> None:
    url = server.create_database("Other-DB")
    assert server.create_database("Other-DB") == url
    connection = await asyncpg.connect(url)
    try:
        assert await connection.fetchval("SELECT current_database()") == "Other-DB"
    finally:
        await connection.close()


def test_listens_on_localhost_tcp_only(server: EmbeddedPostgres) -> None:
    assert probe("127.0.0.1", server.port)
    assert not list(server.data_dir.glob(".s.PGSQL.*"))  # no unix socket


def test_stop_leaves_no_process(server: EmbeddedPostgres) -> None:
    pid = server.pid
    assert pid is not None
    workers = children_of(pid)
    assert workers  # checkpointer, walwriter, ...
    server.stop()
    assert not pid_alive(pid)
    assert not [child for child, _ in workers if pid_alive(child)]
    assert not (server.data_dir / "postmaster.pid").exists()


def test_stop_kills_a_server_that_ignores_the_fast_shutdown(server: EmbeddedPostgres) -> None:
    pid = server.pid
    assert pid is not None
    workers = children_of(pid)
    os.kill(pid, signal.SIGSTOP)  # a hung postmaster: SIGINT cannot be acted on
    server.stop(timeout=0.5)
    assert not pid_alive(pid)
    assert not [child for child, _ in workers if pid_alive(child)]


def test_refuses_a_port_in_use(data_home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUse, match=str(port)):
            EmbeddedPostgres(data_home / "pg", port=port).start()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as nobody")
def test_names_a_directory_nobody_cannot_enter() -> None:
    closed = Path(tempfile.mkdtemp(prefix="mldiag-test-local-closed-"))  # mode 0700
    try:
        with pytest.raises(NotAccessible, match=str(closed)):
            EmbeddedPostgres(closed / "pg", port=free_port()).start()
    finally:
        shutil.rmtree(closed, ignore_errors=True)


def test_probe_of_a_closed_port_is_false() -> None:
    assert not probe("127.0.0.1", free_port(), timeout=0.5)
