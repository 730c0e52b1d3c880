"""Retention: how long a project keeps its metric points, rollups and deleted runs, and
what purging a run deleted for good removed.

A policy is one resource per project (``projects/{p}/locations/{l}/retentionPolicy``; every
location of a project reads and writes the same one, because metric storage is partitioned
by project). A period of 0 days keeps that data forever.
"""

from datetime import datetime
from typing import Self

from pydantic import Field, model_validator

from mldiag_schemas.base import Contract

MAX_DAYS = 36_500
"""The longest period a policy accepts (a hundred years): longer is a typo, not a policy."""

DEFAULT_DELETED_RUNS_DAYS = 30
"""How long a deleted run keeps its data where nothing else was said."""


def _forever(days: int) -> float:
    return float("inf") if days == 0 else float(days)


class RetentionPolicy(Contract):
    """A project's retention (``GET|PATCH .../retentionPolicy``, PATCH with ``updateMask``).

    Applied by the registry's background sweeper: raw points go a whole storage week at a
    time (a point is kept between ``rawPointsDays`` and ``rawPointsDays`` + 7 days), never
    row by row.
    """

    name: str = Field(
        default="", description="`projects/{p}/locations/{l}/retentionPolicy` (output-only)."
    )
    raw_points_days: int = Field(
        default=0,
        ge=0,
        le=MAX_DAYS,
        description="Days raw metric points are kept after they were stored, rounded up to"
        " whole storage weeks; 0 keeps them forever. Charts keep answering from rollups.",
    )
    rollups_days: int = Field(
        default=0,
        ge=0,
        le=MAX_DAYS,
        description="Days after a run ended that its metric data (rollups, series, latest"
        " values) is kept; 0 keeps it forever. Never shorter than `rawPointsDays`.",
    )
    deleted_runs_days: int = Field(
        default=DEFAULT_DELETED_RUNS_DAYS,
        ge=0,
        le=MAX_DAYS,
        description="Days a deleted run (hidden from the API, its id taken) keeps its data"
        " before it is purged for good (its"
        " metrics, events, analyses, logs, profiles, heartbeats, operations and the run);"
        " 0 keeps deleted runs forever.",
    )
    update_time: datetime | None = Field(
        default=None, description="When the policy last changed; unset: never set (output-only)."
    )

    @model_validator(mode="after")
    def _rollups_outlive_points(self) -> Self:
        if _forever(self.rollups_days) < _forever(self.raw_points_days):
            raise ValueError(
                "rollupsDays must be 0 (forever) or at least rawPointsDays: rollups are what"
                " charts read once the raw points are gone"
            )
        return self


class UpdateRetentionPolicyRequest(Contract):
    """Body of ``PATCH .../retentionPolicy``: the fields ``updateMask`` names (without a
    mask, the fields sent). A masked field left out of the body goes back to its default.
    """

    name: str = Field(default="", description="Ignored (output-only).")
    raw_points_days: int | None = Field(
        default=None, ge=0, le=MAX_DAYS, description="See `RetentionPolicy.rawPointsDays`."
    )
    rollups_days: int | None = Field(
        default=None, ge=0, le=MAX_DAYS, description="See `RetentionPolicy.rollupsDays`."
    )
    deleted_runs_days: int | None = Field(
        default=None, ge=0, le=MAX_DAYS, description="See `RetentionPolicy.deletedRunsDays`."
    )
    update_time: datetime | None = Field(default=None, description="Ignored (output-only).")


class PurgedRun(Contract):
    """Answer of ``POST .../machineLearningRuns/{run}:purge``: what was removed for good.

    Counts are of what this call removed; a run purged before answers 404.
    """

    name: str = Field(description="The purged run's resource name.")
    metric_points: int = Field(
        default=0,
        description="Raw metric points removed (the run's rollups, series and ledger went"
        " with them; points of weeks already dropped by the policy are not counted).",
    )
    events: int = Field(default=0, description="Workload events removed.")
    analyses: int = Field(default=0, description="Analyzer reports removed.")
    log_chunks: int = Field(default=0, description="Stored log chunks removed.")
    profiler_sessions: int = Field(default=0, description="Profiler sessions removed.")
    profiler_targets: int = Field(default=0, description="Registered profiler servers removed.")
    objects: int = Field(default=0, description="Profile files removed from object storage.")
    heartbeats: int = Field(default=0, description="Heartbeat rows removed.")
    operations: int = Field(default=0, description="Operations about the run removed.")
