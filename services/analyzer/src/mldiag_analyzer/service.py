"""Analyzers: for each event, the reports that explain it (pure functions, no bus)."""

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import structlog

from mldiag_analyzer.errors import NoAnalyzerForEvent
from mldiag_platform.bus import MessagePublisher
from mldiag_schemas.analyses import (
    ANALYSIS_ID_NAMESPACE,
    Analysis,
    AnalysisCompleted,
    AnalyzerReport,
    DetectionState,
    Layer,
    RecommendedAction,
)
from mldiag_schemas.events import EventType, WorkloadEvent
from mldiag_schemas.ids import derived_id

log = structlog.get_logger(__name__)

ANALYZER_VERSION = "1"
"""Part of the analysis id: a new analyzer version yields a new analysis of an old event."""

Analyzer = Callable[[WorkloadEvent, str], AnalyzerReport]
"""(event, runbook base URL) → report."""


def _describe(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def numerical_instability(event: WorkloadEvent, runbooks: str) -> AnalyzerReport:
    """Which metric went non-finite, at which step, and the last good value before it."""
    evidence = event.evidence
    where = f" on host {evidence.host}" if evidence.host else ""
    if evidence.last_good_step is None:
        before = "No finite value of it was recorded before that."
    else:
        before = (
            f"Its last finite value was {evidence.last_good_value:.6g}"
            f" at step {evidence.last_good_step}."
        )
    details = (
        f"Metric '{evidence.metric}' became {_describe(evidence.first_bad_value)}"
        f" at step {evidence.first_bad_step}{where}. {before}"
    )
    runbook = runbooks + "numerical-instability.md"
    return AnalyzerReport(
        analyzer="numerical-instability",
        layer=Layer.MODEL,
        detection_state=DetectionState.DETECTED,
        details=details,
        hosts=event.hosts,
        recommended_actions=[
            RecommendedAction(
                description="Resume from the last checkpoint before step "
                f"{evidence.first_bad_step} with a lower learning rate or gradient clipping.",
                documentation_url=runbook,
            ),
            RecommendedAction(
                description="Re-run the failing steps with jax.config.update('jax_debug_nans',"
                " True) to find the operation that first produced the non-finite value.",
                documentation_url=runbook,
            ),
            RecommendedAction(
                description="Check the input batch at that step for NaN/Inf or extreme values.",
                documentation_url=runbook,
            ),
        ],
    )


ANALYZERS: dict[EventType, tuple[Analyzer, ...]] = {
    EventType.NUMERICAL_INSTABILITY: (numerical_instability,),
}
"""Every analyzer relevant to each event type, most specific first."""


def analyze(event: WorkloadEvent, runbooks: str, now: datetime) -> Analysis:
    """Run every analyzer relevant to the event; DETECTED reports first."""
    analyzers = ANALYZERS.get(event.type)
    if not analyzers:
        raise NoAnalyzerForEvent(f"no analyzer for events of type {event.type}")
    reports = sorted(
        (analyzer(event, runbooks) for analyzer in analyzers),
        key=lambda report: report.detection_state != DetectionState.DETECTED,
    )
    return Analysis(
        analysis_id=derived_id(ANALYSIS_ID_NAMESPACE, str(event.event_id), ANALYZER_VERSION),
        event_id=event.event_id,
        run_id=event.run_id,
        analyzer_insight_found=any(r.detection_state == DetectionState.DETECTED for r in reports),
        reports=reports,
        create_time=now,
    )


class AnalyzerService:
    """Analyses events and publishes the analyses."""

    def __init__(self, publisher: MessagePublisher, runbook_base_url: str) -> None:
        self._publisher = publisher
        self._runbooks = runbook_base_url

    async def on_events(self, events: Sequence[WorkloadEvent]) -> list[Analysis]:
        """Analyse each event and publish the results; return them."""
        now = datetime.now(UTC)
        analyses = [analyze(event, self._runbooks, now) for event in events]
        await self._publisher.publish_many(
            [
                # The message id is the analysis id: a redelivered event republishes the same
                # message, which JetStream drops and the registry would ignore anyway.
                AnalysisCompleted(event_id=analysis.analysis_id, occurred_at=now, analysis=analysis)
                for analysis in analyses
            ]
        )
        for analysis in analyses:
            log.info(
                "analysis.completed",
                run_id=analysis.run_id,
                event_id=str(analysis.event_id),
                insight=analysis.analyzer_insight_found,
                top=analysis.reports[0].analyzer,
            )
        return analyses
