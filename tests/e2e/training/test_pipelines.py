"""Training pipelines through the whole platform, as Vertex users run them: `mldiag up`, the
one API address, the real executor running real processes, and the real
``google-cloud-aiplatform`` SDK (its own venv):

- ``CustomContainerTrainingJob(...).run(...)`` returns the ``Model`` its job wrote to
  ``AIP_MODEL_DIR``, readable as ``Model("<id>@1")``, with the pipeline and job as lineage;
- ``CustomPythonPackageTrainingJob`` installs an sdist from ``gs://`` and does the same;
- a job that writes no model fails its pipeline, and the SDK raises with the reason;
- the SDK cancels a pipeline (and so its job) and lists it;
- a tuning task (over REST: the SDK has no class for it) imports its best trial's model.
"""

import io
import json
import os
import subprocess
import tarfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stacks import Stack, running_stack

pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent
SCENARIOS = ("container", "package", "no_model", "cancel")
TERMINAL = {"PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED", "PIPELINE_STATE_CANCELLED"}

TRAINER = """
import os, sys
model_dir = os.environ["AIP_MODEL_DIR"]
os.makedirs(model_dir, exist_ok=True)
with open(os.path.join(model_dir, "args.json"), "w") as f:
    f.write(__import__("json").dumps(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack("mldiag-pipelines-e2e-") as running:
        yield running


def _storage(stack: Stack, uri: str) -> Path:
    """Where ``gs://<bucket>/<path>`` lives in the embedded file store."""
    return stack.home / "storage" / "gs" / uri.removeprefix("gs://")


