"""The analyzer's domain logic: run every relevant analyzer over an event and the run's
signals, rank the causes, decide on a profile capture, and publish (no bus details here)."""

import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import structlog

from mldiag_analyzer.analyzers import Inputs, analyzers_for
from mldiag_analyzer.analyzers.common import silent_hosts
from mldiag_analyzer.cost import time_lost_seconds
from mldiag_platform.bus import MessagePublisher
from mldiag_schemas.analyses import (
    ANALYSIS_ID_NAMESPACE,
    Analysis,
    AnalysisCompleted,
    AnalyzerReport,
    DetectionState,
)
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import (
    EventType,
    RunContext,
    WorkloadEvent,
    WorkloadEventOpened,
    WorkloadEventUpdated,
)
from mldiag_schemas.ids import derived_id
from mldiag_schemas.profiling import ProfileCaptureRequested

log = structlog.get_logger(__name__)

ANALYZER_VERSION = "2"
"""Part of the analysis id: a new analyzer version yields a new analysis of an old event."""

PROFILED_EVENTS = frozenset(
    {
        EventType.PERFORMANCE_DEGRADATION,
        EventType.STRAGGLER,
        EventType.RECOMPILATION_STORM,
        EventType.INPUT_STALL,
        EventType.HANG,
    }
)
"""Events a profile helps explain (a hang only while some of its processes are alive)."""

PROFILE_STEPS = 5
"""A capture should hold a few steps: this many typical steps, within the bounds below."""
MIN_CAPTURE_SECONDS = 2.0
MAX_CAPTURE_SECONDS = 30.0


def rank(reports: Sequence[AnalyzerReport]) -> list[AnalyzerReport]:
    """DETECTED reports first, most probable (highest score) first; ties keep their order."""
    return sorted(
        reports,
        key=lambda r: (r.detection_state != DetectionState.DETECTED, -r.score),
    )


def analysis_id(event: WorkloadEvent, reanalysis: bool = False) -> uuid.UUID:
    """The analysis id: one per event and analyzer version for the analysis of the opened
    event (the id analyses stored before re-analysis existed keep), and one per revision for
    each re-analysis of an update, so that a redelivered message yields the same id."""
    parts = [str(event.event_id), ANALYZER_VERSION]
    if reanalysis:
        parts.append(f"revision-{event.revision}")
    return derived_id(ANALYSIS_ID_NAMESPACE, *parts)


def analyze(
    event: WorkloadEvent,
    context: RunContext | None,
    runbooks: str,
    now: datetime,
    capture_requested: bool = False,
    reanalysis: bool = False,
) -> Analysis:
    """Run every analyzer relevant to the event over it and the run's signals; rank them.
    ``reanalysis``: the event's update brought new signals (see :func:`analysis_id`)."""
    inputs = Inputs(event, context)
    reports = rank([analyzer.run(inputs, runbooks) for analyzer in analyzers_for(event.type)])
    detected = [r for r in reports if r.detection_state == DetectionState.DETECTED]
    return Analysis(
        analysis_id=analysis_id(event, reanalysis),
        event_id=event.event_id,
        run_id=event.run_id,
        analyzer_insight_found=bool(detected),
        reports=reports,
        probable_cause=detected[0].analyzer if detected else "",
        time_lost_seconds=time_lost_seconds(event, context),
        capture_requested=capture_requested,
        create_time=now,
    )


def capture_message_id(event: WorkloadEvent) -> uuid.UUID:
    """The capture request's message id: one per event, so a redelivery dedupes."""
    return uuid.uuid5(event.event_id, "profile-capture")


