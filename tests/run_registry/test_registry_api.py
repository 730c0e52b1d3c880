"""run-registry against real PostgreSQL and NATS, through its HTTP API and its consumers."""

import math
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import (
    EventState,
    EventType,
    Evidence,
    Severity,
    WorkloadEvent,
    WorkloadEventOpened,
)
from mldiag_schemas.telemetry import MetricPoint, MetricPointsReceived
from support import wait_until

pytestmark = pytest.mark.connected

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUNS = "/v1/machineLearningRuns"


async def test_health_reports_both_connections(api: httpx.AsyncClient) -> None:
    response = await api.get("/healthz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"nats": True, "database": True}


async def test_create_get_and_list_runs_with_paging(api: httpx.AsyncClient) -> None:
    created = []
    for index in range(5):
        response = await api.post(
            RUNS, json={"displayName": f"run {index}", "labels": {"i": str(index)}}
        )
        assert response.status_code == 200, response.text
        operation = response.json()
        assert operation["done"] is True and operation["metadata"]["verb"] == "create"
        created.append(operation["response"])
    first = created[0]
    assert first["state"] == "STATE_ACTIVE"
    assert first["name"] == f"projects/default/locations/local/machineLearningRuns/{first['runId']}"

    fetched = await api.get(f"{RUNS}/{first['runId']}")
    assert fetched.json() == first
    full = await api.get(
        f"/v1/projects/default/locations/local/machineLearningRuns/{first['runId']}"
    )
    assert full.json() == first

    seen: list[str] = []
    token = ""
    while True:
        page = (await api.get(RUNS, params={"pageSize": 2, "pageToken": token})).json()
        assert len(page["machineLearningRuns"]) <= 2
        seen.extend(run["runId"] for run in page["machineLearningRuns"])
        token = page["nextPageToken"]
        if not token:
            break
    assert seen == [run["runId"] for run in reversed(created)]


async def test_projects_scope_runs(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/v1/projects/p1/locations/l1/machineLearningRuns", json={"displayName": "scoped"}
    )
    run_id = response.json()["response"]["runId"]
    assert (
        await api.get(f"/v1/projects/p1/locations/l1/machineLearningRuns/{run_id}")
    ).status_code == 200
    assert (await api.get(f"{RUNS}/{run_id}")).status_code == 404


async def test_user_mistakes_get_clear_4xx_codes(api: httpx.AsyncClient) -> None:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    assert (await api.post(RUNS, json={"runId": run_id, "displayName": "x"})).status_code == 200

    duplicate = await api.post(RUNS, json={"runId": run_id, "displayName": "x"})
    assert (duplicate.status_code, duplicate.json()["error"]["code"]) == (409, "run_already_exists")

    missing = await api.get(f"{RUNS}/does-not-exist")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "run_not_found")

    invalid = await api.post(RUNS, json={"displayName": ""})
    assert invalid.status_code == 400
    assert invalid.json()["error"]["details"][0]["field"] == "displayName"

    not_json = await api.post(RUNS, content=b"{oops")
    assert not_json.status_code == 400

    bad_token = await api.get(RUNS, params={"pageToken": "garbage"})
    assert (bad_token.status_code, bad_token.json()["error"]["code"]) == (400, "invalid_page_token")

    bad_id = await api.get(f"{RUNS}/Bad.Id")
    assert (bad_id.status_code, bad_id.json()["error"]["code"]) == (400, "invalid_run_id")


async def test_points_from_the_bus_are_served_back_with_nan_kept(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    run_id = (await api.post(RUNS, json={"displayName": "metrics"})).json()["response"]["runId"]
    values = [0.5, 0.25, math.nan, math.inf, -math.inf]
    message = MetricPointsReceived(
        run_id=run_id,
        batch_id=uuid.uuid4(),
        chunk=0,
        points=[
            MetricPoint(name="loss", step=step, value=value, time=NOW, host="h1")
            for step, value in enumerate(values)
        ],
    )
    await publisher.publish(message)

    async def series() -> dict[str, object]:
        response = await api.get(f"{RUNS}/{run_id}/metrics/loss", params={"pageSize": 2})
        body: dict[str, object] = response.json()
        return body

    first_page = await wait_until(series, accept=lambda page: bool(page["points"]))
    points = list(first_page["points"])  # type: ignore[call-overload]
    token = first_page["nextPageToken"]
    while token:
        page = (
            await api.get(
                f"{RUNS}/{run_id}/metrics/loss", params={"pageSize": 2, "pageToken": token}
            )
        ).json()
        points.extend(page["points"])
        token = page["nextPageToken"]
    assert [p["step"] for p in points] == [0, 1, 2, 3, 4]
    got = [p["value"] for p in points]
    assert got[:2] == [0.5, 0.25] and math.isnan(got[2]) and got[3:] == [math.inf, -math.inf]

    listing = (await api.get(f"{RUNS}/{run_id}/metrics")).json()
    assert listing == {"metrics": [{"name": "loss", "pointCount": 5, "lastStep": 4}]}


async def test_events_are_stored_once_and_served(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    run_id = (await api.post(RUNS, json={"displayName": "events"})).json()["response"]["runId"]
    event = WorkloadEvent(
        event_id=uuid.uuid4(),
        run_id=run_id,
        type=EventType.NUMERICAL_INSTABILITY,
        display_name="loss became NaN at step 3",
        severity=Severity.CRITICAL,
        state=EventState.OPEN,
        start_time=NOW,
        rule="non-finite-value",
        evidence=Evidence(metric="loss", first_bad_step=3, first_bad_value=math.nan),
    )
    # two messages with different envelope ids carry the same event: stored once
    messages: list[Envelope] = [WorkloadEventOpened(event=event), WorkloadEventOpened(event=event)]
    await publisher.publish_many(messages)

    async def events() -> list[dict[str, object]]:
        found: list[dict[str, object]] = (await api.get(f"{RUNS}/{run_id}/events")).json()["events"]
        return found

    found = await wait_until(events)
    assert len(found) == 1
    assert found[0]["eventId"] == str(event.event_id)
    assert math.isnan(found[0]["evidence"]["firstBadValue"])  # type: ignore[index]
