"""The run resource (minimal for now) and the facts published about runs."""

import enum
from datetime import datetime
from typing import Literal

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import RunId


class RunState(enum.StrEnum):
    """Output-only state of a run (Google ML Diagnostics' names)."""

    ACTIVE = "STATE_ACTIVE"
    COMPLETED = "STATE_COMPLETED"
    FAILED = "STATE_FAILED"


class CreateRunRequest(Contract):
    """Body of `POST .../machineLearningRuns`."""

    run_id: RunId | None = Field(
        default=None, description="Id to give the run; a random UUID when absent."
    )
    display_name: str = Field(min_length=1, max_length=200, description="Human-readable name.")
    run_set: str = Field(
        default="default", min_length=1, max_length=200, description="Group of related runs."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Free-form labels.")


class Run(Contract):
    """A machine-learning run."""

    name: str = Field(
        description="Resource name: projects/{p}/locations/{l}/machineLearningRuns/{r}."
    )
    run_id: RunId = Field(description="The last segment of the name.")
    display_name: str = Field(description="Human-readable name.")
    run_set: str = Field(description="Group of related runs.")
    labels: dict[str, str] = Field(description="Free-form labels.")
    state: RunState = Field(description="Output-only state.")
    create_time: datetime = Field(description="When the run was created.")
    update_time: datetime = Field(description="When the run last changed.")


class ListRunsResponse(Contract):
    """A page of runs, newest first."""

    machine_learning_runs: list[Run] = Field(description="The runs on this page.")
    next_page_token: str = Field(default="", description="Token of the next page; empty at end.")


class RunCreated(Envelope):
    """A run was created. Subject: ``runs.run.created.<run id>``."""

    type: Literal["runs.run.created"] = "runs.run.created"
    run: Run = Field(description="The run as created.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run.run_id
