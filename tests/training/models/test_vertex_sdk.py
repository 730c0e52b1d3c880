"""The real ``google-cloud-aiplatform`` SDK (REST transport, in its own venv) against the
training service alone: ``Model.upload`` (and a version with ``parent_model``), ``list``,
``Model("<id>@<version or alias>")``, ``update``, the versioning registry's versions and aliases,
``delete``, and its exception for an upload without files. The whole stack drives the same
program in ``tests/e2e/training/test_models.py``."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ApiTokens
from mldiag_training.app import create_app
from mldiag_training.settings import TrainingSettings
from support import served_in_thread

# e2e: it starts the SDK's own interpreter (importing aiplatform alone takes seconds).
pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent
IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-3:latest"


def _vertex_python() -> str:
    named = os.environ.get("MLDIAG_TEST_VERTEX_SDK_PYTHON")
    if named:
        return named
    local = Path(__file__).parents[3] / ".ci-venvs" / "vertex-sdk" / "bin" / "python"
    if not local.exists():
        pytest.skip("set MLDIAG_TEST_VERTEX_SDK_PYTHON to a Python with google-cloud-aiplatform")
    return str(local)


def test_the_vertex_sdk_uploads_versions_aliases_lists_and_deletes(
    training_settings: TrainingSettings, api_tokens: ApiTokens
) -> None:
    python = _vertex_python()
    root = Path(training_settings.storage.url.removeprefix("file://")) / "gs" / "bucket" / "m"
    for version in ("v1", "v2"):
        (root / version).mkdir(parents=True)
        (root / version / "model.joblib").write_bytes(version.encode())
    (root / "empty").mkdir()
    with served_in_thread(create_app(training_settings)) as base_url:
        done = subprocess.run(  # fixed argument list
            [
                python,
                str(HERE / "vertex_sdk_client.py"),
                base_url,
                api_tokens.editor,
                "gs://bucket/m",
                IMAGE,
            ],
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
    assert done.returncode == 0, f"the SDK script failed:\n{done.stdout}\n{done.stderr}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    name, version, aliases = seen["first"]
    assert name.startswith("projects/default/locations/us-central1/models/")
    assert (version, aliases) == ("1", ["default"])
    assert seen["second"] == [name, "2", ["default"]]
    assert seen["third"] == ["3", []]  # is_default_version=False leaves the default alone
    assert seen["default"] == "2"
    assert seen["listed"] == [name] and seen["listedFiltered"] == [name]
    assert seen["atOne"] == ["1", "e2e-model", "gs://bucket/m/v1"]
    assert seen["versions"] == ["1", "2", "3"]
    assert seen["golden"] == "1"
    assert seen["goldenInfo"] == ["golden"]
    assert seen["goldenGone"] == "NotFound"
    # api_core picks the class by HTTP status: a 400 is BadRequest.
    kind, message = seen["noFiles"]
    assert kind == "BadRequest"
    assert "model.artifactUri" in message and "holds no files" in message
    assert seen["afterDelete"] == ["1", "2"]
    assert seen["updated"] == ["renamed", "iris, twice", {"stage": "prod"}]
    assert seen["deleted"] == "NotFound"