def capture_request(
    event: WorkloadEvent, context: RunContext | None, now: datetime
) -> ProfileCaptureRequested | None:
    """A profile snapshot of the run when one would help explain the event and the run is
    still running; None otherwise."""
    if event.type not in PROFILED_EVENTS or context is None or context.run_phase != "ACTIVE":
        return None
    hosts = list(event.hosts)
    if event.type == EventType.HANG:
        # Only live processes can be profiled; a capture on a dead host just goes missing.
        silent = {h.host for h in silent_hosts(Inputs(event, context))}
        candidates = hosts or [h.host for h in context.hosts]
        alive = [host for host in candidates if host not in silent]
        if not alive:
            return None
        hosts = alive if silent else hosts
        reason = "Hang with live processes: a profile shows the operation they are stuck in."
    else:
        reason = f"{event.display_name}: a profile shows where the step time goes."
    step_times = [h.step_time for h in context.hosts if h.step_time]
    duration = MIN_CAPTURE_SECONDS
    if step_times and event.type != EventType.HANG:
        duration = PROFILE_STEPS * statistics.median(step_times)
    return ProfileCaptureRequested(
        event_id=capture_message_id(event),
        occurred_at=now,
        run_id=event.run_id,
        kind="SNAPSHOT",
        workload_event_id=event.event_id,
        hosts=hosts,
        duration_seconds=min(max(duration, MIN_CAPTURE_SECONDS), MAX_CAPTURE_SECONDS),
        reason=reason[:1000],
    )


def _utc_now() -> datetime:
    return datetime.now(UTC)


class AnalyzerService:
    """Analyses opened events and publishes each analysis with its capture request."""

    def __init__(
        self,
        publisher: MessagePublisher,
        runbook_base_url: str,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._publisher = publisher
        self._runbooks = runbook_base_url
        self._clock = clock

    async def on_opened(self, openings: Sequence[WorkloadEventOpened]) -> list[Analysis]:
        """Analyse each opened event, publish the analyses and capture requests together,
        and return the analyses."""
        now = self._clock()
        analyses: list[Analysis] = []
        messages: list[Envelope] = []
        for opened in openings:
            started = time.perf_counter()
            event, context = opened.event, opened.context
            capture = capture_request(event, context, now)
            analysis = analyze(event, context, self._runbooks, now, capture is not None)
            analyses.append(analysis)
            messages.append(_completed(analysis, now))
            if capture is not None:
                messages.append(capture)
            _log_analysis(analysis, event, context, started, revision=None)
        await self._publisher.publish_many(messages)
        return analyses

    async def on_updated(self, updates: Sequence[WorkloadEventUpdated]) -> list[Analysis]:
        """Analyse again each updated event whose update carries the run's signals (an update
        without them changed nothing the analyzers read, so it is skipped); publish the new
        analyses, which the registry serves as the event's latest. No second capture: the
        opened event's analysis decided that once."""
        now = self._clock()
        analyses: list[Analysis] = []
        for update in updates:
            if update.context is None:
                continue
            started = time.perf_counter()
            event = update.event
            analysis = analyze(event, update.context, self._runbooks, now, reanalysis=True)
            analyses.append(analysis)
            _log_analysis(analysis, event, update.context, started, revision=event.revision)
        if analyses:
            await self._publisher.publish_many([_completed(a, now) for a in analyses])
        return analyses


def _completed(analysis: Analysis, now: datetime) -> AnalysisCompleted:
    # The message id is the analysis id: a redelivered event republishes the same message,
    # which JetStream drops and the registry would ignore anyway.
    return AnalysisCompleted(event_id=analysis.analysis_id, occurred_at=now, analysis=analysis)


def _log_analysis(
    analysis: Analysis,
    event: WorkloadEvent,
    context: RunContext | None,
    started: float,
    revision: int | None,
) -> None:
    log.info(
        "analysis.completed" if revision is None else "analysis.reanalysed",
        run_id=event.run_id,
        event_id=str(event.event_id),
        event_type=str(event.type),
        revision=event.revision,
        probable_cause=analysis.probable_cause,
        detected=sum(r.detection_state == DetectionState.DETECTED for r in analysis.reports),
        reports=len(analysis.reports),
        capture_requested=analysis.capture_requested,
        has_context=context is not None,
        log_excerpts=len(context.log_excerpts) if context else 0,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
    )
