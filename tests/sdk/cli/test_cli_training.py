"""``mldiag hp-tuning-jobs``, ``training-pipelines`` and ``models`` against a real training
service (real NATS, PostgreSQL and file:// storage), invoked in-process as a person or a
script would."""

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sdk.cli.training_service import Training

pytestmark = pytest.mark.connected


STUDY_SNAKE = """\
study_spec:
  metrics:
  - metric_id: accuracy
    goal: MAXIMIZE
  parameters:
  - parameter_id: lr
    double_value_spec: {min_value: 0.001, max_value: 0.1}
    scale_type: UNIT_LOG_SCALE
  - parameter_id: units
    integer_value_spec: {min_value: 16, max_value: 64}
trial_job_spec:
  worker_pool_specs:
  - machine_spec: {machine_type: n1-standard-4}
    replica_count: 1
    container_spec:
      image_uri: python:3.12
      command: [python, -m, trainer.task]
"""

STUDY_CAMEL = """\
studySpec:
  metrics: [{metricId: loss, goal: MINIMIZE}]
  parameters:
  - parameterId: units
    discreteValueSpec: {values: [16, 32]}
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {machineType: n1-standard-4}
    replicaCount: 1
    containerSpec: {imageUri: 'python:3.12', command: [python, train.py]}
maxTrialCount: 2
"""

PIPELINE_SHORT = """\
display_name: train-then-upload
job_spec:
  worker_pool_specs:
  - machine_spec: {machine_type: n1-standard-4}
    replica_count: 1
    container_spec: {image_uri: 'python:3.12', command: [python, train.py]}
  base_output_directory: {output_uri_prefix: 'gs://bucket/pipelines/first'}
model_to_upload:
  display_name: trained
  container_spec: {image_uri: 'serving:1'}
labels: {team: ml}
"""


def _json(result: Any) -> Any:
    assert result.code == 0, result.err
    return json.loads(result.out)


def _until(probe: Callable[[], Any], what: str, seconds: float = 20.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"waited {seconds:g} s for {what}")


