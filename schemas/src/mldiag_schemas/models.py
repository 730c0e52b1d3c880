"""The model registry: the Vertex AI v1 ``Model`` resource (metadata only; the files stay in
object storage at ``artifactUri``), its upload request and answers, and its versions.

Encodings follow :mod:`mldiag_schemas.jobs` (proto3 JSON, camelCase on the wire, snake_case
accepted, enums as names or numbers). A model has versions ``"1"``, ``"2"``, ... (never
reused); ``default`` names one of them and user aliases name at most one each.

Vertex fields mldiag knows but does not provide (explanations, encryption keys, deployed
endpoints, predict schemata, ...) are listed in :data:`UNSUPPORTED_MODEL_FIELDS` and
:data:`UNSUPPORTED_CONTAINER_FIELDS` so the service refuses them by name.

``lineage`` is an mldiag extension of the served Model (the pipeline, jobs and run that
produced a version): the SDK's REST transport parses answers with ``ignore_unknown_fields``,
so it passes through unchanged.
"""

import enum
from datetime import datetime
from typing import Annotated

from pydantic import Field, JsonValue

from mldiag_schemas.base import Contract
from mldiag_schemas.jobs import EnvVar, LabelKey, LabelValue, Text, enum_from_number

MAX_ALIASES = 100
"""The most aliases one request may merge (and one version may carry)."""
ALIAS_PATTERN = r"^[a-z][a-z0-9-]{0,126}[a-z0-9]$"
"""A user alias: lowercase letters, digits and ``-``, 2 to 128 characters, starting with a
letter (so never a version number)."""
DEFAULT_ALIAS = "default"
"""The alias that names each model's default version (the one ``GET .../models/{id}``
answers)."""

UPLOAD_MODEL_RESPONSE_TYPE = "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse"
"""The ``@type`` of an upload operation's response."""
MODEL_EMPTY_TYPE = "type.googleapis.com/google.protobuf.Empty"
"""The ``@type`` of a delete operation's response."""


class ModelSourceType(enum.StrEnum):
    """Vertex's ``ModelSourceInfo.ModelSourceType``; mldiag's models are all CUSTOM."""

    UNSPECIFIED = "MODEL_SOURCE_TYPE_UNSPECIFIED"
    AUTOML = "AUTOML"
    CUSTOM = "CUSTOM"
    BQML = "BQML"
    MODEL_GARDEN = "MODEL_GARDEN"
    GENIE = "GENIE"
    CUSTOM_TEXT_EMBEDDING = "CUSTOM_TEXT_EMBEDDING"
    MARKETPLACE = "MARKETPLACE"


MODEL_SOURCE_TYPE_NUMBERS: dict[str, int] = {
    kind.value: n for n, kind in enumerate(ModelSourceType)
}
"""``ModelSourceType``'s proto numbers, by name (declared in proto order)."""

MODEL_ENUM_FIELDS: dict[str, dict[str, int]] = {"sourceType": MODEL_SOURCE_TYPE_NUMBERS}
"""The camelCase keys of a Model document holding an enum, each with its names' numbers."""

UNSUPPORTED_MODEL_FIELDS: dict[str, str] = {
    "explanationSpec": "explanations",
    "encryptionSpec": "customer-managed encryption keys",
    "deployedModels": "endpoints (models are not deployed)",
    "predictSchemata": "prediction schemata",
    "pipelineJob": "Vertex pipeline jobs",
    "baseModelSource": "Model Garden and Genie sources",
    "dataStats": "dataset statistics",
    "defaultCheckpointId": "model checkpoints",
    "checkpoints": "model checkpoints",
    "supportedExportFormats": "model export",
    "originalModelInfo": "model copies",
}
"""Model fields mldiag refuses by name (UNIMPLEMENTED) when they are set."""

UNSUPPORTED_CONTAINER_FIELDS: dict[str, str] = {
    "invokeRoutePrefix": "serving (invoke routes)",
    "grpcPorts": "serving (gRPC ports)",
    "deploymentTimeout": "serving (deployment timeouts)",
    "sharedMemorySizeMb": "serving (shared memory)",
    "startupProbe": "serving (probes)",
    "healthProbe": "serving (probes)",
    "livenessProbe": "serving (probes)",
}
"""containerSpec fields mldiag refuses by name (UNIMPLEMENTED) when they are set."""

OUTPUT_ONLY_MODEL_FIELDS = frozenset(
    {
        "name",
        "versionId",
        "versionCreateTime",
        "versionUpdateTime",
        "createTime",
        "updateTime",
        "trainingPipeline",
        "modelSourceInfo",
        "etag",
        "lineage",
        "supportedDeploymentResourcesTypes",
        "supportedInputStorageFormats",
        "supportedOutputStorageFormats",
        "metadataArtifact",
        "satisfiesPzs",
        "satisfiesPzi",
    }
)
"""Model fields the service sets; a client's values are dropped (camelCase names)."""


class Port(Contract):
    """A port the serving container listens on."""

    container_port: int = Field(ge=1, le=65535, description="The port number (1 to 65535).")


class ModelContainerSpec(Contract):
    """The container that would serve the model (recorded; mldiag does not serve models)."""

    image_uri: Text = Field(min_length=1, description="The serving image.")
    command: list[Text] = Field(
        default_factory=list, max_length=1000, description="Overrides the image's entrypoint."
    )
    args: list[Text] = Field(default_factory=list, max_length=10_000, description="Arguments.")
    env: list[EnvVar] = Field(
        default_factory=list, max_length=100, description="Environment variables."
    )
    ports: list[Port] = Field(default_factory=list, max_length=100, description="Its ports.")
    predict_route: Text = Field(default="", description="The HTTP path of predictions.")
    health_route: Text = Field(default="", description="The HTTP path of health checks.")


