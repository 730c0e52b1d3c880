"""One platform for the chaos tests: a three-node NATS cluster with R3 streams, a PostgreSQL
of their own (so that it can be restarted), and two replicas of every service."""

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from chaos.harness import Platform
from mldiag.local.nats_cluster import NatsCluster
from mldiag.local.postgres import EmbeddedPostgres
from support import free_port, world_readable_tempdir


@pytest.fixture(scope="module")
def chaos_home() -> Iterator[Path]:
    """Stores, logs and storage of this module's servers and services."""
    home = world_readable_tempdir("mldiag-chaos-")
    yield home
    if os.environ.get("MLDIAG_CHAOS_KEEP"):  # the logs, to see why a test failed
        print(f"\nchaos home kept: {home}")  # noqa: T201
    else:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres(chaos_home: Path) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL server the tests may stop and start."""
    server = EmbeddedPostgres(chaos_home / "postgres", port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster(chaos_home: Path) -> Iterator[NatsCluster]:
    """Three routed JetStream servers."""
    ports = [(free_port(), free_port(), free_port()) for _ in range(3)]
    with NatsCluster(chaos_home / "nats", ports, name="chaos") as running:
        yield running


@pytest.fixture(scope="module")
async def platform(
    chaos_home: Path, postgres: EmbeddedPostgres, cluster: NatsCluster
) -> AsyncIterator[Platform]:
    """Every service twice, on the cluster (R3 streams) and the PostgreSQL above."""
    running = Platform(
        home=chaos_home / "platform",
        nats_url=cluster.url,
        database_url=postgres.create_database("chaos"),
        ports=free_port,
        replicas=2,
        stream_replicas=3,
    )
    try:
        await running.start()
        yield running
    finally:
        running.stop()