def _put_sdist(stack: Stack) -> None:
    """A tiny setuptools sdist whose ``trainer.task`` writes its args into AIP_MODEL_DIR, where
    the executor resolves ``gs://mldiag-staging/packages/trainer-0.1.tar.gz``."""
    files = {
        "setup.py": "from setuptools import setup\n"
        "setup(name='trainer', version='0.1', packages=['trainer'])\n",
        "trainer/__init__.py": "",
        "trainer/task.py": textwrap.dedent(TRAINER),
        "PKG-INFO": "Metadata-Version: 1.0\nName: trainer\nVersion: 0.1\n",
    }
    path = _storage(stack, "gs://mldiag-staging/packages/trainer-0.1.tar.gz")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"trainer-0.1/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def vertex(stack: Stack) -> dict[str, Any]:
    """What the real SDK saw, scenario by scenario (one process runs them all)."""
    python = os.environ.get("MLDIAG_TEST_VERTEX_SDK_PYTHON")
    local = Path(__file__).parents[3] / ".ci-venvs" / "vertex-sdk" / "bin" / "python"
    python = python or (str(local) if local.exists() else None)
    if python is None:
        pytest.skip("set MLDIAG_TEST_VERTEX_SDK_PYTHON to a Python with google-cloud-aiplatform")
    _put_sdist(stack)
    done = subprocess.run(  # fixed argument list
        [python, str(HERE / "vertex_pipelines_client.py"), stack.api, stack.token, *SCENARIOS],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, f"the Vertex SDK script failed:\n{done.stdout}\n{done.stderr}"
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def _get(stack: Stack, name: str) -> dict[str, Any]:
    answer = httpx.get(f"{stack.api}/v1/{name}", headers=stack.auth, timeout=30)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_a_container_training_job_returns_the_model_it_wrote(
    stack: Stack, vertex: dict[str, Any]
) -> None:
    seen = vertex["container"]
    pipeline, model = seen["pipeline"], seen["model"]
    assert pipeline["state"] == "PIPELINE_STATE_SUCCEEDED"
    assert model["name"].startswith("projects/default/locations/us-central1/models/")
    assert model["versionId"] == model["againVersionId"] == "1"
    assert model["againName"] == model["name"]
    assert model["displayName"] == "e2e-container-model"
    assert model["uri"].startswith("gs://mldiag-staging/aiplatform-custom-training-")
    assert model["uri"].endswith("/model/")
    job = _get(stack, pipeline["backingCustomJob"])
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    written = (_storage(stack, model["uri"]) / "model.txt").read_text()
    assert written == f"weights from {job['name'].rsplit('/', 1)[-1]}"
    version = _get(stack, f"{model['name']}@1")
    assert version["lineage"]["trainingPipeline"] == pipeline["name"]
    assert version["lineage"]["customJob"] == pipeline["backingCustomJob"]
    assert version["lineage"]["run"] == job["name"].rsplit("/", 1)[-1]


def test_a_python_package_training_job_returns_its_model(
    stack: Stack, vertex: dict[str, Any]
) -> None:
    seen = vertex["package"]
    assert seen["pipeline"]["state"] == "PIPELINE_STATE_SUCCEEDED"
    model = seen["model"]
    assert model["versionId"] == "1"
    assert model["displayName"] == "e2e-package-model"
    args = json.loads((_storage(stack, model["uri"]) / "args.json").read_text())
    assert args == ["--units", "64"]


def test_a_job_without_a_model_fails_its_pipeline_by_name(vertex: dict[str, Any]) -> None:
    seen = vertex["no_model"]
    assert seen["raised"] == "RuntimeError"
    assert seen["pipeline"]["state"] == "PIPELINE_STATE_FAILED"
    assert "no model artifacts in AIP_MODEL_DIR (gs://mldiag-staging/" in seen["message"]


def test_the_sdk_cancels_a_pipeline_and_its_job(stack: Stack, vertex: dict[str, Any]) -> None:
    seen = vertex["cancel"]
    assert seen["state"] == "PIPELINE_STATE_CANCELLED"
    assert seen["listed"] is True
    job = _get(stack, seen["pipeline"]["backingCustomJob"])
    assert job["state"] == "JOB_STATE_CANCELLED"


TRIAL = (
    "import os, sys, mldiag; x = float(sys.argv[-1].split('=')[1]); "
    "d = os.environ['AIP_MODEL_DIR']; os.makedirs(d, exist_ok=True); "
    "open(os.path.join(d, 'x.txt'), 'w').write(str(x)); "
    "mldiag.report_hyperparameter_tuning_metric('loss', (x - 2) ** 2, global_step=1)"
)
"""A trial: writes its x as its model and reports loss (x - 2)², through the replica's
hypertune metric file."""


def test_a_tuning_pipeline_imports_the_best_trials_model(stack: Stack) -> None:
    base = "gs://mldiag-staging/tuning-pipeline"
    pool = {
        "machine_spec": {"machine_type": "e2-standard-4"},
        "replica_count": 1.0,
        "container_spec": {"image_uri": "python", "command": ["python", "-c", TRIAL]},
    }
    body = {
        "displayName": "tuned-pipeline",
        "trainingTaskDefinition": "gs://google-cloud-aiplatform/schema/trainingjob/definition/"
        "hyperparameter_tuning_task_1.0.0.yaml",
        "trainingTaskInputs": {
            "study_spec": {
                "metrics": [{"metric_id": "loss", "goal": "MINIMIZE"}],
                "parameters": [
                    {"parameter_id": "x", "discrete_value_spec": {"values": [1.0, 2.0, 4.0]}}
                ],
                "algorithm": "GRID_SEARCH",
            },
            "max_trial_count": 3.0,
            "parallel_trial_count": 3.0,
            "trial_job_spec": {
                "worker_pool_specs": [pool],
                "base_output_directory": {"output_uri_prefix": base},
            },
        },
        "modelToUpload": {"displayName": "best-x", "containerSpec": {"imageUri": "serving:1"}},
    }
    url = f"{stack.api}/v1/projects/default/locations/us-central1/trainingPipelines"
    created = httpx.post(url, json=body, headers=stack.auth, timeout=30)
    assert created.status_code == 200, created.text
    name = created.json()["name"]
    deadline = time.monotonic() + 180
    while (pipeline := _get(stack, name))["state"] not in TERMINAL:
        assert time.monotonic() < deadline, f"{name} still {pipeline['state']}"
        time.sleep(0.5)
    assert pipeline["state"] == "PIPELINE_STATE_SUCCEEDED", pipeline
    tuning = _get(stack, pipeline["trainingTaskMetadata"]["backingHyperparameterTuningJob"])
    assert tuning["state"] == "JOB_STATE_SUCCEEDED"
    [best] = [t for t in tuning["trials"] if t["parameters"][0]["value"] == 2.0]
    version = _get(stack, f"{pipeline['modelToUpload']['name']}@1")
    assert version["artifactUri"] == f"{base}/{best['id']}/model/"
    assert (_storage(stack, version["artifactUri"]) / "x.txt").read_text() == "2.0"
    assert version["lineage"]["customJob"] == best["customJob"]
    assert version["lineage"]["hyperparameterTuningJob"] == tuning["name"]
