"""A simulated run for the detector's unit tests: messages built on a fake clock, folded
through the real rules (``fold`` / ``fold_clock``), with the events they open collected."""

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from mldiag_event_detector.service import fold, fold_clock
from mldiag_event_detector.state import RunState
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import (
    EventState,
    EventType,
    WorkloadEvent,
    WorkloadEventOpened,
)
from mldiag_schemas.logs import LogLine, LogLinesReceived
from mldiag_schemas.monitoring import (
    MATERIALITY,
    SLOWDOWN_RULES,
    MonitoringRules,
    RuleName,
    RuleOverride,
)
from mldiag_schemas.telemetry import (
    MetricColumns,
    MetricPointsReceived,
    RunHeartbeat,
    SignalRequest,
    WorkloadSignalReported,
    to_unix_micros,
)

START = datetime(2026, 1, 1, tzinfo=UTC)


def immediate(overrides: Mapping[RuleName, Mapping[str, float]] | None = None) -> MonitoringRules:
    """Rules under which a slowdown opens as soon as its condition holds and resolves as soon
    as it clears: for tests of a rule's condition rather than of materiality."""
    overrides = overrides or {}
    return MonitoringRules(
        rules={
            rule: RuleOverride(
                thresholds={**dict.fromkeys(MATERIALITY, 0.0), **overrides.get(rule, {})}
            )
            for rule in SLOWDOWN_RULES
        }
    )


@dataclass
class Feed:
    """One run, fed message by message."""

    run_id: str = "run-1"
    project_rules: MonitoringRules = field(default_factory=MonitoringRules)
    now: datetime = START
    state: RunState = field(init=False)
    changes: list[Envelope] = field(default_factory=list)
    next_check_at: datetime | None = None

    def __post_init__(self) -> None:
        self.state = RunState(run_id=self.run_id)

    def advance(self, seconds: float) -> None:
        """Let time pass."""
        self.now += timedelta(seconds=seconds)

    def send(self, *messages: Envelope) -> list[Envelope]:
        """Fold messages as the detector would, through a JSON round trip of the state."""
        self.state = RunState.model_validate_json(self.state.model_dump_json())
        folded = fold(self.state, self.project_rules, messages)
        self.changes += folded.messages
        self.next_check_at = folded.next_check_at
        return folded.messages

    def clock(self) -> list[Envelope]:
        """The detector's clock ticks now."""
        folded = fold_clock(self.state, self.project_rules, self.now)
        self.changes += folded.messages
        self.next_check_at = folded.next_check_at
        return folded.messages

    def metrics(
        self, host: str, step: int, values: Mapping[str, float | Sequence[float]]
    ) -> MetricPointsReceived:
        """One message of ``metric → value`` at ``step`` (a sequence: one series per device)."""
        series: list[MetricColumns] = []
        for name, value in values.items():
            devices = value if isinstance(value, Sequence) else [value]
            for device, reading in enumerate(devices):
                series.append(
                    MetricColumns(
                        name=name,
                        host=host,
                        labels={"device": str(device)} if isinstance(value, Sequence) else {},
                        steps=[step],
                        values=[reading],
                        times_unix_us=[to_unix_micros(self.now)],
                    )
                )
        return MetricPointsReceived(
            run_id=self.run_id,
            batch_id=uuid.uuid4(),
            chunk=0,
            occurred_at=self.now,
            series=series,
        )

    def step(self, step: int, **per_host: Mapping[str, float | Sequence[float]]) -> None:
        """Every named host records ``values`` at ``step`` now."""
        self.send(*(self.metrics(host, step, values) for host, values in per_host.items()))

    def logs(self, *lines: LogLine, batch_id: uuid.UUID | None = None) -> LogLinesReceived:
        """A batch of log lines received now."""
        return LogLinesReceived(
            run_id=self.run_id,
            lines=list(lines),
            occurred_at=self.now,
            **({"event_id": batch_id} if batch_id else {}),
        )

    def heartbeat(
        self, host: str, *, pid: int = 100, step: int | None = None, **fingerprint: str
    ) -> RunHeartbeat:
        """A heartbeat from process 0 of ``host``."""
        return RunHeartbeat(
            run_id=self.run_id,
            host=host,
            pid=pid,
            step=step,
            interval_seconds=10.0,
            received_at=self.now,
            occurred_at=self.now,
            fingerprint=fingerprint,
        )

    def signal(self, request: SignalRequest) -> WorkloadSignalReported:
        """A lifecycle signal reported now."""
        return WorkloadSignalReported(
            run_id=self.run_id, signal=request, received_at=self.now, occurred_at=self.now
        )

    def opened(self, event_type: EventType | None = None) -> list[WorkloadEvent]:
        """Events opened so far (of one type)."""
        return [
            change.event
            for change in self.changes
            if isinstance(change, WorkloadEventOpened)
            and (event_type is None or change.event.type is event_type)
        ]

    def latest(self, event: WorkloadEvent) -> WorkloadEvent:
        """The last revision announced of an event."""
        revisions = [
            change.event  # type: ignore[attr-defined]
            for change in self.changes
            if change.event.event_id == event.event_id  # type: ignore[attr-defined]
        ]
        return max(revisions, key=lambda revision: revision.revision)

    def is_resolved(self, event: WorkloadEvent) -> bool:
        """Whether the event's last revision is RESOLVED."""
        return self.latest(event).state is EventState.RESOLVED
