"""Analyses: the analyzer's reports on a workload event."""

import enum
import uuid
from datetime import datetime
from typing import Literal

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import RunId

ANALYSIS_ID_NAMESPACE = uuid.UUID("0d7d2f0a-8a8e-4c36-9a0e-7d1f6b1c5a02")
"""uuid5 namespace of analysis ids (one analysis per event and analyzer version)."""


class Layer(enum.StrEnum):
    """The layer of the stack a cause lives in."""

    INFRASTRUCTURE = "INFRASTRUCTURE"
    ORCHESTRATOR = "ORCHESTRATOR"
    FRAMEWORK = "FRAMEWORK"
    MODEL = "MODEL"


class DetectionState(enum.StrEnum):
    """Whether an analyzer found its cause."""

    DETECTED = "DETECTED"
    NOT_DETECTED = "NOT_DETECTED"


class RecommendedAction(Contract):
    """Something a person can do about a cause."""

    description: str = Field(description="What to do.")
    documentation_url: str = Field(default="", description="Runbook with the details.")


class AnalyzerReport(Contract):
    """One analyzer's verdict on an event."""

    analyzer: str = Field(description="Analyzer name, e.g. `numerical-instability`.")
    layer: Layer = Field(description="Layer the cause belongs to.")
    detection_state: DetectionState = Field(description="Found or not.")
    details: str = Field(description="What it found, in plain words.")
    hosts: list[str] = Field(default_factory=list, description="Hosts concerned.")
    evidence: list[str] = Field(
        default_factory=list, description="The observations the verdict rests on, in words."
    )
    score: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="How probable this cause is (DETECTED reports are ranked by it).",
    )
    recommended_actions: list[RecommendedAction] = Field(
        default_factory=list, description="What to do about it."
    )


class Analysis(Contract):
    """All reports on one event."""

    analysis_id: uuid.UUID = Field(description="Stable id derived from the event.")
    event_id: uuid.UUID = Field(description="The event analysed.")
    run_id: RunId = Field(description="The run it affects.")
    analyzer_insight_found: bool = Field(description="Whether any report is DETECTED.")
    reports: list[AnalyzerReport] = Field(description="The reports, most probable cause first.")
    probable_cause: str = Field(
        default="", description="The top-ranked DETECTED report's analyzer; empty if none."
    )
    time_lost_seconds: float = Field(
        default=0.0, ge=0, description="The event's time lost (badput) as the analysis counts it."
    )
    capture_requested: bool = Field(
        default=False, description="Whether a profile capture was requested for the event."
    )
    create_time: datetime = Field(description="When the analysis finished.")


class AnalysisCompleted(Envelope):
    """The analyzer finished an analysis. Subject: ``analyses.analysis.completed.<run id>``."""

    type: Literal["analyses.analysis.completed"] = "analyses.analysis.completed"
    analysis: Analysis = Field(description="The analysis.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.analysis.run_id


class ListAnalysesResponse(Contract):
    """A run's analyses, oldest first."""

    analyses: list[Analysis] = Field(description="The analyses.")
