"""Reading TrainingPipeline bodies: the SDK's exact requests (a Struct of mixed snake_case
and camelCase with numbers as doubles) become the jobs they describe; mistakes are refused
naming the field under ``trainingTaskInputs``."""

import copy
import json
from typing import Any

import pytest

from mldiag_platform.errors import FailedPrecondition, InvalidArgument, MldiagError, Unimplemented
from mldiag_schemas.jobs import CustomJob
from mldiag_schemas.pipelines import CUSTOM_TASK_DEFINITION, TUNING_TASK_DEFINITION
from mldiag_schemas.tuning import Algorithm, GoalType, HyperparameterTuningJob
from mldiag_training.pipelines.errors import InvalidTrainingPipeline
from mldiag_training.pipelines.validation import (
    model_dir,
    normalise_struct,
    parse_training_pipeline,
    restate,
)

OUTPUT = "gs://mldiag-staging/aiplatform-custom-training-2026-12-04-22:07:26.806"

SDK_CONTAINER_BODY: dict[str, Any] = {
    "displayName": "ctj",
    "trainingTaskDefinition": CUSTOM_TASK_DEFINITION,
    "trainingTaskInputs": {
        "worker_pool_specs": [
            {
                "disk_spec": {"boot_disk_size_gb": 100.0, "boot_disk_type": "pd-ssd"},
                "machine_spec": {"machine_type": "e2-standard-4"},
                "containerSpec": {"command": ["python", "-c", "print(1)"], "imageUri": "python"},
                "replica_count": 1.0,
            }
        ],
        "base_output_directory": {"output_uri_prefix": OUTPUT},
    },
    "modelToUpload": {
        "displayName": "m1",
        "containerSpec": {"imageUri": "serving:1"},
        "versionAliases": ["default"],
    },
}
"""What ``CustomContainerTrainingJob(...).run(replica_count=1, machine_type=...,
model_display_name="m1")`` sent (google-cloud-aiplatform, recorded)."""

SDK_PACKAGE_BODY: dict[str, Any] = {
    "displayName": "ppj",
    "trainingTaskDefinition": CUSTOM_TASK_DEFINITION,
    "trainingTaskInputs": {
        "worker_pool_specs": [
            {
                "python_package_spec": {
                    "executor_image_uri": "python",
                    "args": ["--lr", "0.1"],
                    "package_uris": ["gs://b/trainer-0.1.tar.gz"],
                    "python_module": "trainer.task",
                },
                "disk_spec": {"boot_disk_size_gb": 100.0, "boot_disk_type": "pd-ssd"},
                "machine_spec": {"machine_type": "e2-standard-4"},
                "replica_count": 1.0,
            }
        ],
        "base_output_directory": {"output_uri_prefix": OUTPUT},
    },
    "modelToUpload": {
        "displayName": "m2",
        "containerSpec": {"imageUri": "serving:1"},
        "versionAliases": ["default"],
    },
}
"""What ``CustomPythonPackageTrainingJob(...).run(args=["--lr", "0.1"], ...)`` sent."""

TUNING_BODY: dict[str, Any] = {
    "displayName": "tuned",
    "trainingTaskDefinition": TUNING_TASK_DEFINITION,
    "trainingTaskInputs": {
        "study_spec": {
            "metrics": [{"metric_id": "loss", "goal": 2.0}],
            "parameters": [
                {"parameter_id": "lr", "double_value_spec": {"min_value": 0.001, "max_value": 1.0}}
            ],
            "algorithm": "RANDOM_SEARCH",
        },
        "max_trial_count": 4.0,
        "parallel_trial_count": 2.0,
        "trial_job_spec": SDK_CONTAINER_BODY["trainingTaskInputs"],
    },
}


