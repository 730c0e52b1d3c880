"""The detector's domain logic: fold a run's messages into its state and run the rules.

:func:`fold` and :func:`fold_clock` are pure (state in, messages out); the service wraps them
in the store's transaction, so a state change and the events it opens commit together and a
redelivered message (already in the ledger) changes nothing.
"""

import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import structlog

from mldiag_event_detector.book import EventBook, Policy
from mldiag_event_detector.context import snapshot
from mldiag_event_detector.excerpts import observe_logs
from mldiag_event_detector.observe import observe_heartbeat, observe_metrics
from mldiag_event_detector.rules import framework, liveness, performance, resources
from mldiag_event_detector.state import RunState
from mldiag_platform.outbox import Flusher
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import WorkloadEventOpened, WorkloadEventResolved
from mldiag_schemas.logs import LogLinesReceived
from mldiag_schemas.monitoring import MonitoringRules, MonitoringRulesChanged
from mldiag_schemas.runs import (
    RunConfigsReported,
    RunCreated,
    RunDeleted,
    RunPhaseChanged,
    RunUpdated,
)
from mldiag_schemas.telemetry import MetricPointsReceived, RunHeartbeat, WorkloadSignalReported

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Folded:
    """What applying messages (or the clock) to a run produced."""

    messages: list[Envelope]
    next_check_at: datetime | None


def _book(state: RunState, project: MonitoringRules) -> EventBook:
    return EventBook(
        state, Policy(project, state.rules), lambda now, event: snapshot(state, now, event)
    )


def _level_rules(book: EventBook, now: datetime, touched: set[str]) -> None:
    performance.duty_cycle_drop(book, now)
    performance.step_time_regression(book, now)
    performance.straggler(book, now, touched)
    resources.memory_pressure(book, now)
    framework.recompilation(book, now)
    framework.input_stall(book, now)


_JOB_COLLECTIONS = ("/customJobs/", "/hyperparameterTuningJobs/")
"""Runs whose workload is one of these training jobs are ended by the job: a cancel is no
TERMINATION (a tuning job's run, the study's, has no replicas of its own)."""


def _run_fact(state: RunState, message: RunCreated | RunUpdated, now: datetime) -> None:
    run = message.run
    parts = run.name.split("/")
    if len(parts) >= 4:
        state.project, state.location = parts[1], parts[3]
    state.rules = run.monitoring
    custom = run.workload_details.custom
    if custom is not None and any(kind in custom.id for kind in _JOB_COLLECTIONS):
        state.job = custom.id  # run-registry names the job here (and nothing else does)
    if isinstance(message, RunUpdated) and "configs" in message.update_mask:
        at = f" at step {_last_step(state)}" if _last_step(state) is not None else ""
        state.config_changes.append(f"{now.isoformat()} configs updated{at}")
        del state.config_changes[:-20]


def _last_step(state: RunState) -> int | None:
    steps = [host.last_step for host in state.hosts.values() if host.last_step is not None]
    return max(steps) if steps else None


def fold(state: RunState, project: MonitoringRules, messages: Sequence[Envelope]) -> Folded:
    """Apply a run's new messages, in order, then the level rules once."""
    book = _book(state, project)
    touched: set[str] = set()
    latest: datetime | None = None
    for message in messages:
        now = message.occurred_at
        match message:
            case MetricPointsReceived():
                touched |= observe_metrics(book, message)
                latest = max(latest or now, now)
            case RunHeartbeat():
                observe_heartbeat(book, message)
            case LogLinesReceived():
                observe_logs(book, message)
            case WorkloadSignalReported():
                liveness.on_signal(book, message.signal, now)
            case RunCreated() | RunUpdated():
                _run_fact(state, message, now)
            case RunPhaseChanged():
                liveness.on_phase(book, message.run.run_phase.value, message.run.error_details, now)
            case RunDeleted():
                state.phase = "DELETED"
                book.clear_all(now)
            case RunConfigsReported():
                sections = [name for name, value in message.configs if value]
                if sections and _last_step(state) is not None:
                    state.config_changes.append(
                        f"{now.isoformat()} {', '.join(sections)} reported at step"
                        f" {_last_step(state)}"
                    )
                    del state.config_changes[:-20]
    if touched and latest is not None and state.phase != "DELETED":
        _judge(book, latest, touched)
    return Folded(book.messages, liveness.next_check(book))


