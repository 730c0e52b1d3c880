"""The events read model: event-life messages from the bus served as monitoredEvents, with
revisions, analyses, filters, paging and 404s (real NATS and PostgreSQL)."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_schemas.analyses import (
    Analysis,
    AnalysisCompleted,
    AnalyzerReport,
    DetectionState,
    Layer,
    RecommendedAction,
)
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import (
    EventState,
    EventType,
    Evidence,
    Severity,
    WorkloadEvent,
    WorkloadEventOpened,
    WorkloadEventResolved,
    WorkloadEventUpdated,
)
from support import wait_until

pytestmark = pytest.mark.connected

T0 = datetime(2026, 3, 1, tzinfo=UTC)
RUNS = "/v1/machineLearningRuns"
FULL = "/v1/projects/default/locations/local"


def event(run_id: str, **changes: Any) -> WorkloadEvent:
    """An event of ``run_id``; ``changes`` override the defaults."""
    fields: dict[str, Any] = {
        "event_id": uuid.uuid4(),
        "run_id": run_id,
        "type": EventType.PERFORMANCE_DEGRADATION,
        "display_name": "step time up 40%",
        "severity": Severity.WARNING,
        "state": EventState.OPEN,
        "start_time": T0,
        "rule": "step-time-regression",
        "evidence": Evidence(metric="step_time", first_bad_step=120),
    }
    fields.update(changes)
    return WorkloadEvent(**fields)


async def new_run(api: httpx.AsyncClient, run_id: str, parent: str = "/v1") -> str:
    response = await api.post(
        f"{parent}/machineLearningRuns", json={"runId": run_id, "displayName": run_id}
    )
    assert response.status_code == 200, response.text
    return run_id


async def get_event(api: httpx.AsyncClient, run_id: str, event_id: uuid.UUID) -> httpx.Response:
    return await api.get(f"{RUNS}/{run_id}/monitoredEvents/{event_id}")


async def until_stored(api: httpx.AsyncClient, run_id: str, marker: WorkloadEvent) -> None:
    """Wait until ``marker`` (published last) is served: everything before it was handled."""

    async def status() -> int:
        return (await get_event(api, run_id, marker.event_id)).status_code

    await wait_until(status, accept=lambda code: code == 200)


async def test_the_highest_revision_wins_whatever_the_order(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    run_id = await new_run(api, "revisions")
    opened = event(run_id)
    r2 = opened.model_copy(update={"revision": 2, "hosts": ["h1"], "time_lost_seconds": 12.0})
    resolved = r2.model_copy(
        update={"revision": 3, "state": EventState.RESOLVED, "end_time": T0 + timedelta(seconds=60)}
    )
    late_open = opened.model_copy(update={"revision": 2})  # redelivered, older than r3
    marker = event(run_id, start_time=T0 - timedelta(days=1))
    # one batch holding several revisions of one event, then stale ones in later batches
    await publisher.publish_many(
        [
            WorkloadEventOpened(event=opened),
            WorkloadEventUpdated(event=r2),
            WorkloadEventResolved(event=resolved),
        ]
    )
    await until_stored(api, run_id, opened)
    stale: list[Envelope] = [
        WorkloadEventUpdated(event=r2),
        WorkloadEventOpened(event=late_open),
        WorkloadEventOpened(event=marker),
    ]
    await publisher.publish_many(stale)
    await until_stored(api, run_id, marker)

    served = (await get_event(api, run_id, opened.event_id)).json()
    assert served["revision"] == 3
    assert served["state"] == "RESOLVED"
    assert served["hosts"] == ["h1"]
    assert served["timeLostSeconds"] == 12.0
    assert served["name"] == (
        f"projects/default/locations/local/machineLearningRuns/{run_id}"
        f"/monitoredEvents/{opened.event_id}"
    )
    listing = (await api.get(f"{RUNS}/{run_id}/monitoredEvents")).json()["events"]
    assert [e["eventId"] for e in listing] == [str(opened.event_id), str(marker.event_id)]


async def test_an_analysis_before_its_event_is_merged_when_the_event_comes(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    run_id = await new_run(api, "analysed")
    hang = event(run_id, type=EventType.HANG, time_lost_seconds=30.0, rule="hang")
    reports = [
        AnalyzerReport(
            analyzer="data-input-stall",
            layer=Layer.FRAMEWORK,
            detection_state=DetectionState.DETECTED,
            details="every host waits in the data loader",
            hosts=["h0", "h1"],
            evidence=["data wait 92% of the step"],
            score=0.9,
            recommended_actions=[
                RecommendedAction(
                    description="raise prefetch", documentation_url="https://example.com/d"
                )
            ],
        ),
        AnalyzerReport(
            analyzer="collective-hang",
            layer=Layer.FRAMEWORK,
            detection_state=DetectionState.NOT_DETECTED,
            details="no collective in the stacks",
        ),
    ]
    analysis = Analysis(
        analysis_id=uuid.uuid4(),
        event_id=hang.event_id,
        run_id=run_id,
        analyzer_insight_found=True,
        reports=reports,
        probable_cause="data-input-stall",
        time_lost_seconds=45.0,
        create_time=T0,
    )
    await publisher.publish(AnalysisCompleted(analysis=analysis))

    async def analyses() -> list[Any]:
        found: list[Any] = (await api.get(f"{RUNS}/{run_id}/analyses")).json()["analyses"]
        return found

    await wait_until(analyses)
    assert (await get_event(api, run_id, hang.event_id)).status_code == 404
    await publisher.publish(WorkloadEventOpened(event=hang))
    await until_stored(api, run_id, hang)

    served = (await get_event(api, run_id, hang.event_id)).json()
    assert served["analyzerInsightFound"] is True
    assert [r["analyzer"] for r in served["analyzerReports"]] == [
        "data-input-stall",
        "collective-hang",
    ]
    assert served["analyzerReports"][0]["recommendedActions"][0]["documentationUrl"] == (
        "https://example.com/d"
    )
    assert served["timeLostSeconds"] == 45.0  # the larger of the event's and the analysis's

    # a later revision of the event that counted more wins over the analysis
    longer = hang.model_copy(update={"revision": 2, "time_lost_seconds": 60.0})
    await publisher.publish(WorkloadEventUpdated(event=longer))

    async def lost() -> float:
        value: float = (await get_event(api, run_id, hang.event_id)).json()["timeLostSeconds"]
        return value

    await wait_until(lost, accept=lambda seconds: seconds == 60.0)


async def _page_through(
    api: httpx.AsyncClient, path: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    token = ""
    while True:
        response = await api.get(path, params={**params, "pageToken": token})
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["events"]) <= params.get("pageSize", 50)
        found.extend(page["events"])
        token = page["nextPageToken"]
        if not token:
            return found


async def test_filters_paging_and_parents(api: httpx.AsyncClient, publisher: Publisher) -> None:
    a = await new_run(api, "filter-a")
    b = await new_run(api, "filter-b")
    elsewhere = await new_run(api, "filter-c", "/v1/projects/p2/locations/l2")
    events = [
        event(a, start_time=T0 + timedelta(minutes=1)),
        event(a, type=EventType.HANG, start_time=T0 + timedelta(minutes=2)),
        event(
            a,
            type=EventType.HANG,
            state=EventState.RESOLVED,
            end_time=T0 + timedelta(minutes=9),
            start_time=T0 + timedelta(minutes=3),
        ),
        event(b, type=EventType.STRAGGLER, start_time=T0 + timedelta(minutes=4)),
        # two events at the same start time: ordered by id
        event(b, start_time=T0 + timedelta(minutes=5)),
        event(b, start_time=T0 + timedelta(minutes=5)),
        event(elsewhere, start_time=T0 + timedelta(minutes=6)),
    ]
    await publisher.publish_many([WorkloadEventOpened(event=e) for e in events])
    await until_stored(api, b, events[5])

    async def everything() -> list[dict[str, Any]]:
        return await _page_through(api, f"{FULL}/monitoredEvents", {"pageSize": 2})

    listed = await wait_until(everything, accept=lambda found: len(found) == 6)
    expected = sorted(events[:6], key=lambda e: (e.start_time, e.event_id), reverse=True)
    assert [e["eventId"] for e in listed] == [str(e.event_id) for e in expected]

    # the short form is the default parent; the other project sees only its own
    short = (await api.get("/v1/monitoredEvents", params={"pageSize": 100})).json()["events"]
    assert len(short) == 6

    async def other_project() -> httpx.Response:
        return await api.get("/v1/projects/p2/locations/l2/monitoredEvents")

    other = await wait_until(other_project, accept=lambda r: bool(r.json()["events"]))
    assert [e["eventId"] for e in other.json()["events"]] == [str(events[6].event_id)]
    assert other.json()["events"][0]["name"].startswith(
        "projects/p2/locations/l2/machineLearningRuns/filter-c/monitoredEvents/"
    )

    def ids(found: list[dict[str, Any]]) -> set[str]:
        return {e["eventId"] for e in found}

    async def query(path: str, text: str) -> set[str]:
        return ids(await _page_through(api, path, {"filter": text, "pageSize": 1}))

    run_a = f"{RUNS}/{a}/monitoredEvents"
    assert await query(run_a, "type = HANG") == ids_of(events[1:3])
    assert await query(run_a, "type = hang AND state = OPEN") == ids_of(events[1:2])
    assert await query(run_a, "state=RESOLVED") == ids_of(events[2:3])
    assert await query(f"{FULL}/monitoredEvents", f'run = "{b}"') == ids_of(events[3:6])
    assert await query(
        "/v1/monitoredEvents", f'run = "projects/default/locations/local/machineLearningRuns/{a}"'
    ) == ids_of(events[:3])
    window = (
        f'startTime >= "{(T0 + timedelta(minutes=2)).isoformat()}"'
        f' AND startTime <= "{(T0 + timedelta(minutes=4)).isoformat()}"'
    )
    assert await query("/v1/monitoredEvents", window) == ids_of(events[1:4])
    assert await query("/v1/monitoredEvents", "type = STRAGGLER OR state = RESOLVED") == ids_of(
        [events[2], events[3]]
    )
    # the old route is an alias
    legacy = (await api.get(f"{RUNS}/{a}/events")).json()["events"]
    assert [e["eventId"] for e in legacy] == [str(e.event_id) for e in reversed(events[:3])]


def ids_of(events: list[WorkloadEvent]) -> set[str]:
    return {str(e.event_id) for e in events}


async def test_mistakes_and_missing_things_get_stable_codes(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    run_id = await new_run(api, "doomed-events")
    kept = event(run_id)
    await publisher.publish(WorkloadEventOpened(event=kept))
    await until_stored(api, run_id, kept)

    cases: list[tuple[str, dict[str, str | int], int, str]] = [
        (f"{RUNS}/{run_id}/monitoredEvents/{uuid.uuid4()}", {}, 404, "event_not_found"),
        (f"{RUNS}/{run_id}/monitoredEvents/not-a-uuid", {}, 404, "event_not_found"),
        (f"{RUNS}/nope/monitoredEvents/{kept.event_id}", {}, 404, "run_not_found"),
        (f"{RUNS}/nope/monitoredEvents", {}, 404, "run_not_found"),
        ("/v1/monitoredEvents", {"filter": "type = BOGUS"}, 400, "invalid_filter"),
        ("/v1/monitoredEvents", {"filter": "colour = red"}, 400, "invalid_filter"),
        ("/v1/monitoredEvents", {"filter": 'startTime >= "yesterday"'}, 400, "invalid_filter"),
        ("/v1/monitoredEvents", {"pageToken": "garbage"}, 400, "invalid_page_token"),
        ("/v1/monitoredEvents", {"pageSize": -1}, 400, "invalid_page_size"),
    ]
    for path, params, status, code in cases:
        response = await api.get(path, params=params)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), path

    # a token is bound to its query
    for _ in range(2):
        await publisher.publish(WorkloadEventOpened(event=event(run_id)))

    async def three() -> list[Any]:
        found: list[Any] = (await api.get("/v1/monitoredEvents")).json()["events"]
        return found

    await wait_until(three, accept=lambda found: len(found) == 3)
    token = (await api.get("/v1/monitoredEvents", params={"pageSize": 1})).json()["nextPageToken"]
    mismatch = await api.get(
        "/v1/monitoredEvents", params={"pageToken": token, "filter": "state = OPEN"}
    )
    assert mismatch.json()["error"]["code"] == "invalid_page_token"

    # a deleted run's events are not served
    etag = (await api.get(f"{RUNS}/{run_id}")).json()["etag"]
    assert (await api.delete(f"{RUNS}/{run_id}", params={"etag": etag})).status_code == 200
    assert (await api.get("/v1/monitoredEvents")).json()["events"] == []
    gone = await get_event(api, run_id, kept.event_id)
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "run_not_found")
