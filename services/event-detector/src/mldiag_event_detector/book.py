"""The event book: opens an event once, updates it while it lasts, resolves it once.

Rules only say "this condition holds now, with this evidence" (:meth:`EventBook.hold`) or
"it no longer holds" (:meth:`EventBook.clear`); the book turns that into at most one open
event per rule key, with stable ids and a revision per change, and throttles updates so a
long event is a handful of messages, not one per metric point.

Slowdowns (:data:`~mldiag_schemas.monitoring.SLOWDOWN_RULES`) must also be material: their
condition is first a *pending* deviation, which opens an event only once it has lasted and
cost enough (the rule's ``MATERIALITY`` thresholds, scaled by the run's step), dated from
the deviation's start; a deviation that clears and stays clear for ``resolveSteps`` /
``resolveSeconds`` is over: pending, it leaves no event; open, its event resolves as of when
it cleared. A relapse sooner continues it (the clear spell is part of how long it lasted, but
not of the time it cost). So one slowdown is one event, however its windows fluctuate.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import JsonValue

from mldiag_event_detector.state import PROCESS_SLACK_SECONDS, Deviation, RunState
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import (
    EVENT_ID_NAMESPACE,
    EventState,
    EventType,
    Evidence,
    RunContext,
    Severity,
    WorkloadEvent,
    WorkloadEventOpened,
    WorkloadEventResolved,
    WorkloadEventUpdated,
    change_message_id,
)
from mldiag_schemas.ids import derived_id
from mldiag_schemas.monitoring import RULES, SLOWDOWN_RULES, MonitoringRules, RuleName

UPDATE_MIN_SECONDS = 5.0
UPDATE_MIN_GROWTH = 0.2
"""An open event is re-announced when its time lost grows by 20% (and 5 s) or its hosts or
severity change."""

RECENT_EVENT_SECONDS = 120.0
"""How long a resolved event still takes late evidence (a traceback racing the run's end)."""


def names_processes(context: RunContext) -> bool:
    """Whether a context names other processes on some host."""
    return any(host.contention and host.contention.top_processes for host in context.hosts)


class Policy:
    """The thresholds in force for one run: run override, else project override, else default."""

    def __init__(self, project: MonitoringRules, run: MonitoringRules) -> None:
        self._layers = (run, project)

    def enabled(self, rule: RuleName) -> bool:
        """Whether the rule runs for this run."""
        for layer in self._layers:
            override = layer.rules.get(rule)
            if override is not None and override.enabled is not None:
                return override.enabled
        return True

    def thresholds(self, rule: RuleName) -> dict[str, float]:
        """Every threshold of the rule, resolved."""
        resolved = {name: spec.default for name, spec in RULES[rule].thresholds.items()}
        for layer in reversed(self._layers):
            override = layer.rules.get(rule)
            if override is not None:
                resolved.update(
                    (name, value) for name, value in override.thresholds.items() if name in resolved
                )
        return resolved

    def scaled(self, rule: RuleName, steps: str, seconds: str, step_seconds: float) -> float:
        """max(``steps`` x the run's step, ``seconds``): a materiality threshold in seconds."""
        values = self.thresholds(rule)
        return max(values[steps] * step_seconds, values[seconds])


@dataclass
class Finding:
    """A rule's verdict that its condition holds now."""

    rule: RuleName
    key: str
    type: EventType
    severity: Severity
    display_name: str
    start_time: datetime
    hosts: list[str] = field(default_factory=list)
    evidence: Evidence = field(default_factory=Evidence)
    time_lost_seconds: float = 0.0


@dataclass
class EventBook:
    """A run's open events and the messages their changes produce."""

    state: RunState
    policy: Policy
    context: Callable[[datetime, WorkloadEvent], RunContext]
    """The run's signals now, around the given event."""
    messages: list[Envelope] = field(default_factory=list)

    def is_open(self, key: str) -> bool:
        """Whether an event is open under ``key``."""
        return key in self.state.open_events

    def since(self, key: str) -> datetime | None:
        """When the condition under ``key`` started: its deviation's start (a slowdown), else
        its open event's."""
        deviation = self.state.deviations.get(key)
        if deviation is not None:
            return deviation.start
        event = self.state.open_events.get(key)
        return event.start_time if event is not None else None

    def elapsed(self, key: str, now: datetime) -> float:
        """Seconds the condition under ``key`` has held (a slowdown's clear spells left out;
        time lost is computed from this)."""
        deviation = self.state.deviations.get(key)
        if deviation is not None:
            return deviation.held_seconds(now)
        start = self.since(key)
        return max((now - start).total_seconds(), 0.0) if start is not None else 0.0

    def hold(self, finding: Finding, now: datetime, *, news: bool = False) -> WorkloadEvent | None:
        """The condition holds: open the event, or update it when it changed enough.

        ``news`` marks a change worth announcing whatever the numbers say (a new cause).
        A slowdown opens only once material (see the module's docstring). Returns the event
        as it stands (None while pending, or when the run's end already closed it).
        """
        current = self.state.open_events.get(finding.key)
        if current is None and not self.state.active and finding.key in self.state.ended_keys:
            return None  # the run's end closed it; telemetry that lags behind is no news
        if finding.rule in SLOWDOWN_RULES:
            deviation = self._deviation(finding, current, now)
            if current is None:
                if not self._material(finding, deviation, now):
                    return None
                finding.start_time = deviation.start
        if current is None:
            return self._open(finding, now)
        grew = finding.time_lost_seconds - current.time_lost_seconds
        changed = (
            news
            or sorted(finding.hosts) != sorted(current.hosts)
            or finding.severity != current.severity
            or grew >= max(UPDATE_MIN_SECONDS, UPDATE_MIN_GROWTH * current.time_lost_seconds)
        )
        if not changed:
            return current
        event = current.model_copy(
            update={
                "display_name": finding.display_name,
                "severity": finding.severity,
                "hosts": sorted(set(finding.hosts)),
                "evidence": finding.evidence,
                "time_lost_seconds": max(current.time_lost_seconds, finding.time_lost_seconds),
                "update_time": now,
                "revision": current.revision + 1,
            }
        )
        self.state.open_events[finding.key] = event
        self.messages.append(WorkloadEventUpdated(event_id=change_message_id(event), event=event))
        return event

    def clear(
        self,
        key: str,
        now: datetime,
        time_lost_seconds: float | None = None,
        facts: dict[str, JsonValue] | None = None,
        *,
        settle: bool = True,
    ) -> WorkloadEvent | None:
        """The condition no longer holds: resolve the open event, if any.

        A slowdown's deviation is over once it has stayed clear for the rule's ``resolve``
        thresholds: a pending one is forgotten (it never was an event), an open one resolves
        as of when it cleared. ``settle=False`` ends it now (the run ended). Returns the
        resolved event.
        """
        current = self.state.open_events.get(key)
        end = now
        deviation = self.state.deviations.get(key)
        if deviation is not None:
            if deviation.cleared_at is None:
                deviation.cleared_at = now
            wait = self.policy.scaled(
                RuleName(deviation.rule), "resolveSteps", "resolveSeconds", self._step_seconds()
            )
            if settle and (now - deviation.cleared_at).total_seconds() < wait:
                return None
            end = deviation.cleared_at
            del self.state.deviations[key]
        if current is None:
            return None
        del self.state.open_events[key]
        evidence = current.evidence
        if facts:
            evidence = evidence.model_copy(update={"facts": {**evidence.facts, **facts}})
        event = current.model_copy(
            update={
                "state": EventState.RESOLVED,
                "end_time": max(end, current.start_time),
                "update_time": now,
                "evidence": evidence,
                "time_lost_seconds": max(current.time_lost_seconds, time_lost_seconds or 0.0),
                "revision": current.revision + 1,
            }
        )
        self.messages.append(WorkloadEventResolved(event_id=change_message_id(event), event=event))
        self._remember(event, now)
        return event

    def clear_all(self, now: datetime) -> None:
        """The run ended: nothing of it is still happening.

        Pending slowdowns stay: telemetry from before the end may still be on its way (the
        detector lagging behind the run's phase change) and complete them; it is judged as
        of the end at the latest, and what it opens is resolved at once.
        """
        for key in list(self.state.open_events):
            self.clear(key, now, facts={"resolvedBy": "run ended"}, settle=False)
            if key not in self.state.ended_keys:
                self.state.ended_keys.append(key)

    def recent(self, now: datetime) -> list[WorkloadEvent]:
        """The open events and those resolved in the last :data:`RECENT_EVENT_SECONDS`."""
        horizon = now - timedelta(seconds=RECENT_EVENT_SECONDS)
        return [
            *self.state.open_events.values(),
            *(event for event in self.state.recent_events if (event.end_time or now) >= horizon),
        ]

    def add_evidence(
        self, event: WorkloadEvent, now: datetime, context: RunContext | None = None
    ) -> WorkloadEvent:
        """New evidence about an open or recently resolved event: announce it again, with
        the run's signals now (``context``, when already taken), for the analyzer to look
        again."""
        updated = event.model_copy(update={"update_time": now, "revision": event.revision + 1})
        for key, known in list(self.state.open_events.items()):
            if known.event_id == event.event_id:
                self.state.open_events[key] = updated
        self.state.recent_events = [
            updated if known.event_id == event.event_id else known
            for known in self.state.recent_events
        ]
        self.messages.append(
            WorkloadEventUpdated(
                event_id=change_message_id(updated),
                event=updated,
                context=context or self.context(now, updated),
            )
        )
        return updated

    def renew_contention(self, now: datetime) -> None:
        """Re-announce each open slowdown whose context named no other process when its
        hosts' top processes have since been sampled: the cause the analyzer could not name
        at first ("other processes took the CPU") now has names."""
        for key, event in list(self.state.open_events.items()):
            deviation = self.state.deviations.get(key)
            if deviation is None or deviation.named_processes:
                continue
            since = deviation.start.timestamp() - PROCESS_SLACK_SECONDS
            if not any(
                host.contention.processes_since(since) for host in self.state.hosts.values()
            ):
                continue  # the usual case, and cheap: nothing sampled, no snapshot taken
            context = self.context(now, event)
            if names_processes(context):
                deviation.named_processes = True
                self.add_evidence(event, now, context)

    def _remember(self, event: WorkloadEvent, now: datetime) -> None:
        horizon = now - timedelta(seconds=RECENT_EVENT_SECONDS)
        self.state.recent_events = [
            known
            for known in self.state.recent_events
            if known.event_id != event.event_id and (known.end_time or now) >= horizon
        ][-7:]
        self.state.recent_events.append(event)

    def _step_seconds(self) -> float:
        return self.state.baseline_step_seconds() or 0.0

    def _deviation(
        self, finding: Finding, current: WorkloadEvent | None, now: datetime
    ) -> Deviation:
        """The slowdown's deviation, begun now (or with its open event), or resumed."""
        deviation = self.state.deviations.get(finding.key)
        if deviation is None:
            start = current.start_time if current is not None else min(finding.start_time, now)
            deviation = self.state.deviations[finding.key] = Deviation(
                rule=finding.rule.value, start=start
            )
        elif deviation.cleared_at is not None:
            # A relapse before it was over: the same deviation (the same event, if open).
            deviation.gap_seconds += max((now - deviation.cleared_at).total_seconds(), 0.0)
            deviation.cleared_at = None
        return deviation

    def _material(self, finding: Finding, deviation: Deviation, now: datetime) -> bool:
        """Whether a pending slowdown has lasted and cost enough to be an event."""
        step = self._step_seconds()
        # Lasting is wall time since it began (short clear spells are part of one slowdown);
        # the cost counts only the time it held, so a string of tiny blips costs too little.
        lasted = (now - deviation.start).total_seconds()
        return lasted >= self.policy.scaled(
            finding.rule, "minDurationSteps", "minDurationSeconds", step
        ) and finding.time_lost_seconds >= self.policy.scaled(
            finding.rule, "minLostSteps", "minLostSeconds", step
        )

    def instant(self, finding: Finding, now: datetime) -> WorkloadEvent:
        """An event that starts and ends at once (a termination)."""
        event = self._open(finding, now)
        return self.clear(finding.key, now) or event

    def _open(self, finding: Finding, now: datetime) -> WorkloadEvent:
        occurrence = self.state.occurrences.get(finding.key, 0) + 1
        self.state.occurrences[finding.key] = occurrence
        event = WorkloadEvent(
            # Same run, rule key and occurrence → same id: a replay after a crash dedupes.
            event_id=derived_id(
                EVENT_ID_NAMESPACE, self.state.run_id, finding.key, str(occurrence)
            ),
            run_id=self.state.run_id,
            type=finding.type,
            display_name=finding.display_name,
            severity=finding.severity,
            state=EventState.OPEN,
            start_time=min(finding.start_time, now),
            update_time=now,
            rule=finding.rule.value,
            thresholds=self.policy.thresholds(finding.rule),
            hosts=sorted(set(finding.hosts)),
            evidence=finding.evidence,
            time_lost_seconds=finding.time_lost_seconds,
        )
        context = self.context(now, event)  # before it joins the open events: "the others"
        deviation = self.state.deviations.get(finding.key)
        if deviation is not None:
            deviation.named_processes = names_processes(context)
        self.state.open_events[finding.key] = event
        self.messages.append(
            WorkloadEventOpened(event_id=change_message_id(event), event=event, context=context)
        )
        return event