def _raw(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def _with(path: list[str | int], value: Any, body: dict[str, Any] | None = None) -> dict[str, Any]:
    changed = copy.deepcopy(body or SDK_CONTAINER_BODY)
    node: Any = changed
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return changed


_DELETE = object()


def test_the_sdks_container_body_becomes_its_custom_job() -> None:
    request = parse_training_pipeline(_raw(SDK_CONTAINER_BODY))
    assert request.kind == "custom"
    assert isinstance(request.job, CustomJob)
    pool = request.job.job_spec.worker_pool_specs[0]
    assert pool.replica_count == 1
    assert pool.disk_spec is not None and pool.disk_spec.boot_disk_size_gb == 100
    assert pool.machine_spec is not None and pool.machine_spec.machine_type == "e2-standard-4"
    assert pool.container_spec is not None and pool.container_spec.command[-1] == "print(1)"
    assert request.spec.base_output_directory is not None
    assert request.spec.base_output_directory.output_uri_prefix == OUTPUT
    # the Struct is kept as sent, to be served back unchanged
    assert request.pipeline.training_task_inputs == SDK_CONTAINER_BODY["trainingTaskInputs"]
    assert request.pipeline.model_to_upload is not None
    assert request.pipeline.model_to_upload.display_name == "m1"


def test_the_sdks_python_package_body_becomes_its_custom_job() -> None:
    request = parse_training_pipeline(_raw(SDK_PACKAGE_BODY))
    assert isinstance(request.job, CustomJob)
    package = request.job.job_spec.worker_pool_specs[0].python_package_spec
    assert package is not None
    assert package.python_module == "trainer.task"
    assert package.package_uris == ["gs://b/trainer-0.1.tar.gz"]
    assert package.args == ["--lr", "0.1"]


def test_a_tuning_task_becomes_its_tuning_job() -> None:
    request = parse_training_pipeline(_raw(TUNING_BODY))
    assert request.kind == "tuning"
    assert isinstance(request.job, HyperparameterTuningJob)
    assert request.job.max_trial_count == 4
    assert request.job.parallel_trial_count == 2
    assert request.job.study_spec.metrics[0].goal is GoalType.MINIMIZE
    assert request.job.study_spec.algorithm is Algorithm.RANDOM_SEARCH
    assert request.job.trial_job_spec.worker_pool_specs[0].replica_count == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"replica_count": 1.0}, {"replicaCount": 1}),
        ({"a_b": [{"c_d": 2.5}]}, {"aB": [{"cD": 2.5}]}),
        ({"imageUri": "x", "x": True}, {"imageUri": "x", "x": True}),
        ([1e300, float("inf")], [int(1e300), float("inf")]),
    ],
)
def test_structs_are_read_in_camel_case_with_integral_doubles_as_integers(
    value: Any, expected: Any
) -> None:
    assert normalise_struct(value) == expected


BAD_INPUT = [
    (
        _with(["trainingTaskInputs", "worker_pool_specs", 0, "replica_count"], 1.5),
        "trainingTaskInputs.workerPoolSpecs[0].replicaCount",
    ),
    (
        _with(
            ["trainingTaskInputs", "worker_pool_specs", 0, "machine_spec", "accelerator_count"], 0.5
        ),
        "trainingTaskInputs.workerPoolSpecs[0].machineSpec.acceleratorCount",
    ),
    (
        _with(["trainingTaskInputs", "worker_pool_specs", 0, "replica_count"], 2.0),
        "trainingTaskInputs.workerPoolSpecs[0].replicaCount",
    ),
    (
        _with(["trainingTaskInputs", "worker_pool_specs", 0, "containerSpec"], _DELETE),
        "trainingTaskInputs.workerPoolSpecs[0]",
    ),
    (
        _with(["trainingTaskInputs", "worker_pool_specs"], []),
        "trainingTaskInputs.workerPoolSpecs",
    ),
    (
        _with(["trainingTaskInputs", "base_output_directory", "output_uri_prefix"], "s3://x/y"),
        "trainingTaskInputs.baseOutputDirectory.outputUriPrefix",
    ),
    (
        _with(["trainingTaskInputs", "no_such_field"], 1.0),
        "trainingTaskInputs.noSuchField",
    ),
    (
        _with(["trainingTaskInputs", "base_output_directory"], _DELETE),
        "trainingTaskInputs.baseOutputDirectory",
    ),
    (
        _with(
            ["trainingTaskDefinition"],
            "gs://google-cloud-aiplatform/schema/trainingjob/definition/automl_tables_1.0.0.yaml",
        ),
        "trainingTaskDefinition",
    ),
    (_with(["trainingTaskInputs"], [1, 2]), "trainingTaskInputs"),
    (_with(["displayName"], ""), "displayName"),
    (_with(["modelId"], "Bad Id"), "modelId"),
    (_with(["parentModel"], "models/1"), "parentModel"),
    (_with(["modelToUpload", "displayName"], _DELETE), "modelToUpload.displayName"),
    (
        _with(["trainingTaskInputs", "max_trial_count"], 2.5, TUNING_BODY),
        "trainingTaskInputs.maxTrialCount",
    ),
    (
        _with(["trainingTaskInputs", "study_spec", "metrics"], [], TUNING_BODY),
        "trainingTaskInputs.studySpec.metrics",
    ),
    (
        _with(
            ["trainingTaskInputs", "trial_job_spec", "worker_pool_specs", 0, "replica_count"],
            3.0,
            TUNING_BODY,
        ),
        "trainingTaskInputs.trialJobSpec.workerPoolSpecs[0].replicaCount",
    ),
    (
        _with(["trainingTaskInputs", "worker_pool_specs"], [], TUNING_BODY),
        "trainingTaskInputs.workerPoolSpecs",
    ),
]


