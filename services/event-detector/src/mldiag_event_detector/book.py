"""The event book: opens an event once, updates it while it lasts, resolves it once.

Rules only say "this condition holds now, with this evidence" (:meth:`EventBook.hold`) or
"it no longer holds" (:meth:`EventBook.clear`); the book turns that into at most one open
event per rule key, with stable ids and a revision per change, and throttles updates so a
long event is a handful of messages, not one per metric point.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import JsonValue

from mldiag_event_detector.state import RunState
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
from mldiag_schemas.monitoring import RULES, MonitoringRules, RuleName

UPDATE_MIN_SECONDS = 5.0
UPDATE_MIN_GROWTH = 0.2
"""An open event is re-announced when its time lost grows by 20% (and 5 s) or its hosts or
severity change."""


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
    context: Callable[[datetime], RunContext]
    messages: list[Envelope] = field(default_factory=list)

    def is_open(self, key: str) -> bool:
        """Whether an event is open under ``key``."""
        return key in self.state.open_events

    def hold(self, finding: Finding, now: datetime, *, news: bool = False) -> WorkloadEvent | None:
        """The condition holds: open the event, or update it when it changed enough.

        ``news`` marks a change worth announcing whatever the numbers say (a new cause).
        Returns the event as it stands (None when the run's end already closed it).
        """
        current = self.state.open_events.get(finding.key)
        if current is None:
            if not self.state.active and finding.key in self.state.ended_keys:
                return None  # the run's end closed it; telemetry that lags behind is no news
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
    ) -> WorkloadEvent | None:
        """The condition no longer holds: resolve the open event, if any."""
        current = self.state.open_events.pop(key, None)
        if current is None:
            return None
        evidence = current.evidence
        if facts:
            evidence = evidence.model_copy(update={"facts": {**evidence.facts, **facts}})
        event = current.model_copy(
            update={
                "state": EventState.RESOLVED,
                "end_time": max(now, current.start_time),
                "update_time": now,
                "evidence": evidence,
                "time_lost_seconds": max(current.time_lost_seconds, time_lost_seconds or 0.0),
                "revision": current.revision + 1,
            }
        )
        self.messages.append(WorkloadEventResolved(event_id=change_message_id(event), event=event))
        return event

    def clear_all(self, now: datetime) -> None:
        """The run ended: nothing of it is still happening."""
        for key in list(self.state.open_events):
            self.clear(key, now, facts={"resolvedBy": "run ended"})
            if key not in self.state.ended_keys:
                self.state.ended_keys.append(key)

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
        context = self.context(now)  # before it joins the open events: "the others"
        self.state.open_events[finding.key] = event
        self.messages.append(
            WorkloadEventOpened(event_id=change_message_id(event), event=event, context=context)
        )
        return event
