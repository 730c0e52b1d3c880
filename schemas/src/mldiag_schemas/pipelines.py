"""Training pipelines: the Vertex AI v1 ``TrainingPipeline`` resource, as the training service
serves it. A pipeline runs one custom job (or one hyperparameter tuning job) and, when it
succeeds and ``modelToUpload`` is set, imports the files the job wrote to ``AIP_MODEL_DIR``
as a new model version.

Encodings follow :mod:`mldiag_schemas.jobs` (proto3 JSON, camelCase, enums as names or
numbers). ``trainingTaskInputs`` is a free ``google.protobuf.Struct``: it is stored and served
back as sent; the service reads the job it describes from it (leniently: the SDK mixes
snake_case and camelCase in it and sends every number as a double).
"""

import enum
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.jobs import LabelKey, LabelValue, RpcStatus, enum_from_number
from mldiag_schemas.models import Model

CUSTOM_TASK_DEFINITION = (
    "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml"
)
"""``trainingTaskDefinition`` of a pipeline that runs a custom job (what the SDK sends)."""
TUNING_TASK_DEFINITION = (
    "gs://google-cloud-aiplatform/schema/trainingjob/definition/"
    "hyperparameter_tuning_task_1.0.0.yaml"
)
"""``trainingTaskDefinition`` of a pipeline that runs a hyperparameter tuning job."""
TASK_DEFINITIONS = (CUSTOM_TASK_DEFINITION, TUNING_TASK_DEFINITION)
"""The task definitions mldiag runs."""

BACKING_CUSTOM_JOB = "backingCustomJob"
"""``trainingTaskMetadata`` key naming a custom task's job (the Vertex SDK reads it)."""
BACKING_TUNING_JOB = "backingHyperparameterTuningJob"
"""``trainingTaskMetadata`` key naming a tuning task's job."""


class PipelineState(enum.StrEnum):
    """Vertex's ``PipelineState``."""

    UNSPECIFIED = "PIPELINE_STATE_UNSPECIFIED"
    QUEUED = "PIPELINE_STATE_QUEUED"
    """Stored; its job created, not placed yet."""
    PENDING = "PIPELINE_STATE_PENDING"
    """Its job is placed, not running yet."""
    RUNNING = "PIPELINE_STATE_RUNNING"
    """Its job runs (or the model is being imported)."""
    SUCCEEDED = "PIPELINE_STATE_SUCCEEDED"
    FAILED = "PIPELINE_STATE_FAILED"
    CANCELLING = "PIPELINE_STATE_CANCELLING"
    CANCELLED = "PIPELINE_STATE_CANCELLED"
    PAUSED = "PIPELINE_STATE_PAUSED"

    @property
    def terminal(self) -> bool:
        """Whether the pipeline has ended: a terminal state never changes again."""
        return self in TERMINAL_PIPELINE_STATES


TERMINAL_PIPELINE_STATES = frozenset(
    {PipelineState.SUCCEEDED, PipelineState.FAILED, PipelineState.CANCELLED}
)
"""States a pipeline never leaves."""

PIPELINE_STATE_NUMBERS: dict[str, int] = {
    state.value: number for number, state in enumerate(PipelineState)
}
"""``PipelineState``'s proto numbers, by name (UNSPECIFIED 0 … PAUSED 8)."""

UNSUPPORTED_PIPELINE_FIELDS: dict[str, str] = {
    "inputDataConfig": "managed datasets (read your data from storage in the job)",
    "encryptionSpec": "customer-managed encryption keys",
}
"""TrainingPipeline fields mldiag refuses by name (UNIMPLEMENTED)."""


class TrainingPipeline(Contract):
    """A training pipeline, as created (``displayName``, ``trainingTaskDefinition``,
    ``trainingTaskInputs``, ``modelToUpload``, ``modelId``, ``parentModel``, ``labels``) and as
    served (the output-only fields)."""

    name: str = Field(
        default="", description="Output: ``projects/{p}/locations/{l}/trainingPipelines/{id}``."
    )
    display_name: str = Field(min_length=1, max_length=128, description="A name for people.")
    training_task_definition: str = Field(
        max_length=1000,
        description="The task's schema URI: the custom task or the tuning task (see "
        "CUSTOM_TASK_DEFINITION, TUNING_TASK_DEFINITION).",
    )
    training_task_inputs: dict[str, Any] = Field(
        description="The task (a Struct): a CustomJobSpec, or a tuning job's studySpec, trial "
        "counts and trialJobSpec; snake_case or camelCase, numbers as doubles."
    )
    training_task_metadata: dict[str, Any] | None = Field(
        default=None,
        description="Output: ``backingCustomJob`` (or ``backingHyperparameterTuningJob``): the "
        "job the pipeline runs.",
    )
    model_to_upload: Model | None = Field(
        default=None,
        description="The model to import from AIP_MODEL_DIR when the job succeeds; its "
        "``name`` and ``versionId`` are filled in then.",
    )
    model_id: str = Field(
        default="", max_length=63, description="The id of a new model (or of the one to add to)."
    )
    parent_model: str = Field(
        default="", max_length=1000, description="Import as a new version of this model."
    )
    state: Annotated[PipelineState, enum_from_number(PipelineState, PIPELINE_STATE_NUMBERS)] = (
        Field(default=PipelineState.UNSPECIFIED, description="Output: where the pipeline is.")
    )
    error: RpcStatus | None = Field(default=None, description="Output: when FAILED/CANCELLED.")
    create_time: datetime | None = Field(default=None, description="Output: created.")
    start_time: datetime | None = Field(default=None, description="Output: first RUNNING.")
    end_time: datetime | None = Field(default=None, description="Output: reached its end.")
    update_time: datetime | None = Field(default=None, description="Output: last change.")
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=64, description="Labels (Vertex's rules)."
    )


class ListTrainingPipelinesResponse(Contract):
    """A page of ``GET .../trainingPipelines``."""

    training_pipelines: list[TrainingPipeline] = Field(
        default_factory=list, description="The page."
    )
    next_page_token: str = Field(default="", description="Pass as pageToken for the next page.")
