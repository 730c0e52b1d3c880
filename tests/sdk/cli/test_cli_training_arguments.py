"""``mldiag hp-tuning-jobs``, ``training-pipelines`` and ``models``: flags and ``--config``
files made into request bodies (no API needed), and trials rendered as table rows."""

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mldiag.api_client import ApiError
from mldiag.cli import build_parser
from mldiag.cli.common import UsageError
from mldiag.cli.models import build_upload_request, operation_result, version_reference
from mldiag.cli.pipelines import build_pipeline_request
from mldiag.cli.resources import camel_case_keys, order_by
from mldiag.cli.tuning import TRIAL_COLUMNS, build_tuning_request, parameter_rows, trial_row
from mldiag.training_api import CUSTOM_TASK, TUNING_TASK, parse_resource_name

CAMEL = """\
displayName: lr-search
studySpec:
  metrics:
  - metricId: accuracy
    goal: MAXIMIZE
  parameters:
  - parameterId: learning_rate
    doubleValueSpec: {minValue: 0.0001, maxValue: 0.1}
    scaleType: UNIT_LOG_SCALE
  - parameterId: units
    integerValueSpec: {minValue: 16, maxValue: 128}
  measurementSelectionType: BEST_MEASUREMENT
  medianAutomatedStoppingSpec: {useElapsedDuration: false}
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {machineType: n1-standard-4}
    replicaCount: 1
    containerSpec:
      imageUri: python:3.12
      command: [python, -m, trainer.task]
      env: [{name: MY_SETTING, value: a_b}]
labels: {team_name: ml}
"""

SNAKE = """\
display_name: lr-search
study_spec:
  metrics:
  - metric_id: accuracy
    goal: MAXIMIZE
  parameters:
  - parameter_id: learning_rate
    double_value_spec: {min_value: 0.0001, max_value: 0.1}
    scale_type: UNIT_LOG_SCALE
  - parameter_id: units
    integer_value_spec: {min_value: 16, max_value: 128}
  measurement_selection_type: BEST_MEASUREMENT
  median_automated_stopping_spec: {use_elapsed_duration: false}
trial_job_spec:
  worker_pool_specs:
  - machine_spec: {machine_type: n1-standard-4}
    replica_count: 1
    container_spec:
      image_uri: python:3.12
      command: [python, -m, trainer.task]
      env: [{name: MY_SETTING, value: a_b}]
labels: {team_name: ml}
"""


