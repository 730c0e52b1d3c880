"""Routing: the runs read model, and each opened or resolved event turned into deliveries
(one per matching rule and channel), decided once whatever redelivers it."""

from collections.abc import Callable

import structlog

from mldiag_notifier.errors import UnknownRun
from mldiag_notifier.repository import NotifierRepository, Plan
from mldiag_notifier.routing import RunFacts, matches
from mldiag_schemas.alerts import NotificationKind, TopCause
from mldiag_schemas.analyses import Analysis, DetectionState
from mldiag_schemas.events import WorkloadEvent
from mldiag_schemas.runs import Run

log = structlog.get_logger(__name__)


def run_facts(run: Run) -> RunFacts:
    """What rules match on, from a run (its project and location from its name)."""
    parts = run.name.split("/")
    project, location = (parts[1], parts[3]) if len(parts) >= 4 else ("default", "local")
    return RunFacts(
        run_id=run.run_id,
        project=project,
        location=location,
        name=run.name,
        display_name=run.display_name,
        run_set=run.run_set,
        labels=dict(run.labels),
    )


def top_cause(analysis: Analysis) -> TopCause | None:
    """The first DETECTED report (the analyzer orders them most probable first)."""
    for report in analysis.reports:
        if report.detection_state is DetectionState.DETECTED:
            return TopCause(
                analyzer=report.analyzer, details=report.details, evidence=list(report.evidence)
            )
    return None


class RoutingService:
    """Decides deliveries; the dispatcher sends them (``wake`` tells it one is queued)."""

    def __init__(
        self,
        repository: NotifierRepository,
        wake: Callable[[], None],
        analysis_wait_seconds: float,
    ) -> None:
        self._repository = repository
        self._wake = wake
        self._analysis_wait = analysis_wait_seconds

    async def on_run(self, run: Run, *, deleted: bool) -> None:
        """Keep a run's facts (a later fact wins; deletion sticks)."""
        await self._repository.save_run(run_facts(run), deleted, run.update_time)

    async def _run_of(self, event: WorkloadEvent) -> RunFacts:
        run = await self._repository.run(event.run_id)
        if run is None:
            # Its created fact comes on another stream: the bus retries the event shortly.
            raise UnknownRun(f"run {event.run_id} is not known yet")
        return run

    async def on_opened(self, event: WorkloadEvent) -> None:
        """Decide the OPENED deliveries of every enabled rule of the run's project that
        matches the event."""
        run = await self._run_of(event)
        rules = await self._repository.rules(run.project, run.location)
        plans = [
            Plan(rule, channel)
            for rule in rules
            if matches(rule, event, run)
            for channel in rule.channels
        ]
        queued = 0
        if plans:
            queued = await self._repository.decide_opened(run, event, plans, self._analysis_wait)
        self._routed(event, NotificationKind.OPENED, queued, plans=len(plans))

    async def on_resolved(self, event: WorkloadEvent) -> None:
        """Decide the RESOLVED deliveries of the rules that notified the opening."""
        run = await self._run_of(event)
        rules = {
            rule.rule_id: rule for rule in await self._repository.rules(run.project, run.location)
        }
        queued = await self._repository.decide_resolved(run, event, rules)
        self._routed(event, NotificationKind.RESOLVED, queued)

    def _routed(
        self, event: WorkloadEvent, kind: NotificationKind, queued: int, **fields: int
    ) -> None:
        """Wake the sender when deliveries were queued; one summary line per event."""
        if queued:
            self._wake()
        log.info(
            "notifier.event.routed",
            run=event.run_id,
            event_id=str(event.event_id),
            kind=kind.value,
            queued=queued,
            **fields,
        )

    async def on_analysis(self, analysis: Analysis) -> None:
        """Keep the event's top cause; its waiting OPENED notifications go now. The first
        analysis releases them; a re-analysis (one per event revision) only updates the
        cause later notifications (the RESOLVED one) are rendered with."""
        waiting = await self._repository.save_analysis(
            analysis.event_id,
            top_cause(analysis),
            analysis.time_lost_seconds,
            analysis.create_time,
        )
        if waiting:
            self._wake()
        log.info(
            "notifier.analysis.kept",
            run=analysis.run_id,
            event_id=str(analysis.event_id),
            released=waiting,
        )
