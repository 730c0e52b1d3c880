"""Faults under sustained ingest, against a three-node NATS cluster and two replicas of every
service (see conftest.py): every point ingestion accepted is stored exactly once, and every
run's one NaN opens exactly one event with one analysis.
"""

import asyncio
import re
import time
import uuid

import httpx
import pytest

from chaos.harness import (
    Outcome,
    Platform,
    kill_nats_node,
    kill_service,
    restart_postgres,
    under_load,
)
from mldiag.local.nats_cluster import NatsCluster
from mldiag.local.postgres import EmbeddedPostgres

pytestmark = pytest.mark.e2e


def _assert_clean(outcome: Outcome) -> None:
    assert outcome.sent > 0
    assert outcome.clean, outcome


async def _handled(replica_url: str, durable: str) -> float:
    """Messages the replica acked for ``durable`` (its Prometheus counter)."""
    async with httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(f"{replica_url}/metrics")).text
    pattern = rf'^mldiag_bus_messages_handled_total\{{durable="[^"]*{durable}"\}} (\S+)$'
    return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))


# The first test also pays for the servers and the twelve processes starting.
@pytest.mark.timeout(150)
async def test_two_replicas_of_every_service_split_the_work(platform: Platform) -> None:
    async def no_fault() -> None:
        await asyncio.sleep(0)

    _assert_clean(await under_load(platform, "replicas", no_fault, runs=8))
    # Both replicas of the metric writers took a share (a shared durable, not a copy each).
    for service, durable in (("run-registry", "metrics"), ("event-detector", "metrics")):
        shares = [await _handled(r.url, durable) for r in platform.replicas_of(service)]
        assert all(share > 0 for share in shares), (service, shares)


@pytest.mark.timeout(60)
async def test_every_provisioner_replica_sees_every_session_change(platform: Platform) -> None:
    # Warming is shared (the durable); syncing into each replica's own instances is not.
    provisioners = platform.replicas_of("xprof-provisioner")
    durable = "xprof-provisioner-sessions"
    handled_before = [await _handled(replica.url, durable) for replica in provisioners]
    seen_before = [await _seen(replica.url) for replica in provisioners]
    run_id = f"sessions-{uuid.uuid4().hex[:6]}"
    await platform.create_runs([run_id])
    changes = 6
    async with httpx.AsyncClient(base_url=platform.api, headers=platform.headers) as api:
        for index in range(changes):  # ACTIVE sessions: nothing to warm, only to sync
            report = {"sessionId": f"s{index}", "host": "h0", "phase": "ACTIVE"}
            response = await api.post(
                f"/v1/machineLearningRuns/{run_id}/profilerSessions:report", json=report
            )
            response.raise_for_status()

    async def progress() -> tuple[float, list[float]]:
        handled = [
            await _handled(replica.url, durable) - start
            for replica, start in zip(provisioners, handled_before, strict=True)
        ]
        seen = [
            await _seen(replica.url) - start
            for replica, start in zip(provisioners, seen_before, strict=True)
        ]
        return sum(handled), seen

    deadline = time.monotonic() + 30
    while await progress() != (changes, [changes] * len(provisioners)):
        if time.monotonic() > deadline:
            pytest.fail(f"(warmed once, seen by each replica): {await progress()}")
        await asyncio.sleep(0.2)


async def _seen(replica_url: str) -> float:
    """Session changes the replica followed on core NATS to sync its own instances."""
    async with httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(f"{replica_url}/metrics")).text
    found = re.search(r"^mldiag_xprof_session_changes_seen_total (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.mark.timeout(120)
async def test_a_nats_node_killed_during_ingest_loses_and_doubles_nothing(
    platform: Platform, cluster: NatsCluster
) -> None:
    _assert_clean(await under_load(platform, "nats-node", kill_nats_node(platform, cluster)))


@pytest.mark.timeout(120)
async def test_postgres_restarted_mid_ingest_loses_and_doubles_nothing(
    platform: Platform, postgres: EmbeddedPostgres
) -> None:
    _assert_clean(await under_load(platform, "postgres", restart_postgres(platform, postgres)))


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "service", ["ingestion", "run-registry", "event-detector", "analyzer", "xprof-provisioner"]
)
async def test_a_service_killed_under_load_loses_and_doubles_nothing(
    platform: Platform, service: str
) -> None:
    _assert_clean(await under_load(platform, f"kill-{service}", kill_service(platform, service)))