def _write(tmp_path: Path, text: str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_a_tuning_config_reads_the_same_in_both_key_styles(tmp_path: Path) -> None:
    camel = build_tuning_request(
        _args("hp-tuning-jobs", "create", "--config", _write(tmp_path, CAMEL, "camel.yaml"))
    )
    snake = build_tuning_request(
        _args("hp-tuning-jobs", "create", "--config", _write(tmp_path, SNAKE, "snake.yaml"))
    )
    assert camel == snake
    assert camel["displayName"] == "lr-search"
    assert camel["studySpec"]["parameters"][0] == {
        "parameterId": "learning_rate",  # a value: never re-cased
        "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.1},
        "scaleType": "UNIT_LOG_SCALE",
    }
    assert camel["studySpec"]["medianAutomatedStoppingSpec"] == {"useElapsedDuration": False}
    pool = camel["trialJobSpec"]["workerPoolSpecs"][0]
    assert pool["containerSpec"]["env"] == [{"name": "MY_SETTING", "value": "a_b"}]
    assert pool["machineSpec"] == {"machineType": "n1-standard-4"}
    assert camel["labels"] == {"team_name": "ml"}  # the user's keys stay as written
    # gcloud's defaults when neither the file nor a flag sets the counts
    assert (camel["maxTrialCount"], camel["parallelTrialCount"]) == (1, 1)
    assert "maxFailedTrialCount" not in camel


def test_tuning_flags_override_the_file(tmp_path: Path) -> None:
    config = _write(tmp_path, CAMEL + "maxTrialCount: 20\nparallelTrialCount: 4\n")
    from_file = build_tuning_request(_args("hp-tuning-jobs", "create", "--config", config))
    assert (from_file["maxTrialCount"], from_file["parallelTrialCount"]) == (20, 4)
    body = build_tuning_request(
        _args(
            "hp-tuning-jobs",
            "create",
            "--config",
            config,
            "--display-name",
            "renamed",
            "--max-trial-count",
            "6",
            "--parallel-trial-count",
            "2",
            "--max-failed-trial-count",
            "0",
            "--algorithm",
            "grid",
            "--labels",
            "stage=dev",
        )
    )
    assert body["displayName"] == "renamed"
    assert (body["maxTrialCount"], body["parallelTrialCount"], body["maxFailedTrialCount"]) == (
        6,
        2,
        0,
    )
    assert body["studySpec"]["algorithm"] == "GRID_SEARCH"
    assert body["labels"] == {"team_name": "ml", "stage": "dev"}
    for name, algorithm in (
        ("random", "RANDOM_SEARCH"),
        ("random-search", "RANDOM_SEARCH"),
        ("grid-search", "GRID_SEARCH"),
        ("unspecified", "ALGORITHM_UNSPECIFIED"),
        ("algorithm-unspecified", "ALGORITHM_UNSPECIFIED"),
    ):
        args = _args("hp-tuning-jobs", "create", "--config", config, "--algorithm", name)
        assert build_tuning_request(args)["studySpec"]["algorithm"] == algorithm


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("studySpec: [unclosed\n", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping (a HyperparameterTuningJob) at the top"),
        ("displayName: x\ntrialJobSpec: {}\n", "studySpec must be a mapping, got nothing"),
        ("displayName: x\nstudySpec: {}\ntrialJobSpec: [1]\n", "trialJobSpec must be a mapping"),
        ("studySpec: {}\ntrialJobSpec: {}\n", "give --display-name (or displayName in --config)"),
        (
            "displayName: x\nstudySpec: {}\nstudy_spec: {}\ntrialJobSpec: {}\n",
            "'study_spec' is given twice (as 'studySpec' too)",
        ),
    ],
)
def test_a_bad_tuning_config_is_a_clear_usage_error(
    tmp_path: Path, text: str, message: str
) -> None:
    config = _write(tmp_path, text)
    with pytest.raises(UsageError) as raised:
        build_tuning_request(_args("hp-tuning-jobs", "create", "--config", config))
    assert message in str(raised.value)


def test_usage_errors_exit_2_without_a_traceback(
    tmp_path: Path, mldiag: Callable[..., Any]
) -> None:
    bad = _write(tmp_path, "studySpec: [unclosed\n")
    # No API is reached: the file is refused before any request.
    result = mldiag("hp-tuning-jobs", "create", "--api-url", "http://127.0.0.1:9", "--config", bad)
    assert result.code == 2
    assert result.err.startswith("mldiag hp-tuning-jobs create: error: --config ")
    assert "not valid YAML" in result.err
    assert "Traceback" not in result.err
    missing = mldiag("hp-tuning-jobs", "create", "--config", str(tmp_path / "none.yaml"))
    assert missing.code == 2
    assert "No such file or directory" in missing.err
    assert mldiag("hp-tuning-jobs", "create", "--config", bad, "--algorithm", "bayes").code == 2
    assert mldiag("hp-tuning-jobs", "create", "--config", bad, "--max-trial-count", "0").code == 2
    version = mldiag("models", "delete-version", "--api-url", "http://127.0.0.1:9", "123")
    assert version.code == 2
    assert "name a version, MODEL@VERSION" in version.err


