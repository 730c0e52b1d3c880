"""How the events read model picks revisions and merges analyses (no I/O)."""

import uuid
from datetime import UTC, datetime

from mldiag_run_registry.events.repository import StoredEvent
from mldiag_run_registry.events.service import latest_revisions, served
from mldiag_schemas.analyses import Analysis, AnalyzerReport, DetectionState, Layer
from mldiag_schemas.events import EventState, EventType, Severity, WorkloadEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _event(revision: int, state: EventState = EventState.OPEN, lost: float = 0.0) -> WorkloadEvent:
    return WorkloadEvent(
        event_id=uuid.UUID(int=1),
        run_id="r1",
        type=EventType.HANG,
        display_name="hang",
        severity=Severity.CRITICAL,
        state=state,
        start_time=T0,
        rule="hang",
        revision=revision,
        time_lost_seconds=lost,
    )


def test_one_revision_per_event_the_highest_and_resolved_on_a_tie() -> None:
    other = _event(1).model_copy(update={"event_id": uuid.UUID(int=2)})
    picked = latest_revisions([_event(1), other, _event(3), _event(2)])
    assert [(e.event_id.int, e.revision) for e in picked] == [(1, 3), (2, 1)]
    tie = latest_revisions([_event(2, EventState.RESOLVED), _event(2)])
    assert [e.state for e in tie] == [EventState.RESOLVED]


def test_served_events_are_named_and_carry_their_latest_analysis() -> None:
    bare = served(StoredEvent(_event(1, lost=30.0), "p", "l", None))
    assert bare.name == (
        f"projects/p/locations/l/machineLearningRuns/r1/monitoredEvents/{uuid.UUID(int=1)}"
    )
    assert (bare.analyzer_insight_found, bare.analyzer_reports) == (False, [])

    report = AnalyzerReport(
        analyzer="a", layer=Layer.FRAMEWORK, detection_state=DetectionState.DETECTED, details="d"
    )
    analysis = Analysis(
        analysis_id=uuid.uuid4(),
        event_id=uuid.UUID(int=1),
        run_id="r1",
        analyzer_insight_found=True,
        reports=[report],
        time_lost_seconds=45.0,
        create_time=T0,
    )
    merged = served(StoredEvent(_event(1, lost=30.0), "p", "l", analysis))
    assert merged.analyzer_insight_found and merged.analyzer_reports == [report]
    assert merged.time_lost_seconds == 45.0
    assert served(StoredEvent(_event(2, lost=60.0), "p", "l", analysis)).time_lost_seconds == 60.0