def _judge(book: EventBook, latest: datetime, touched: set[str]) -> None:
    """The level rules, once per applied batch, as of its latest message."""
    state = book.state
    # Telemetry that arrives after the run ended (its last flush races the phase change,
    # or the detector lags behind the run's messages) still describes the run: judge it as
    # of the end at the latest, then close what it opened at the end.
    if not state.active and state.ended_at is not None:
        latest = min(latest, state.ended_at)
    _level_rules(book, latest, touched)
    book.renew_contention(latest)
    if not state.active:
        book.clear_all(state.ended_at or latest)


def fold_clock(state: RunState, project: MonitoringRules, now: datetime) -> Folded:
    """Time passed without messages: the hang rule looks again."""
    book = _book(state, project)
    liveness.check_hang(book, now)
    return Folded(book.messages, liveness.next_check(book))


def ledger_id(message: Envelope) -> uuid.UUID:
    """The idempotency key of a message.

    Metric chunks are keyed by (batch, chunk) rather than the envelope id, so a producer
    republishing the same write under a new id is still applied once: a step time seen twice
    would otherwise read as a restart.
    """
    if isinstance(message, MetricPointsReceived):
        return uuid.uuid5(message.batch_id, str(message.chunk))
    return message.event_id


Fold = Callable[[RunState, MonitoringRules, Sequence[Envelope]], Folded]
ClockFold = Callable[[RunState, MonitoringRules, datetime], Folded]


class StateStore(Protocol):
    """Applies folds to run states atomically with the ledger and the outbox."""

    async def apply(
        self, messages: dict[str, list[tuple[uuid.UUID, Envelope]]], fold: Fold
    ) -> list[Envelope]:
        """Fold each run's messages not applied before; stage what they produce."""
        ...

    async def apply_clock(self, now: datetime, fold: ClockFold, limit: int) -> list[Envelope]:
        """Fold the clock into runs whose next check is due; stage what it produces."""
        ...

    async def save_project_rules(self, change: MonitoringRulesChanged) -> None:
        """Keep a project's rule overrides."""
        ...


class DetectorService:
    """Runs the rules over a run's messages and the clock; announces what changes."""

    def __init__(self, store: StateStore, outbox: Flusher, clock_batch: int = 100) -> None:
        self._store = store
        self._outbox = outbox
        self._clock_batch = clock_batch

    async def on_messages(self, messages: Sequence[Envelope]) -> list[Envelope]:
        """Apply messages about runs; return the event changes (committed and published)."""
        by_run: dict[str, list[tuple[uuid.UUID, Envelope]]] = defaultdict(list)
        for message in messages:
            if isinstance(message, MonitoringRulesChanged):
                await self._store.save_project_rules(message)
                continue
            by_run[message.partition()].append((ledger_id(message), message))
        if not by_run:
            return []
        return await self._announce(await self._store.apply(by_run, fold))

    async def on_clock(self, now: datetime) -> list[Envelope]:
        """Let time pass for runs waiting on it (hangs)."""
        return await self._announce(
            await self._store.apply_clock(now, fold_clock, self._clock_batch)
        )

    async def _announce(self, changes: list[Envelope]) -> list[Envelope]:
        if changes:
            await self._outbox.flush()
        for change in changes:
            event = change.event  # type: ignore[attr-defined]  # every change carries one
            log.info(
                "event.opened"
                if isinstance(change, WorkloadEventOpened)
                else "event.resolved"
                if isinstance(change, WorkloadEventResolved)
                else "event.updated",
                run_id=event.run_id,
                event_type=event.type,
                event_id=str(event.event_id),
                revision=event.revision,
                hosts=event.hosts,
            )
        return changes
