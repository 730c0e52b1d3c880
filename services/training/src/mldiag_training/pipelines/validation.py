"""Reading a TrainingPipeline body as Vertex does, and the job its task describes.

The order matters to what a caller hears first:

1. the body must be a JSON object;
2. Vertex fields mldiag knows but does not provide (``inputDataConfig``: managed datasets,
   ``encryptionSpec``) are refused as UNIMPLEMENTED by name;
3. output-only fields a client sends back are dropped;
4. the strict model refuses unknown fields and wrong types (INVALID_ARGUMENT);
5. ``trainingTaskDefinition`` must be the custom task or the tuning task;
6. ``trainingTaskInputs`` is read leniently (:func:`normalise_struct`: keys in snake_case or
   camelCase, integral doubles as integers) into the CustomJob or HyperparameterTuningJob it
   describes, with the custom-jobs rules; failures name the field under
   ``trainingTaskInputs.`` (``trainingTaskInputs.workerPoolSpecs[0].replicaCount``);
7. importing a model needs the job's outputs: ``modelToUpload`` needs a
   ``baseOutputDirectory``.
"""

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

import pydantic_core
from pydantic.alias_generators import to_camel, to_snake

from mldiag_platform.errors import InvalidArgument, MldiagError, Unimplemented
from mldiag_platform.http import parse_body
from mldiag_schemas.jobs import CustomJob, CustomJobSpec
from mldiag_schemas.pipelines import (
    CUSTOM_TASK_DEFINITION,
    TASK_DEFINITIONS,
    TUNING_TASK_DEFINITION,
    UNSUPPORTED_PIPELINE_FIELDS,
    TrainingPipeline,
)
from mldiag_schemas.tuning import HyperparameterTuningJob
from mldiag_training.jobs.validation import parse_custom_job
from mldiag_training.models.validation import check_model
from mldiag_training.pipelines.errors import InvalidTrainingPipeline, UnsupportedPipelineField
from mldiag_training.tuning.validation import parse_tuning_job

INPUTS = "trainingTaskInputs"
"""The field every task problem is named under."""

OUTPUT_ONLY_FIELDS = frozenset(
    {
        "name",
        "state",
        "createTime",
        "startTime",
        "endTime",
        "updateTime",
        "error",
        "trainingTaskMetadata",
    }
)
"""TrainingPipeline fields the service sets; a client's values are ignored."""

_OUTPUT_ONLY = OUTPUT_ONLY_FIELDS | {to_snake(name) for name in OUTPUT_ONLY_FIELDS}

MODEL_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
"""A model id a caller may choose (Vertex: lowercase letters, digits, ``-`` and ``_``)."""
PARENT_MODEL = re.compile(r"^(projects/[^/]+/locations/[^/]+/models/)?[a-z0-9][a-z0-9_-]{0,62}$")
"""``parentModel``: a model's resource name (or its id)."""

TaskKind = Literal["custom", "tuning"]

TUNING_TASK_FIELDS = frozenset(
    {"studySpec", "maxTrialCount", "parallelTrialCount", "maxFailedTrialCount", "trialJobSpec"}
)
"""What the tuning task's inputs hold (a HyperparameterTuningJob without its names)."""


@dataclass(frozen=True)
class PipelineRequest:
    """A create request, read: the pipeline as asked and the job its task describes."""

    pipeline: TrainingPipeline
    kind: TaskKind
    job: CustomJob | HyperparameterTuningJob

    @property
    def spec(self) -> CustomJobSpec:
        """The spec the job (or every trial) runs."""
        if isinstance(self.job, CustomJob):
            return self.job.job_spec
        return self.job.trial_job_spec


def _invalid(field: str, problem: str) -> InvalidTrainingPipeline:
    return InvalidTrainingPipeline(
        f"{field}: {problem}", details=[{"field": field, "problem": problem}]
    )