class ModelSourceInfo(Contract):
    """Where a model came from: always CUSTOM here (uploaded, or imported by a pipeline)."""

    source_type: Annotated[
        ModelSourceType, enum_from_number(ModelSourceType, MODEL_SOURCE_TYPE_NUMBERS)
    ] = Field(default=ModelSourceType.CUSTOM, description="CUSTOM.")
    copy_: bool = Field(default=False, alias="copy", description="Always false (no copies).")


class ModelLineage(Contract):
    """What produced a model version (mldiag extension): resource names, empty when none.
    An upload through the API has no lineage; a training pipeline's import has it."""

    training_pipeline: str = Field(
        default="", max_length=1000, description="``.../trainingPipelines/{id}``."
    )
    custom_job: str = Field(default="", max_length=1000, description="``.../customJobs/{id}``.")
    hyperparameter_tuning_job: str = Field(
        default="", max_length=1000, description="``.../hyperparameterTuningJobs/{id}``."
    )
    run: str = Field(
        default="", max_length=1000, description="The id of the run the files came from."
    )


class Model(Contract):
    """One version of a model, as uploaded (``displayName``, ``artifactUri``,
    ``containerSpec``, ...) and as served (the output-only fields). ``name`` never carries
    the version: ``versionId`` does."""

    name: str = Field(default="", description="Output: ``projects/{p}/locations/{l}/models/{id}``.")
    version_id: str = Field(default="", description="Output: ``1``, ``2``, ... (never reused).")
    version_aliases: list[str] = Field(
        default_factory=list,
        max_length=MAX_ALIASES,
        description="``default`` on the default version, then user aliases.",
    )
    version_create_time: datetime | None = Field(default=None, description="Output: created.")
    version_update_time: datetime | None = Field(default=None, description="Output: changed.")
    display_name: str = Field(min_length=1, max_length=128, description="A name for people.")
    description: str = Field(default="", max_length=10_000, description="The model's.")
    version_description: str = Field(default="", max_length=10_000, description="This version's.")
    artifact_uri: Text = Field(
        default="", description="``gs://`` or ``file://`` folder of the model's files."
    )
    container_spec: ModelContainerSpec | None = Field(
        default=None, description="The serving container (recorded only)."
    )
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=64, description="This version's labels."
    )
    create_time: datetime | None = Field(default=None, description="Output: the model created.")
    update_time: datetime | None = Field(default=None, description="Output: last change.")
    training_pipeline: str = Field(
        default="", description="Output: the training pipeline that produced this version."
    )
    model_source_info: ModelSourceInfo | None = Field(default=None, description="Output: CUSTOM.")
    metadata_schema_uri: Text = Field(default="", description="Schema of ``metadata``.")
    metadata: JsonValue = Field(default=None, description="Anything (a protobuf Value).")
    etag: str = Field(default="", description="Output: changes whenever the version changes.")
    lineage: ModelLineage | None = Field(
        default=None, description="Output (mldiag extension): what produced this version."
    )


class UploadModelRequest(Contract):
    """``POST .../models:upload``: a new model, or a new version of ``parentModel``."""

    model: Model = Field(description="The model (version) to register.")
    parent_model: str = Field(
        default="",
        max_length=1000,
        description="A model's name or id: the upload becomes its next version.",
    )
    model_id: str = Field(
        default="", max_length=63, description="The new model's id (digits are chosen if unset)."
    )
    service_account: str = Field(default="", description="Refused when set (not provided).")


class UploadModelResponse(Contract):
    """``google.cloud.aiplatform.v1.UploadModelResponse`` packed in an ``Any``."""

    type_url: str = Field(
        default=UPLOAD_MODEL_RESPONSE_TYPE, alias="@type", description="Its type URL."
    )
    model: str = Field(description="The model's name (no version).")
    model_version_id: str = Field(description="The version the upload created.")


class ModelEmptyResponse(Contract):
    """``google.protobuf.Empty`` packed in an ``Any`` (a delete operation's response)."""

    type_url: str = Field(default=MODEL_EMPTY_TYPE, alias="@type", description="Empty's.")


class ModelOperation(Contract):
    """A long-running operation of the registry, answered done (uploads and deletes finish
    before the answer); ``GET .../models/{id}/operations/{op}`` answers it again."""

    name: str = Field(description="``projects/{p}/locations/{l}/models/{id}/operations/{op}``.")
    done: bool = Field(default=True, description="Always true: the work is finished.")
    response: UploadModelResponse | ModelEmptyResponse = Field(
        description="An UploadModelResponse, or Empty for a delete."
    )


class ListModelsResponse(Contract):
    """A page of ``GET .../models``: each model's default version."""

    models: list[Model] = Field(default_factory=list, description="The page.")
    next_page_token: str = Field(default="", description="Pass as pageToken for the next page.")


class ListModelVersionsResponse(Contract):
    """A page of ``GET .../models/{id}:listVersions``."""

    models: list[Model] = Field(default_factory=list, description="The page, one per version.")
    next_page_token: str = Field(default="", description="Pass as pageToken for the next page.")


class MergeVersionAliasesRequest(Contract):
    """``POST .../models/{id}@{v}:mergeVersionAliases``: ``x`` adds (moving it from another
    version), ``-x`` removes."""

    version_aliases: list[str] = Field(
        max_length=MAX_ALIASES, description="Aliases to add, or to remove with a leading ``-``."
    )
