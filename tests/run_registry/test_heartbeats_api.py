"""A run's heartbeats in the registry, against real PostgreSQL and NATS: the latest per
process survives redelivery and reordering, a restart shows as a new pid, a silent process
turns overdue."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_schemas.telemetry import RunHeartbeat
from support import wait_until

pytestmark = pytest.mark.connected

RUNS = "/v1/machineLearningRuns"
NOW = datetime.now(UTC).replace(microsecond=0)


def _beat(
    run_id: str, host: str, seconds_ago: float, *, pid: int = 100, step: int | None = 1
) -> RunHeartbeat:
    at = NOW - timedelta(seconds=seconds_ago)
    return RunHeartbeat(
        event_id=uuid.uuid4(),
        occurred_at=at,
        run_id=run_id,
        host=host,
        pid=pid,
        step=step,
        interval_seconds=10,
        received_at=at,
    )


async def _heartbeats(api: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    response = await api.get(f"{RUNS}/{run_id}/heartbeats")
    assert response.status_code == 200, response.text
    beats: list[dict[str, Any]] = response.json()["heartbeats"]
    return beats


async def test_the_latest_heartbeat_of_each_process(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    assert (await api.post(RUNS, json={"runId": "beating", "displayName": "b"})).status_code == 200
    assert await _heartbeats(api, "beating") == []
    await publisher.publish_many(
        [
            _beat("beating", "node-0", 30, step=5),
            _beat("beating", "node-0", 10, step=9),
            _beat("beating", "node-0", 20, step=7),  # arrives late: changes nothing
            _beat("beating", "node-1", 60, step=3),  # silent for six intervals
        ]
    )
    beats = await wait_until(lambda: _heartbeats(api, "beating"), lambda beats: len(beats) == 2)
    node0, node1 = beats
    assert (node0["host"], node0["step"], node0["overdue"]) == ("node-0", 9, False)
    assert node0["lastSeenTime"] == (NOW - timedelta(seconds=10)).isoformat().replace("+00:00", "Z")
    assert node0["firstSeenTime"] == (NOW - timedelta(seconds=30)).isoformat().replace(
        "+00:00", "Z"
    )
    assert (node1["host"], node1["overdue"]) == ("node-1", True)


async def test_a_restart_is_a_new_pid_with_its_own_first_heartbeat(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    assert (
        await api.post(RUNS, json={"runId": "restarted", "displayName": "r"})
    ).status_code == 200
    await publisher.publish_many([_beat("restarted", "node-0", 50, pid=100, step=40)])
    await wait_until(lambda: _heartbeats(api, "restarted"), lambda beats: len(beats) == 1)
    await publisher.publish_many([_beat("restarted", "node-0", 5, pid=200, step=None)])
    [beat] = await wait_until(
        lambda: _heartbeats(api, "restarted"), lambda beats: beats[0]["pid"] == 200
    )
    assert beat["step"] is None
    assert beat["firstSeenTime"] == beat["lastSeenTime"]


async def test_heartbeats_of_an_unknown_run_are_404(api: httpx.AsyncClient) -> None:
    response = await api.get(f"{RUNS}/nobody/heartbeats")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "run_not_found"