def _config(tmp_path: Path, text: str, name: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _cancel_then_delete(
    mldiag: Callable[..., Any],
    api: tuple[str, ...],
    group: str,
    what: str,
    resource_id: str,
    cancelled_state: str,
) -> None:
    """``group cancel`` says so and the resource reaches ``cancelled_state``; ``group delete``
    says so and ``describe`` then fails with not_found."""
    cancelled = mldiag(group, "cancel", *api, resource_id)
    assert cancelled.code == 0, cancelled.err
    assert f"asked {what} {resource_id} to cancel" in cancelled.out
    _until(
        lambda: (
            _json(mldiag(group, "describe", *api, resource_id, "--format=json"))["state"]
            == cancelled_state
        ),
        f"the {what} to be cancelled",
    )
    deleted = mldiag(group, "delete", *api, resource_id)
    assert deleted.code == 0, deleted.err
    assert f"deleted {what} {resource_id}" in deleted.out
    missing = mldiag(group, "describe", *api, resource_id)
    assert missing.code == 1
    assert missing.err.startswith("error: ") and "not_found" in missing.err


def test_tuning_jobs_from_create_to_delete(
    training: Training, mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    api = ("--api-url", training.api_url)
    snake = _config(tmp_path, STUDY_SNAKE, "study.yaml")
    created = mldiag(
        "hp-tuning-jobs",
        "create",
        *api,
        "--display-name",
        "lr-search",
        "--config",
        snake,
        "--max-trial-count",
        "3",
        "--algorithm",
        "random",
        "--labels",
        "team=ml",
    )
    assert created.code == 0, created.err
    first_line = created.out.splitlines()[0]
    prefix = "created hyperparameter tuning job projects/default/locations/local/"
    assert first_line.startswith(prefix + "hyperparameterTuningJobs/"), first_line
    first = first_line.split("hyperparameterTuningJobs/")[1].split()[0]

    second = _json(
        mldiag(
            "hp-tuning-jobs",
            "create",
            *api,
            "--region",
            "us-central1",
            "--project",
            "demo",
            "--format",
            "json",
            "--display-name",
            "units-grid",
            "--config",
            _config(tmp_path, STUDY_CAMEL, "grid.yaml"),
            "--algorithm",
            "grid-search",
        )
    )
    assert second["name"].startswith(
        "projects/demo/locations/us-central1/hyperparameterTuningJobs/"
    )
    assert second["studySpec"]["algorithm"] == "GRID_SEARCH"
    assert (second["maxTrialCount"], second["parallelTrialCount"]) == (2, 1)
    assert second["studySpec"]["metrics"] == [{"metricId": "loss", "goal": "MINIMIZE"}]

    table = mldiag("hp-tuning-jobs", "list", *api)
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == ["ID", "DISPLAY", "NAME", "STATE", "TRIALS", "CREATED", "LABELS"]
    assert [line.split()[:2] for line in lines[1:]] == [[first, "lr-search"]]
    assert lines[1].split()[-1] == "team=ml"
    regional = _json(
        mldiag(
            "hp-tuning-jobs",
            "list",
            *api,
            "--region",
            "us-central1",
            "--project",
            "demo",
            "--format",
            "json",
        )
    )
    assert [job["displayName"] for job in regional["hyperparameterTuningJobs"]] == ["units-grid"]

    job = _json(mldiag("hp-tuning-jobs", "describe", *api, first, "--format", "json"))
    assert job["studySpec"]["parameters"][0]["parameterId"] == "lr"
    assert job["studySpec"]["algorithm"] == "RANDOM_SEARCH"
    assert job["maxTrialCount"] == 3
    assert job["trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == "python:3.12"
    described = mldiag("hp-tuning-jobs", "describe", *api, first)
    assert described.code == 0, described.err
    assert "displayName" in described.out and "lr-search" in described.out
    trials = job.get("trials") or []
    assert "lr         DOUBLE   [0.001, 0.1]  UNIT_LOG_SCALE" in described.out
    assert "units      INTEGER  [16, 64]" in described.out
    if trials:  # the controller already asked for its first trial
        row = next(line for line in described.out.splitlines() if line.startswith("1 "))
        assert row.split()[1] == "ACTIVE"
        assert row.split()[2].startswith("lr=")
        assert row.split()[-1] == trials[0]["customJob"].rsplit("/", 1)[1]
    else:
        assert "no trials yet" in described.out
    as_yaml = mldiag("hp-tuning-jobs", "describe", *api, second["name"], "--format", "yaml")
    assert as_yaml.code == 0, as_yaml.err
    assert "displayName: units-grid" in as_yaml.out


def test_a_tuning_job_is_cancelled_then_deleted(
    training: Training, mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    api = ("--api-url", training.api_url)
    config = _config(tmp_path, STUDY_SNAKE, "study.yaml")
    job = _json(
        mldiag(
            "hp-tuning-jobs",
            "create",
            *api,
            "--display-name=c",
            "--config",
            config,
            "--max-trial-count=3",
            "--format=json",
        )
    )
    first = job["name"].rsplit("/", 1)[1]
    # Play the controller's part for the first trial: median stopping ended it.
    _until(
        lambda: training.sql(
            "SELECT 1 FROM tuning_trials WHERE tuning_job_id = $1 AND job_created", first
        ),
        "the first trial's custom job",
    )
    training.sql(
        "UPDATE tuning_trials SET state = 'SUCCEEDED', stopped_early = true, end_time = now(),"
        " final_measurement = $2::jsonb WHERE tuning_job_id = $1 AND number = 0",
        first,
        json.dumps({"stepCount": "3", "metrics": [{"metricId": "accuracy", "value": 0.75}]}),
    )
    described = mldiag("hp-tuning-jobs", "describe", *api, first)
    assert described.code == 0, described.err
    row = next(line for line in described.out.splitlines() if line.startswith("1 "))
    assert row.split()[1] == "SUCCEEDED"
    assert row.split()[3:5] == ["0.75", "yes"]

    running = mldiag("hp-tuning-jobs", "delete", *api, first)
    assert running.code == 1  # not ended: the API refuses, the CLI says why
    assert running.err.startswith("error: ")
    assert "Traceback" not in running.err

    _cancel_then_delete(mldiag, api, "hp-tuning-jobs", "tuning job", first, "JOB_STATE_CANCELLED")


def test_a_refused_tuning_job_names_the_field_and_creates_nothing(
    training: Training, mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    # GRID_SEARCH cannot enumerate a DOUBLE parameter: the API refuses, naming it.
    config = _config(tmp_path, STUDY_SNAKE, "study.yaml")
    refused = mldiag(
        "hp-tuning-jobs",
        "create",
        "--api-url",
        training.api_url,
        "--display-name",
        "bad",
        "--config",
        config,
        "--algorithm",
        "grid",
    )
    assert refused.code == 1
    assert refused.err.startswith("error: invalid_argument: ") or "invalid" in refused.err
    assert "lr" in refused.err
    assert "Traceback" not in refused.err
    listed = _json(mldiag("hp-tuning-jobs", "list", "--api-url", training.api_url, "--format=json"))
    assert listed["hyperparameterTuningJobs"] == []


def test_training_pipelines_from_create_to_delete(
    training: Training, mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    api = ("--api-url", training.api_url)
    config = _config(tmp_path, PIPELINE_SHORT, "pipeline.yaml")
    created = mldiag("training-pipelines", "create", *api, "--config", config)
    assert created.code == 0, created.err
    first_line = created.out.splitlines()[0]
    assert first_line.startswith(
        "created training pipeline projects/default/locations/local/trainingPipelines/"
    ), first_line
    pipeline_id = first_line.split("trainingPipelines/")[1].split()[0]

    pipeline = _json(mldiag("training-pipelines", "describe", *api, pipeline_id, "--format=json"))
    assert pipeline["displayName"] == "train-then-upload"
    assert pipeline["trainingTaskDefinition"].endswith("/custom_task_1.0.0.yaml")
    assert pipeline["modelToUpload"]["displayName"] == "trained"
    assert pipeline["labels"] == {"team": "ml"}
    described = mldiag("training-pipelines", "describe", *api, pipeline_id)
    assert described.code == 0, described.err
    assert "trainingTaskDefinition" in described.out

    table = mldiag("training-pipelines", "list", *api)
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == ["ID", "DISPLAY", "NAME", "STATE", "MODEL", "CREATED", "LABELS"]
    assert lines[1].split()[:2] == [pipeline_id, "train-then-upload"]
    assert lines[1].split()[-1] == "team=ml"
    limited = _json(mldiag("training-pipelines", "list", *api, "--limit=1", "--format=json"))
    assert len(limited["trainingPipelines"]) == 1

    _cancel_then_delete(
        mldiag,
        api,
        "training-pipelines",
        "training pipeline",
        pipeline_id,
        "PIPELINE_STATE_CANCELLED",
    )

    bad = _config(tmp_path, PIPELINE_SHORT.replace("n1-standard-4", "no-such-machine"), "bad.yaml")
    refused = mldiag("training-pipelines", "create", *api, "--config", bad)
    assert refused.code == 1
    assert refused.err.startswith("error: ")
    assert "machine" in refused.err.lower()


def test_models_upload_versions_aliases_and_deletes(
    training: Training, mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    api = ("--api-url", training.api_url)
    artifacts = training.storage / "exported" / "resnet"
    artifacts.mkdir(parents=True)
    (artifacts / "model.pkl").write_bytes(b"weights")
    upload = (
        "models",
        "upload",
        *api,
        "--display-name",
        "resnet",
        "--artifact-uri",
        f"file://{artifacts}",
        "--container-image-uri",
        "serving:1",
    )
    first = mldiag(*upload, "--labels", "team=ml")
    assert first.code == 0, first.err
    line = first.out.splitlines()[0]
    assert line.startswith("uploaded model projects/default/locations/local/models/"), line
    assert line.endswith(" version 1")
    model_id = line.split("models/")[1].split()[0]

    second = _json(
        mldiag(*upload, "--parent-model", model_id, "--version-aliases", "prod", "--format=json")
    )
    assert second["model"].endswith(f"/models/{model_id}")
    assert second["modelVersionId"] == "2"

    named = mldiag(*upload, "--model-id", "my-model", "--version-aliases=candidate")
    assert named.code == 0, named.err
    assert "/models/my-model version 1" in named.out

    _versions_and_deletes(training, mldiag, model_id, artifacts)
    refused = mldiag(*upload, "--version-aliases", "Not An Alias")
    assert refused.code == 1
    assert "alias" in refused.err.lower()
    assert "Traceback" not in refused.err


def _versions_and_deletes(
    training: Training, mldiag: Callable[..., Any], model_id: str, artifacts: Path
) -> None:
    api = ("--api-url", training.api_url)
    default = _json(mldiag("models", "describe", *api, model_id, "--format=json"))
    assert default["versionId"] == "1"
    assert default["artifactUri"] == f"file://{artifacts}"
    assert default["containerSpec"]["imageUri"] == "serving:1"
    assert "default" in default["versionAliases"]
    by_alias = mldiag("models", "describe", *api, f"{model_id}@prod", "--format=yaml")
    assert by_alias.code == 0, by_alias.err
    assert 'versionId: "2"' in by_alias.out or "versionId: 2" in by_alias.out
    by_number = _json(mldiag("models", "describe", *api, f"{model_id}@2", "--format=json"))
    assert by_number["versionAliases"] == ["prod"]

    table = mldiag("models", "list", *api, "--sort-by", "displayName")
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split()[:4] == ["MODEL", "ID", "DISPLAY", "NAME"]
    assert sorted(line.split()[0] for line in lines[1:]) == sorted([model_id, "my-model"])

    versions = mldiag("models", "versions", *api, model_id)
    assert versions.code == 0, versions.err
    rows = [line.split() for line in versions.out.splitlines()[1:]]
    assert sorted((row[0], row[1]) for row in rows) == [("1", "default"), ("2", "prod")]
    same = _json(mldiag("models", "list-version", *api, model_id, "--format=json"))
    assert sorted(v["versionId"] for v in same["models"]) == ["1", "2"]

    dropped = mldiag("models", "delete-version", *api, f"{model_id}@2")
    assert dropped.code == 0, dropped.err
    assert f"deleted version 2 of model {model_id}" in dropped.out
    gone = mldiag("models", "describe", *api, f"{model_id}@2")
    assert gone.code == 1
    assert "not_found" in gone.err

    deleted = mldiag("models", "delete", *api, model_id)
    assert deleted.code == 0, deleted.err
    assert f"deleted model {model_id}" in deleted.out
    missing = mldiag("models", "describe", *api, model_id)
    assert missing.code == 1
    assert missing.err.startswith("error: ") and "not_found" in missing.err