def normalise_struct(value: Any) -> Any:
    """A Struct as the SDK sends it, in the shape the strict models read: every key in
    camelCase (``replica_count`` → ``replicaCount``) and every integral double an integer
    (``1.0`` → ``1``; ``1.5`` stays, so an integer field refuses it by name)."""
    if isinstance(value, dict):
        return {to_camel(key): normalise_struct(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalise_struct(item) for item in value]
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def reroot(field: str, kind: TaskKind) -> str:
    """A field path of the job's document as a path of the pipeline's body: a custom job's
    ``jobSpec.x`` is ``trainingTaskInputs.x``; a tuning job's ``studySpec.x`` is
    ``trainingTaskInputs.studySpec.x`` (its trials' ``jobSpec.x``:
    ``trainingTaskInputs.trialJobSpec.x``)."""
    if field in ("", "displayName"):
        return field or INPUTS
    if field == "jobSpec" or field.startswith(("jobSpec.", "jobSpec[")):
        rest = field[len("jobSpec") :]
        return INPUTS + rest if kind == "custom" else f"{INPUTS}.trialJobSpec{rest}"
    return f"{INPUTS}.{field}"


def restate(error: MldiagError, kind: TaskKind) -> MldiagError:
    """``error`` (about the job's document: ``jobSpec.…``, ``studySpec.…``) restated about
    the pipeline's body (``trainingTaskInputs.…``), of the pipelines' kind where there is one."""
    details: list[Any] = []
    message = error.message
    for number, detail in enumerate(error.details):
        if not isinstance(detail, dict) or "field" not in detail:
            details.append(detail)
            continue
        old = str(detail["field"])
        new = reroot(old, kind)
        if number == 0 and old:
            message = message.replace(old, new, 1)
        elif number == 0:
            message = f"{new}: {message}"
        details.append({**detail, "field": new})
    if isinstance(error, Unimplemented):
        return UnsupportedPipelineField(message, details=details)
    if isinstance(error, InvalidArgument):
        return InvalidTrainingPipeline(message, details=details)
    # Others keep their kind (a pool no executor fits is FAILED_PRECONDITION).
    return type(error)(message, details=details)


def _refuse_unsupported(document: dict[str, Any]) -> None:
    for camel, what in UNSUPPORTED_PIPELINE_FIELDS.items():
        for key in (camel, to_snake(camel)):
            value = document.get(key)
            if value in (None, {}, [], ""):
                document.pop(key, None)
                continue
            problem = f"is not supported: mldiag does not provide {what}"
            raise UnsupportedPipelineField(
                f"{camel} {problem}", details=[{"field": camel, "problem": problem}]
            )


def parse_training_pipeline(raw: bytes) -> PipelineRequest:
    """The pipeline a create request's body describes and the job its task describes, or
    INVALID_ARGUMENT / UNIMPLEMENTED naming the field. Machine types are checked by the
    service (they need the machine table)."""
    try:
        document = pydantic_core.from_json(raw or b"{}")
    except ValueError as error:
        raise _invalid("", f"the body is not JSON ({error})") from None
    if not isinstance(document, dict):
        raise _invalid("", "the body must be a JSON object (a TrainingPipeline)")
    _refuse_unsupported(document)
    kept = {key: value for key, value in document.items() if key not in _OUTPUT_ONLY}
    try:
        pipeline = parse_body(
            TrainingPipeline, pydantic_core.to_json(kept), error=InvalidTrainingPipeline
        )
    except InvalidArgument as error:
        details = [
            {**d, "field": _path(str(d.get("field", "")))}
            for d in error.details
            if isinstance(d, dict)
        ]
        first = details[0] if details else {"field": "", "problem": error.message}
        more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
        raise InvalidTrainingPipeline(
            f"{first['field'] or 'the body'}: {first.get('problem', '')}{more}", details=details
        ) from None
    definition = pipeline.training_task_definition
    if definition not in TASK_DEFINITIONS:
        raise _invalid(
            "trainingTaskDefinition",
            f"{definition[:200]!r} is not a task mldiag runs: use {CUSTOM_TASK_DEFINITION} "
            f"or {TUNING_TASK_DEFINITION}",
        )
    _check_model_target(pipeline)
    inputs = normalise_struct(pipeline.training_task_inputs)
    if definition == CUSTOM_TASK_DEFINITION:
        request = PipelineRequest(pipeline, "custom", _custom_job(pipeline, inputs))
    else:
        request = PipelineRequest(pipeline, "tuning", _tuning_job(pipeline, inputs))
    asked = pipeline.model_to_upload
    output = request.spec.base_output_directory
    if asked is not None and output is not None:
        # the registry's own rules, said now rather than when the job has run
        where = model_dir(output.output_uri_prefix)
        check_model(asked.model_copy(update={"artifact_uri": where}), "modelToUpload.")
    if asked is not None and output is None:
        where = (
            "baseOutputDirectory"
            if request.kind == "custom"
            else "trialJobSpec.baseOutputDirectory"
        )
        raise _invalid(
            f"{INPUTS}.{where}",
            "modelToUpload imports the files the job writes to AIP_MODEL_DIR "
            "(<baseOutputDirectory>/model/): set an outputUriPrefix",
        )
    return request


def model_dir(base: str, trial_id: str = "") -> str:
    """``AIP_MODEL_DIR`` of a job whose outputs go to ``base`` (of one trial's, if given)."""
    root = base.rstrip("/")
    return f"{root}/{trial_id}/model/" if trial_id else f"{root}/model/"


_INDEX = re.compile(r"\.(\d+)(?=\.|$)")


def _path(dotted: str) -> str:
    """pydantic's ``modelToUpload.containerSpec.args.1`` as ``…args[1]``."""
    return _INDEX.sub(r"[\1]", dotted)


def _check_model_target(pipeline: TrainingPipeline) -> None:
    if pipeline.model_id and not MODEL_ID.fullmatch(pipeline.model_id):
        raise _invalid(
            "modelId",
            f"{pipeline.model_id!r} is not a model id: lowercase letters, digits, - and _, "
            "starting with a letter or digit, at most 63",
        )
    if pipeline.parent_model and not PARENT_MODEL.fullmatch(pipeline.parent_model):
        raise _invalid(
            "parentModel",
            f"{pipeline.parent_model[:200]!r} is not projects/{{p}}/locations/{{l}}/models/{{id}}"
            " (nor a model id)",
        )
    if (pipeline.model_id or pipeline.parent_model) and pipeline.model_to_upload is None:
        field = "modelId" if pipeline.model_id else "parentModel"
        raise _invalid(field, "names where modelToUpload goes: set modelToUpload too")


def _custom_job(pipeline: TrainingPipeline, inputs: dict[str, Any]) -> CustomJob:
    document = {"displayName": pipeline.display_name, "jobSpec": inputs}
    try:
        return parse_custom_job(pydantic_core.to_json(document))
    except (InvalidArgument, Unimplemented) as error:
        raise restate(error, "custom") from None


def _tuning_job(pipeline: TrainingPipeline, inputs: dict[str, Any]) -> HyperparameterTuningJob:
    for key in inputs:
        if key not in TUNING_TASK_FIELDS:
            raise _invalid(
                f"{INPUTS}.{key}",
                f"is not a field of the tuning task ({', '.join(sorted(TUNING_TASK_FIELDS))})",
            )
    document = {"displayName": pipeline.display_name, **inputs}
    try:
        return parse_tuning_job(pydantic_core.to_json(document))
    except (InvalidArgument, Unimplemented) as error:
        raise restate(error, "tuning") from None
