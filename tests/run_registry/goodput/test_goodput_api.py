"""``GET .../machineLearningRuns/{run}:goodput`` over stored points and events (real NATS
and PostgreSQL): exact seconds for a run whose clock is known."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_schemas.analyses import Analysis, AnalysisCompleted
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import (
    EventState,
    EventType,
    Severity,
    WorkloadEvent,
    WorkloadEventOpened,
)
from mldiag_schemas.monitoring import CHECKPOINT_TIME, COMPILE_TIME, DATA_WAIT_TIME, STEP_TIME
from mldiag_schemas.telemetry import MetricPoint, MetricPointsReceived
from support import wait_until

pytestmark = pytest.mark.connected

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RUNS = "/v1/machineLearningRuns"


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _points(host: str, process: int, scale: float) -> list[MetricPoint]:
    """Process 0's timeline (``scale`` 1), or another process's with scaled values.

    Step 0 ends at +60 s after 20 s (so it began at +40 s) and compiled for 15 s; an
    ahead-of-time compilation of 5 s ran at +30 s, before it. Steps 1-9 take 10 s each,
    step 10 is short (0.5 s). Data waits: 0.5 s, then 1 s per step, 0.25 s for the short one.
    One checkpoint blocks for 30 s.
    """

    def point(name: str, step: int, value: float, at: float) -> MetricPoint:
        return MetricPoint(
            name=name,
            step=step,
            value=value * scale,
            time=_at(at),
            host=host,
            process_index=process,
        )

    points = [point(STEP_TIME, 0, 20.0, 60), point(DATA_WAIT_TIME, 0, 0.5, 60)]
    for step in range(1, 10):
        points += [
            point(STEP_TIME, step, 10.0, 60 + 10 * step),
            point(DATA_WAIT_TIME, step, 1.0, 60 + 10 * step),
        ]
    points += [point(STEP_TIME, 10, 0.5, 150.5), point(DATA_WAIT_TIME, 10, 0.25, 150.5)]
    points += [
        point(COMPILE_TIME, 0, 5.0, 30),
        point(COMPILE_TIME, 0, 15.0, 55),
        point(CHECKPOINT_TIME, 5, 30.0, 140),
    ]
    return points


def _event(run_id: str, kind: EventType, lost: float, minute: int) -> WorkloadEvent:
    return WorkloadEvent(
        event_id=uuid.uuid4(),
        run_id=run_id,
        type=kind,
        display_name=kind.value.lower(),
        severity=Severity.WARNING,
        state=EventState.RESOLVED,
        start_time=_at(60 * minute),
        end_time=_at(60 * minute + 30),
        rule="x",
        time_lost_seconds=lost,
    )


async def test_goodput_of_a_run_with_known_points_and_events(
    api: httpx.AsyncClient, publisher: Publisher, database_url: str, db_schema: str
) -> None:
    run = (await api.post(RUNS, json={"runId": "gp", "displayName": "gp"})).json()["response"]
    done = await api.patch(f"{RUNS}/gp", json={"etag": run["etag"], "runPhase": "COMPLETED"})
    assert done.status_code == 200, done.text
    # Put the run on a known clock: created at T0, ended 1000 s later.
    conn = await asyncpg.connect(database_url, server_settings={"search_path": db_schema})
    try:
        await conn.execute(
            "UPDATE runs SET create_time = $1, end_time = $2 WHERE run_id = 'gp'",
            T0,
            _at(1000),
        )
    finally:
        await conn.close()

    hang = _event("gp", EventType.HANG, 200.0, 3)
    slow = _event("gp", EventType.PERFORMANCE_DEGRADATION, 5.0, 5)
    analysis = Analysis(
        analysis_id=uuid.uuid4(),
        event_id=slow.event_id,
        run_id="gp",
        analyzer_insight_found=False,
        reports=[],
        time_lost_seconds=8.0,  # the analysis counted more than the detector
        create_time=_at(400),
    )
    messages: list[Envelope] = [
        MetricPointsReceived.model_validate(
            {"run_id": "gp", "batch_id": uuid.uuid4(), "chunk": 0, "points": _points("h0", 0, 1.0)}
        ),
        # another process, twice as slow: read neither summed nor as the reference
        MetricPointsReceived.model_validate(
            {"run_id": "gp", "batch_id": uuid.uuid4(), "chunk": 0, "points": _points("h1", 1, 2.0)}
        ),
        WorkloadEventOpened(event=hang),
        WorkloadEventOpened(event=slow),
        AnalysisCompleted(analysis=analysis),
    ]
    await publisher.publish_many(messages)

    async def step_series() -> int:
        latest = (await api.get(f"{RUNS}/gp/metrics:latest")).json()["values"]
        return len([v for v in latest if v["name"] == STEP_TIME])

    await wait_until(step_series, accept=lambda count: count == 2)

    async def goodput() -> dict[str, Any]:
        response = await api.get(f"{RUNS}/gp:goodput")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def complete(body: dict[str, Any]) -> bool:
        lost = [e["timeLostSeconds"] for e in body["events"]]
        steps_in = body["steps"] == 11 and body["stepSeconds"] == 110.5
        return steps_in and lost == [200.0, 8.0]

    body = await wait_until(goodput, accept=complete)
    seconds = {b["kind"]: b["seconds"] for b in body["buckets"]}
    assert seconds == {
        "STARTUP": 55.0,
        "DATA_LOADING": 9.75,
        "CHECKPOINTING": 30.0,
        "DISRUPTIONS": 200.0,
        "EVENTS": 8.0,
        "UNACCOUNTED": 611.5,
    }
    assert body["wallSeconds"] == 1000.0
    assert body["productiveSeconds"] == 85.75
    assert body["goodput"] == 0.08575
    assert body["reference"] == "process 0"
    assert body["firstStepStartTime"].startswith("2026-01-01T00:00:40")
    assert body["run"] == "projects/default/locations/local/machineLearningRuns/gp"
    assert [(e["type"], e["bucket"], e["seconds"]) for e in body["events"]] == [
        ("HANG", "DISRUPTIONS", 200.0),
        ("PERFORMANCE_DEGRADATION", "EVENTS", 8.0),
    ]
    assert body["events"][0]["event"].endswith(f"/monitoredEvents/{hang.event_id}")

    full = await api.get("/v1/projects/default/locations/local/machineLearningRuns/gp:goodput")
    assert full.json()["buckets"] == body["buckets"]


async def test_goodput_of_missing_and_idle_runs(api: httpx.AsyncClient) -> None:
    missing = await api.get(f"{RUNS}/nope:goodput")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "run_not_found")

    await api.post(RUNS, json={"runId": "idle", "displayName": "idle"})
    body = (await api.get(f"{RUNS}/idle:goodput")).json()
    assert body["steps"] == 0 and body["productiveSeconds"] == 0.0 and body["reference"] == ""
    startup = next(b for b in body["buckets"] if b["kind"] == "STARTUP")
    assert startup["seconds"] == body["wallSeconds"]  # no step yet: all before the first
