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


def _now() -> datetime:
    # per test, not per module: "10 s ago" must still be 10 s ago when the test runs
    return datetime.now(UTC).replace(microsecond=0)


def _beat(
    run_id: str,
    host: str,
    seconds_ago: float,
    *,
    now: datetime,
    pid: int = 100,
    step: int | None = 1,
) -> RunHeartbeat:
    at = now - timedelta(seconds=seconds_ago)
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
    now = _now()
    await publisher.publish_many(
        [
            _beat("beating", "node-0", 30, now=now, step=5),
            _beat("beating", "node-0", 10, now=now, step=9),
            _beat("beating", "node-0", 20, now=now, step=7),  # arrives late: changes nothing
            _beat("beating", "node-1", 60, now=now, step=3),  # silent for six intervals
        ]
    )
    beats = await wait_until(lambda: _heartbeats(api, "beating"), lambda beats: len(beats) == 2)
    node0, node1 = beats
    assert (node0["host"], node0["step"], node0["overdue"]) == ("node-0", 9, False)
    assert node0["lastSeenTime"] == (now - timedelta(seconds=10)).isoformat().replace("+00:00", "Z")
    assert node0["firstSeenTime"] == (now - timedelta(seconds=30)).isoformat().replace(
        "+00:00", "Z"
    )
    assert (node1["host"], node1["overdue"]) == ("node-1", True)


async def test_a_restart_is_a_new_pid_with_its_own_first_heartbeat(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    assert (
        await api.post(RUNS, json={"runId": "restarted", "displayName": "r"})
    ).status_code == 200
    now = _now()
    await publisher.publish_many([_beat("restarted", "node-0", 50, now=now, pid=100, step=40)])
    await wait_until(lambda: _heartbeats(api, "restarted"), lambda beats: len(beats) == 1)
    await publisher.publish_many([_beat("restarted", "node-0", 5, now=now, pid=200, step=None)])
    [beat] = await wait_until(
        lambda: _heartbeats(api, "restarted"), lambda beats: beats[0]["pid"] == 200
    )
    assert beat["step"] is None
    assert beat["firstSeenTime"] == beat["lastSeenTime"]


async def test_heartbeats_of_an_unknown_run_are_404(api: httpx.AsyncClient) -> None:
    response = await api.get(f"{RUNS}/nobody/heartbeats")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "run_not_found"
