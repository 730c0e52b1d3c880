"""The analyzer explains a numerical-instability event in plain words."""

import math
import uuid
from datetime import UTC, datetime

import pytest

from mldiag_analyzer.errors import NoAnalyzerForEvent
from mldiag_analyzer.service import AnalyzerService, analyze
from mldiag_schemas.analyses import AnalysisCompleted, DetectionState, Layer
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import (
    EventState,
    EventType,
    MetricEvidence,
    Severity,
    WorkloadEvent,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _event(last_good: tuple[int, float] | None = (41, 0.125)) -> WorkloadEvent:
    return WorkloadEvent(
        event_id=uuid.uuid4(),
        run_id="run-1",
        type=EventType.NUMERICAL_INSTABILITY,
        display_name="loss became NaN",
        severity=Severity.CRITICAL,
        state=EventState.OPEN,
        start_time=NOW,
        rule="non-finite-value",
        hosts=["host-3"],
        evidence=MetricEvidence(
            metric="loss",
            host="host-3",
            first_bad_step=42,
            first_bad_value=math.nan,
            last_good_step=last_good[0] if last_good else None,
            last_good_value=last_good[1] if last_good else None,
        ),
    )


def test_report_names_metric_step_and_last_good_value() -> None:
    analysis = analyze(_event(), "docs/runbooks/", NOW)
    assert analysis.analyzer_insight_found
    [report] = analysis.reports
    assert report.layer is Layer.MODEL
    assert report.detection_state is DetectionState.DETECTED
    assert report.details == (
        "Metric 'loss' became NaN at step 42 on host host-3. "
        "Its last finite value was 0.125 at step 41."
    )
    assert report.hosts == ["host-3"]
    assert report.recommended_actions
    assert all(
        action.documentation_url == "docs/runbooks/numerical-instability.md"
        for action in report.recommended_actions
    )


def test_report_without_a_good_value() -> None:
    [report] = analyze(_event(last_good=None), "docs/runbooks/", NOW).reports
    assert "No finite value of it was recorded before that." in report.details


def test_analysis_id_is_stable_for_an_event() -> None:
    event = _event()
    assert analyze(event, "", NOW).analysis_id == analyze(event, "", NOW).analysis_id


def test_unknown_event_types_are_refused() -> None:
    event = _event().model_copy(update={"type": "SOMETHING_NEW"})
    with pytest.raises(NoAnalyzerForEvent):
        analyze(event, "", NOW)


class _Recorder:
    def __init__(self) -> None:
        self.published: list[Envelope] = []

    async def publish_many(self, messages: list[Envelope]) -> None:
        self.published.extend(messages)


async def test_service_publishes_one_analysis_per_event_keyed_by_analysis_id() -> None:
    recorder = _Recorder()
    analyses = await AnalyzerService(recorder, "docs/runbooks/").on_events([_event(), _event()])
    assert len(recorder.published) == 2
    for message, analysis in zip(recorder.published, analyses, strict=True):
        assert isinstance(message, AnalysisCompleted)
        assert message.event_id == analysis.analysis_id
