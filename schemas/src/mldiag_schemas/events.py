"""Workload events: what the event-detector saw go wrong in a run."""

import enum
import uuid
from datetime import datetime
from typing import Literal

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import RunId

EVENT_ID_NAMESPACE = uuid.UUID("5b7f6f3e-2a4f-4d55-9c55-1f0c1b7e0e01")
"""uuid5 namespace of workload event ids (the same signal always yields the same id)."""


class EventType(enum.StrEnum):
    """Kinds of workload event (the catalogue grows with the monitoring issue)."""

    NUMERICAL_INSTABILITY = "NUMERICAL_INSTABILITY"


class EventState(enum.StrEnum):
    """Lifecycle of a workload event."""

    OPEN = "OPEN"
    RESOLVED = "RESOLVED"


class Severity(enum.StrEnum):
    """How much an event hurts the workload."""

    INFO = "INFO"
    WARNING = "WARNING"
    CRITICAL = "CRITICAL"


class MetricEvidence(Contract):
    """The metric window that triggered an event."""

    metric: str = Field(description="The metric the rule watched.")
    host: str = Field(default="", description="Host the bad value came from.")
    first_bad_step: int = Field(description="First step with a bad value.")
    first_bad_value: float = Field(description="That value (NaN, Infinity or -Infinity).")
    last_good_step: int | None = Field(
        default=None, description="Last step with a finite value before it, if any."
    )
    last_good_value: float | None = Field(default=None, description="That finite value.")


class WorkloadEvent(Contract):
    """An event affecting a run (compatible with ML Diagnostics' monitored events)."""

    event_id: uuid.UUID = Field(description="Stable id: the same signal yields the same id.")
    run_id: RunId = Field(description="The run it affects.")
    type: EventType = Field(description="What kind of event.")
    display_name: str = Field(description="One line for people.")
    severity: Severity = Field(description="How much it hurts.")
    state: EventState = Field(description="Open until the signal recovers.")
    start_time: datetime = Field(description="When the signal was first seen.")
    end_time: datetime | None = Field(default=None, description="When it was resolved.")
    rule: str = Field(description="The detection rule that fired.")
    hosts: list[str] = Field(default_factory=list, description="Hosts affected.")
    evidence: MetricEvidence = Field(description="What triggered it.")


class WorkloadEventOpened(Envelope):
    """The detector opened an event. Subject: ``events.workload.opened.<run id>``."""

    type: Literal["events.workload.opened"] = "events.workload.opened"
    event: WorkloadEvent = Field(description="The event as opened.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.event.run_id


class ListEventsResponse(Contract):
    """A run's events, oldest first."""

    events: list[WorkloadEvent] = Field(description="The events.")