def test_the_short_pipeline_form_becomes_a_custom_task(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        "display_name: train-and-upload\n"
        "job_spec:\n"
        "  worker_pool_specs:\n"
        "  - machine_spec: {machine_type: n1-standard-4}\n"
        "    replica_count: 1\n"
        "    container_spec: {image_uri: python:3.12, command: [python, train.py]}\n"
        "  base_output_directory: {output_uri_prefix: 'file:///tmp/out'}\n"
        "model_to_upload:\n"
        "  display_name: my-model\n"
        "  container_spec: {image_uri: serving:1}\n"
        "  labels: {model_kind: cnn}\n"
        "parent_model: '123'\n",
    )
    body = build_pipeline_request(_args("training-pipelines", "create", "--config", config))
    assert body == {
        "displayName": "train-and-upload",
        "trainingTaskDefinition": CUSTOM_TASK,
        "trainingTaskInputs": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": 1,
                    "containerSpec": {"imageUri": "python:3.12", "command": ["python", "train.py"]},
                }
            ],
            "baseOutputDirectory": {"outputUriPrefix": "file:///tmp/out"},
        },
        "modelToUpload": {
            "displayName": "my-model",
            "containerSpec": {"imageUri": "serving:1"},
            "labels": {"model_kind": "cnn"},
        },
        "parentModel": "123",
    }


def test_the_short_tuning_pipeline_form_and_the_full_body(tmp_path: Path) -> None:
    tuning = _write(tmp_path, CAMEL + "maxTrialCount: 4\nmodelToUpload: {displayName: m}\n")
    body = build_pipeline_request(_args("training-pipelines", "create", "--config", tuning))
    assert body["trainingTaskDefinition"] == TUNING_TASK
    inputs = body["trainingTaskInputs"]
    assert set(inputs) == {"studySpec", "trialJobSpec", "maxTrialCount"}
    assert "studySpec" not in body
    assert body["labels"] == {"team_name": "ml"}

    full = _write(
        tmp_path,
        "displayName: full\n"
        f"trainingTaskDefinition: {CUSTOM_TASK}\n"
        "trainingTaskInputs:\n"
        "  worker_pool_specs: [{replica_count: 1.0}]\n",
        "full.yaml",
    )
    body = build_pipeline_request(
        _args("training-pipelines", "create", "--config", full, "--display-name", "over")
    )
    assert body["displayName"] == "over"
    assert body["trainingTaskInputs"] == {"workerPoolSpecs": [{"replicaCount": 1.0}]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("displayName: x\n", "give trainingTaskInputs (with trainingTaskDefinition), or jobSpec"),
        ("displayName: x\njobSpec: {}\nstudySpec: {}\n", "give jobSpec (a custom job) or"),
        ("displayName: x\njobSpec: {}\ntrainingTaskInputs: {}\n", "not both"),
        ("displayName: x\njobSpec: 3\n", "jobSpec must be a mapping, got a number"),
        ("jobSpec: {}\n", "give --display-name"),
        ("displayName: x\njobSpec: {}\nmodelToUpload: [a]\n", "modelToUpload must be a mapping"),
    ],
)
def test_a_bad_pipeline_config_is_a_clear_usage_error(
    tmp_path: Path, text: str, message: str
) -> None:
    config = _write(tmp_path, text)
    with pytest.raises(UsageError) as raised:
        build_pipeline_request(_args("training-pipelines", "create", "--config", config))
    assert message in str(raised.value)


def test_model_upload_flags_make_the_model() -> None:
    args = _args(
        "models",
        "upload",
        "--display-name",
        "resnet",
        "--artifact-uri",
        "file:///models/resnet",
        "--container-image-uri",
        "serving:2",
        "--version-aliases",
        "prod,candidate",
        "--labels",
        "team=ml",
        "--container-env-vars",
        "WORKERS=2",
        "--container-ports",
        "8080",
        "--container-predict-route",
        "/predict",
        "--parent-model",
        "123",
    )
    assert build_upload_request(args) == {
        "displayName": "resnet",
        "artifactUri": "file:///models/resnet",
        "containerSpec": {
            "imageUri": "serving:2",
            "env": [{"name": "WORKERS", "value": "2"}],
            "ports": [{"containerPort": 8080}],
            "predictRoute": "/predict",
        },
        "versionAliases": ["prod", "candidate"],
        "labels": {"team": "ml"},
    }
    assert args.parent_model == "123"
    bad = _args(
        "models",
        "upload",
        "--display-name=m",
        "--artifact-uri=file:///m",
        "--container-image-uri=i",
        "--container-ports=http",
    )
    with pytest.raises(UsageError, match="'http' is not a port"):
        build_upload_request(bad)


