"""Goodput: how much of a run's wall time was productive training, and where the rest went.

``GET .../machineLearningRuns/{run}:goodput`` answers a :class:`GoodputResponse`. Productive
time and the buckets of lost time (badput) partition the wall time: they add up to it, and
none is negative. docs/events.md gives the exact formula.
"""

import enum
from datetime import datetime

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.events import EventType


class BadputKind(enum.StrEnum):
    """Where lost time went."""

    STARTUP = "STARTUP"
    """From the run's creation to its first step, plus compilation during the steps."""
    DATA_LOADING = "DATA_LOADING"
    """Steps waiting for input (the sum of ``data_wait_time``)."""
    CHECKPOINTING = "CHECKPOINTING"
    """Training blocked by checkpoint saves (the sum of ``checkpoint_time``)."""
    DISRUPTIONS = "DISRUPTIONS"
    """Time lost to hangs, orchestrator interruptions and terminations."""
    EVENTS = "EVENTS"
    """Time lost to the other workload events (degradation, stragglers, stalls, ...)."""
    UNACCOUNTED = "UNACCOUNTED"
    """Time outside steps that no signal explains (the remainder)."""


DISRUPTION_TYPES: frozenset[EventType] = frozenset(
    {EventType.HANG, EventType.ORCHESTRATOR_INTERRUPTION, EventType.TERMINATION}
)
"""Event types whose time lost counts as :attr:`BadputKind.DISRUPTIONS`."""


class BadputBucket(Contract):
    """One kind of lost time."""

    kind: BadputKind = Field(description="What the time was lost to.")
    seconds: float = Field(ge=0, description="Seconds counted in this bucket.")
    fraction: float = Field(ge=0, le=1, description="Share of the wall time.")
    signal_seconds: float = Field(
        ge=0,
        description="Seconds the signals claimed before capping to the wall time (equal to"
        " `seconds` unless signals overlap or clocks disagree).",
    )


class EventContribution(Contract):
    """What one workload event cost."""

    event: str = Field(description="The event's resource name.")
    type: EventType = Field(description="The event's type.")
    display_name: str = Field(default="", description="The event's one line for people.")
    bucket: BadputKind = Field(description="DISRUPTIONS or EVENTS.")
    seconds: float = Field(ge=0, description="Seconds counted (after capping).")
    time_lost_seconds: float = Field(
        ge=0,
        description="The event's own time lost (the larger of the detector's and the analysis's).",
    )


class GoodputResponse(Contract):
    """A run's goodput: productive time against wall time, and the buckets of lost time."""

    run: str = Field(description="The run's resource name.")
    start_time: datetime = Field(description="The run's createTime.")
    end_time: datetime = Field(description="The run's endTime, or now while it is active.")
    wall_seconds: float = Field(ge=0, description="endTime (or now) - createTime.")
    productive_seconds: float = Field(
        ge=0, description="Step time spent computing (no input wait, compilation or loss)."
    )
    goodput: float = Field(ge=0, le=1, description="productiveSeconds / wallSeconds (0 if 0).")
    step_seconds: float = Field(ge=0, description="Sum of step_time of the reference process.")
    steps: int = Field(ge=0, description="Step time points of the reference process.")
    first_step_start_time: datetime | None = Field(
        default=None, description="When the first step began (its point's time - its step time)."
    )
    reference: str = Field(
        default="",
        description="Whose series were read: `process 0`, `median of N processes`, or empty"
        " without steps.",
    )
    buckets: list[BadputBucket] = Field(description="Lost time, one bucket per kind.")
    events: list[EventContribution] = Field(
        default_factory=list, description="The run's events with time lost, oldest first."
    )
