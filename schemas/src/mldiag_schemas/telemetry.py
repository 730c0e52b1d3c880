"""Metric points: the HTTP write contract and the bus message that carries them."""

import math
import uuid
from datetime import datetime
from typing import Literal, Self

from pydantic import Field, model_validator

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import RunId

MAX_POINTS_PER_REQUEST = 100_000
"""Default upper bound on points in one write request (ingestion can lower it)."""

MAX_POINTS_PER_MESSAGE = 5_000
"""Points per bus message; keeps a message well under NATS's 1 MB default payload limit."""

METRIC_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_./:-]{0,199}$"
"""Metric names: an identifier-like token, at most 200 characters."""


class MetricSeries(Contract):
    """Points of one metric on one host, as parallel (columnar) arrays."""

    name: str = Field(pattern=METRIC_NAME_PATTERN, description="Metric name, e.g. `loss`.")
    steps: list[int] = Field(description="Training step of each point (non-negative).")
    values: list[float] = Field(description="Value of each point; NaN and ±Inf are kept.")
    times: list[datetime] | None = Field(
        default=None, description="Time of each point; stamped on receipt when absent."
    )
    host: str = Field(
        default="", max_length=253, description="Host that recorded the points, if known."
    )

    @model_validator(mode="after")
    def _columns_align(self) -> Self:
        if len(self.values) != len(self.steps):
            raise ValueError("steps and values must have the same length")
        if self.times is not None and len(self.times) != len(self.steps):
            raise ValueError("times and steps must have the same length")
        if any(step < 0 for step in self.steps):
            raise ValueError("steps must be non-negative")
        return self


class WriteMetricsRequest(Contract):
    """Body of `POST .../machineLearningRuns/{run}/metrics:write`."""

    batch_id: uuid.UUID | None = Field(
        default=None,
        description="Client idempotency key: retrying a request with the same id stores once.",
    )
    series: list[MetricSeries] = Field(description="The points, grouped by metric and host.")

    def point_count(self) -> int:
        """How many points the request carries."""
        return sum(len(series.steps) for series in self.series)


class WriteMetricsResponse(Contract):
    """Answer of a metrics write, sent once JetStream has stored every point."""

    batch_id: uuid.UUID = Field(description="The batch id (the client's, or a new one).")
    accepted_points: int = Field(description="How many points were accepted.")


class MetricPoint(Contract):
    """One metric value at one step on one host."""

    name: str = Field(description="Metric name.")
    step: int = Field(description="Training step.")
    value: float = Field(description="The value; NaN and ±Inf are kept.")
    time: datetime = Field(description="When the value was recorded (UTC).")
    host: str = Field(default="", description="Host that recorded it.")

    @property
    def is_finite(self) -> bool:
        """Whether the value is a real number (not NaN, not ±Inf)."""
        return math.isfinite(self.value)


class MetricPointsReceived(Envelope):
    """A chunk of metric points for one run, accepted by ingestion.

    Subject: ``telemetry.metrics.received.<run id>``. ``event_id`` is derived from the
    request's batch id and the chunk index, so a retried request dedupes.
    """

    type: Literal["telemetry.metrics.received"] = "telemetry.metrics.received"
    run_id: RunId = Field(description="The run the points belong to.")
    batch_id: uuid.UUID = Field(description="The write request this chunk came from.")
    chunk: int = Field(ge=0, description="Index of this chunk within its batch.")
    points: list[MetricPoint] = Field(description="The points, in the order they were sent.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id


class SeriesPoint(Contract):
    """One stored point of a series."""

    step: int = Field(description="Training step.")
    value: float = Field(description="The value; NaN and ±Inf are kept.")
    time: datetime = Field(description="When it was recorded.")
    host: str = Field(description="Host that recorded it.")


class ReadMetricSeriesResponse(Contract):
    """A page of one metric's points, in step order."""

    metric: str = Field(description="Metric name.")
    points: list[SeriesPoint] = Field(description="Points on this page.")
    next_page_token: str = Field(default="", description="Token of the next page; empty at end.")


class MetricSummary(Contract):
    """What is stored for one metric of a run."""

    name: str = Field(description="Metric name.")
    point_count: int = Field(description="Points stored.")
    last_step: int = Field(description="Highest step recorded.")


class ListMetricsResponse(Contract):
    """The metrics a run has recorded, by name."""

    metrics: list[MetricSummary] = Field(description="One entry per metric name.")
