"""Training pipelines through the whole platform, as Vertex users run them: `mldiag up`, the
one API address, the real executor running real processes, and the real
``google-cloud-aiplatform`` SDK (its own venv):

- ``CustomContainerTrainingJob(...).run(...)`` returns the ``Model`` its job wrote to
  ``AIP_MODEL_DIR``, readable as ``Model("<id>@1")``, with the pipeline and job as lineage;
- ``CustomPythonPackageTrainingJob`` installs an sdist from ``gs://`` and does the same;
- a job that writes no model fails its pipeline, and the SDK raises with the reason.
"""

import io
import json
import os
import subprocess
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stacks import Stack, running_stack

pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent
SCENARIOS = ("container", "package", "no_model")

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
