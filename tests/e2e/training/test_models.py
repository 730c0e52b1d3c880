"""The model registry through the whole platform (`mldiag up`, the one API address), driven
by the real ``google-cloud-aiplatform`` SDK unchanged: uploads, a second version, lists,
``@version`` and ``@alias`` names, the versioning registry, aliases and deletes; the SDK
gets Google's exception for an upload without files.
"""

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stacks import Stack, running_stack

pytestmark = pytest.mark.e2e

BUCKET = "mldiag-e2e"
IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-3:latest"

SDK_CLIENT = Path(__file__).parents[2] / "training" / "models" / "vertex_sdk_client.py"
"""The SDK user's program (shared with the service-alone test in tests/training/models)."""


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack("mldiag-models-e2e-") as running:
        yield running


def _vertex_python() -> str | None:
    named = os.environ.get("MLDIAG_TEST_VERTEX_SDK_PYTHON")
    if named:
        return named
    local = Path(__file__).parents[3] / ".ci-venvs" / "vertex-sdk" / "bin" / "python"
    return str(local) if local.exists() else None


@pytest.fixture(scope="module")
def prefix(stack: Stack) -> str:
    """A folder of the bucket holding two model versions' files and an empty folder."""
    name = f"models-{uuid.uuid4().hex[:6]}"
    root = stack.home / "storage" / "gs" / BUCKET / name
    for version in ("v1", "v2"):
        (root / version).mkdir(parents=True)
        (root / version / "model.joblib").write_bytes(b"weights " + version.encode())
    (root / "empty").mkdir()
    return name


@pytest.fixture(scope="module")
def seen(stack: Stack, prefix: str) -> dict[str, Any]:
    python = _vertex_python()
    if python is None:
        pytest.skip("set MLDIAG_TEST_VERTEX_SDK_PYTHON to a Python with google-cloud-aiplatform")
    done = subprocess.run(  # fixed argument list
        [python, str(SDK_CLIENT), stack.api, stack.token, f"gs://{BUCKET}/{prefix}", IMAGE],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, f"the Vertex SDK script failed:\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_sdk_uploads_models_and_versions(seen: dict[str, Any]) -> None:
    name, version, aliases = seen["first"]
    assert name.startswith("projects/default/locations/us-central1/models/")
    assert (version, aliases) == ("1", ["default"])
    assert seen["second"] == [name, "2", ["default"]]
    assert seen["third"] == ["3", []]  # is_default_version=False
    assert seen["default"] == "2"
    assert name in seen["listed"] and name in seen["listedFiltered"]
    assert seen["atOne"][:2] == ["1", "e2e-model"]
    assert seen["atOne"][2].endswith("/v1")


def test_the_sdk_reads_versions_and_moves_aliases(seen: dict[str, Any]) -> None:
    assert seen["versions"] == ["1", "2", "3"]
    assert seen["golden"] == "1"
    assert seen["goldenInfo"] == ["golden"]
    assert seen["goldenGone"] == "NotFound"


def test_the_sdk_deletes_and_hears_refusals(seen: dict[str, Any]) -> None:
    kind, message = seen["noFiles"]
    assert kind == "BadRequest"
    assert "model.artifactUri" in message and "holds no files" in message
    assert seen["afterDelete"] == ["1", "2"]
    assert seen["updated"] == ["renamed", "iris, twice", {"stage": "prod"}]
    assert seen["deleted"] == "NotFound"


def test_plain_http_reads_both_route_forms_with_an_encoded_at(stack: Stack, prefix: str) -> None:
    """A model uploaded over plain HTTP reads back under the long and the short form, with
    the ``@`` sent encoded."""
    body = {
        "model": {
            "displayName": "plain-http",
            "artifactUri": f"gs://{BUCKET}/{prefix}/v1",
            "containerSpec": {"imageUri": IMAGE},
        }
    }
    upload = httpx.post(f"{stack.api}/v1/models:upload", json=body, headers=stack.auth, timeout=30)
    assert upload.status_code == 200, upload.text
    name = upload.json()["response"]["model"]
    model_id = name.rsplit("/", 1)[-1]
    long_form = httpx.get(
        f"{stack.api}/v1/projects/default/locations/local/models/{model_id}%401",
        headers=stack.auth,
        timeout=30,
    )
    assert long_form.status_code == 200, long_form.text
    short = httpx.get(f"{stack.api}/v1/models/{model_id}", headers=stack.auth, timeout=30)
    assert short.json() == long_form.json()
    assert short.json()["versionAliases"] == ["default"]
