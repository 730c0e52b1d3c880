"""Detection rules: pure functions from per-run state and new points to events.

The one rule for now: a NaN or ±Inf value of any metric opens a NUMERICAL_INSTABILITY event
for the run, once per (run, metric), carrying the last finite value seen before it.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

import structlog

from mldiag_platform.outbox import Flusher
from mldiag_schemas.events import (
    EVENT_ID_NAMESPACE,
    EventState,
    EventType,
    MetricEvidence,
    Severity,
    WorkloadEvent,
    WorkloadEventOpened,
)
from mldiag_schemas.ids import derived_id
from mldiag_schemas.telemetry import MetricPoint, MetricPointsReceived

log = structlog.get_logger(__name__)

RULE_NON_FINITE = "non-finite-value"

SeriesKey = tuple[str, str]
"""(run id, metric name)."""


@dataclass(frozen=True)
class WatchState:
    """What the detector remembers about one metric of one run."""

    last_good_step: int | None = None
    last_good_value: float | None = None
    open_event_id: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What applying a batch changes: new states and the events to announce."""

    states: dict[SeriesKey, WatchState]
    opened: list[WorkloadEventOpened]


def keys_of(messages: Sequence[MetricPointsReceived]) -> set[SeriesKey]:
    """The series a batch touches."""
    return {(message.run_id, columns.name) for message in messages for columns in message.series}


def apply_non_finite_rule(
    states: dict[SeriesKey, WatchState], messages: Sequence[MetricPointsReceived]
) -> Outcome:
    """Fold ``messages`` into ``states``; open an event at the first non-finite value."""
    states = dict(states)
    opened: list[WorkloadEventOpened] = []
    for message in messages:
        if all(all(map(math.isfinite, columns.values)) for columns in message.series):
            # The common case: only the highest step of each metric can move "last good".
            for columns in message.series:
                if not columns.steps:
                    continue
                top = max(columns.steps)
                at = len(columns.steps) - 1 - columns.steps[::-1].index(top)
                key = (message.run_id, columns.name)
                state = states.get(key, WatchState())
                if state.last_good_step is None or top >= state.last_good_step:
                    state = replace(state, last_good_step=top, last_good_value=columns.values[at])
                states[key] = state
            continue
        # Within a message, take points in step order so "last good" means "before it".
        for point in sorted(message.iter_points(), key=lambda point: point.step):
            key = (message.run_id, point.name)
            state = states.get(key, WatchState())
            if math.isfinite(point.value):
                if state.last_good_step is None or point.step >= state.last_good_step:
                    state = replace(state, last_good_step=point.step, last_good_value=point.value)
            elif state.open_event_id is None:
                event = _open_event(message.run_id, point, state, message.occurred_at)
                opened.append(WorkloadEventOpened(occurred_at=event.start_time, event=event))
                state = replace(state, open_event_id=str(event.event_id))
            states[key] = state
    return Outcome(states=states, opened=opened)


def _open_event(
    run_id: str, point: MetricPoint, state: WatchState, received_at: datetime
) -> WorkloadEvent:
    kind = "NaN" if math.isnan(point.value) else ("+Inf" if point.value > 0 else "-Inf")
    where = f" on host {point.host}" if point.host else ""
    return WorkloadEvent(
        # Same run, metric and step → same id, so replays and redeliveries dedupe.
        event_id=derived_id(
            EVENT_ID_NAMESPACE, run_id, EventType.NUMERICAL_INSTABILITY, point.name, str(point.step)
        ),
        run_id=run_id,
        type=EventType.NUMERICAL_INSTABILITY,
        display_name=f"{point.name} became {kind} at step {point.step}{where}",
        severity=Severity.CRITICAL,
        state=EventState.OPEN,
        start_time=min(point.time, received_at),
        rule=RULE_NON_FINITE,
        hosts=[point.host] if point.host else [],
        evidence=MetricEvidence(
            metric=point.name,
            host=point.host,
            first_bad_step=point.step,
            first_bad_value=point.value,
            last_good_step=state.last_good_step,
            last_good_value=state.last_good_value,
        ),
    )


Rule = Callable[[dict[SeriesKey, WatchState], Sequence[MetricPointsReceived]], Outcome]


class StateStore(Protocol):
    """Applies a rule to new messages atomically with the state it reads and writes."""

    async def apply(self, messages: Sequence[MetricPointsReceived], rule: Rule) -> Outcome:
        """Apply ``rule`` to the messages not applied before; stage the events it opens."""
        ...


class DetectorService:
    """Runs the rules over metric messages and announces the events they open."""

    def __init__(self, store: StateStore, outbox: Flusher) -> None:
        self._store = store
        self._outbox = outbox

    async def on_metrics(self, messages: Sequence[MetricPointsReceived]) -> list[WorkloadEvent]:
        """Apply the rules; return the events opened (already committed and published)."""
        outcome = await self._store.apply(messages, apply_non_finite_rule)
        if outcome.opened:
            await self._outbox.flush()
        for opened in outcome.opened:
            log.info(
                "event.opened",
                run_id=opened.event.run_id,
                event_type=opened.event.type,
                event_id=str(opened.event.event_id),
                metric=opened.event.evidence.metric,
                step=opened.event.evidence.first_bad_step,
            )
        return [opened.event for opened in outcome.opened]