def test_model_references_and_operations() -> None:
    assert parse_resource_name("projects/p/locations/us-central1/models/7@prod", "models") == (
        "p",
        "us-central1",
        "7@prod",
    )
    assert parse_resource_name("7@2", "models") == (None, None, "7@2")
    assert version_reference("7@2") == "7@2"
    for bad in ("7", "7@", "@2", "projects/p/locations/l/models/7"):
        with pytest.raises(UsageError):
            version_reference(bad)
    done = {"name": "op", "done": True, "response": {"model": "m", "modelVersionId": "2"}}
    assert operation_result(done) == {"model": "m", "modelVersionId": "2"}
    with pytest.raises(ApiError) as raised:
        operation_result({"name": "op", "done": True, "error": {"code": 5, "message": "gone"}})
    assert (raised.value.code, raised.value.message) == ("not_found", "gone")


def test_sort_by_and_key_styles() -> None:
    assert order_by("~createTime") == "createTime desc"
    assert order_by("displayName, ~createTime") == "displayName, createTime desc"
    assert order_by("") == ""
    with pytest.raises(UsageError):
        order_by("~")
    assert camel_case_keys({"a_b": [{"c_d": 1}], "metadata": {"x_y": 1}}) == {
        "aB": [{"cD": 1}],
        "metadata": {"x_y": 1},
    }


def test_trials_as_table_rows() -> None:
    assert TRIAL_COLUMNS[:5] == ("TRIAL", "STATE", "PARAMETERS", "FINAL VALUE", "STOPPED EARLY")
    succeeded = {
        "id": "3",
        "state": "SUCCEEDED",
        "parameters": [
            {"parameterId": "lr", "value": 0.0125},
            {"parameterId": "units", "value": 64.0},
            {"parameterId": "optimizer", "value": "adam"},
        ],
        "finalMeasurement": {"stepCount": "10", "metrics": [{"metricId": "acc", "value": 0.91}]},
        "customJob": "projects/default/locations/local/customJobs/77",
        "stoppedEarly": True,
    }
    assert trial_row(succeeded) == (
        "3",
        "SUCCEEDED",
        "lr=0.0125,units=64,optimizer=adam",
        "0.91",
        "yes",
        "77",
    )
    infeasible = {"id": "4", "state": "INFEASIBLE", "infeasibleReason": "no objective metric"}
    assert trial_row(infeasible)[3:5] == ("no objective metric", "no")
    active = {"id": "5", "state": "ACTIVE", "parameters": []}
    assert trial_row(active)[3:5] == ("", "")
    two = {
        "id": "6",
        "state": "SUCCEEDED",
        "finalMeasurement": {
            "metrics": [{"metricId": "acc", "value": 0.5}, {"metricId": "loss", "value": 2.0}]
        },
    }
    assert trial_row(two)[3] == "acc=0.5,loss=2"


def test_the_search_space_as_rows() -> None:
    parameters = [
        {
            "parameterId": "lr",
            "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.1},
            "scaleType": "UNIT_LOG_SCALE",
        },
        {
            "parameterId": "optimizer",
            "categoricalValueSpec": {"values": ["adam", "sgd"]},
            "scaleType": "SCALE_TYPE_UNSPECIFIED",
            "conditionalParameterSpecs": [
                {
                    "parentCategoricalValues": {"values": ["sgd"]},
                    "parameterSpec": {
                        "parameterId": "momentum",
                        "discreteValueSpec": {"values": [0.5, 0.9]},
                    },
                }
            ],
        },
        {"parameterId": "units", "integerValueSpec": {"minValue": "16", "maxValue": "64"}},
    ]
    assert parameter_rows(parameters) == [
        ("lr", "DOUBLE", "[0.0001, 0.1]", "UNIT_LOG_SCALE"),
        ("optimizer", "CATEGORICAL", "{adam,sgd}", ""),
        ("optimizer={sgd}: momentum", "DISCRETE", "{0.5,0.9}", ""),
        ("units", "INTEGER", "[16, 64]", ""),
    ]