@pytest.mark.parametrize(("body", "field"), BAD_INPUT)
def test_bad_input_is_invalid_argument_naming_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_training_pipeline(_raw(body))
    fields = [d.get("field") for d in caught.value.details if isinstance(d, dict)]
    assert fields and fields[0] == field, (fields, caught.value.message)
    assert caught.value.message.startswith(field), caught.value.message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_with(["inputDataConfig"], {"datasetId": "123"}), "inputDataConfig"),
        (_with(["encryptionSpec"], {"kmsKeyName": "k"}), "encryptionSpec"),
        (
            _with(["trainingTaskInputs", "enable_web_access"], True),
            "trainingTaskInputs.enableWebAccess",
        ),
        (
            _with(["trainingTaskInputs", "study_spec", "observation_noise"], 1.0, TUNING_BODY),
            "trainingTaskInputs.studySpec.observationNoise",
        ),
    ],
)
def test_what_mldiag_does_not_provide_is_unimplemented_by_name(
    body: dict[str, Any], field: str
) -> None:
    with pytest.raises(Unimplemented) as caught:
        parse_training_pipeline(_raw(body))
    assert caught.value.details[0]["field"] == field
    assert field in caught.value.message


def test_unsupported_fields_sent_empty_and_output_only_fields_are_dropped() -> None:
    body = {
        **SDK_CONTAINER_BODY,
        "inputDataConfig": {},
        "name": "projects/x/locations/y/trainingPipelines/1",
        "state": 4,
        "trainingTaskMetadata": {"backingCustomJob": "x"},
        "trainingTaskInputs": {
            **SDK_CONTAINER_BODY["trainingTaskInputs"],
            "enable_web_access": False,
        },
    }
    request = parse_training_pipeline(_raw(body))
    assert request.pipeline.name == ""
    assert request.pipeline.training_task_metadata is None


@pytest.mark.parametrize("raw", [b"[]", b"nope", b'"x"'])
def test_bodies_that_are_not_an_object_are_invalid(raw: bytes) -> None:
    with pytest.raises(MldiagError) as caught:
        parse_training_pipeline(raw)
    assert caught.value.http_status == 400


def test_model_dirs_are_vertexs() -> None:
    assert model_dir("gs://b/out") == "gs://b/out/model/"
    assert model_dir("gs://b/out/") == "gs://b/out/model/"
    assert model_dir("gs://b/out", "3") == "gs://b/out/3/model/"


@pytest.mark.parametrize(
    ("kind", "field", "expected"),
    [
        ("custom", "jobSpec.workerPoolSpecs[1]", "trainingTaskInputs.workerPoolSpecs[1]"),
        (
            "tuning",
            "jobSpec.workerPoolSpecs[1]",
            "trainingTaskInputs.trialJobSpec.workerPoolSpecs[1]",
        ),
        ("tuning", "studySpec.metrics", "trainingTaskInputs.studySpec.metrics"),
        ("custom", "displayName", "displayName"),
    ],
)
def test_a_jobs_refusal_is_restated_about_the_pipeline_keeping_its_kind(
    kind: Any, field: str, expected: str
) -> None:
    refusal = FailedPrecondition(
        f"{field}: no executor seen in the last 5 minutes fits it",
        details=[{"field": field, "problem": "fits on no executor"}],
    )
    restated = restate(refusal, kind)
    assert type(restated) is FailedPrecondition
    assert restated.details == [{"field": expected, "problem": "fits on no executor"}]
    assert restated.message == f"{expected}: no executor seen in the last 5 minutes fits it"
    invalid = restate(InvalidArgument(f"{field}: bad", details=[{"field": field}]), kind)
    assert isinstance(invalid, InvalidTrainingPipeline)
    assert invalid.details[0]["field"] == expected
