"""The real ``google-cloud-aiplatform`` SDK (REST transport, in its own venv) against the
training service alone: submit, get, list, cancel, delete, and its exceptions for our errors. The
whole stack (replicas running) is driven by ``tests/e2e/training``."""

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


def _vertex_python() -> str:
    named = os.environ.get("MLDIAG_TEST_VERTEX_SDK_PYTHON")
    if named:
        return named
    local = Path(__file__).parents[3] / ".ci-venvs" / "vertex-sdk" / "bin" / "python"
    if not local.exists():
        pytest.skip("set MLDIAG_TEST_VERTEX_SDK_PYTHON to a Python with google-cloud-aiplatform")
    return str(local)


def test_the_vertex_sdk_submits_reads_lists_cancels_and_deletes(
    training_settings: TrainingSettings, api_tokens: ApiTokens
) -> None:
    python = _vertex_python()
    with served_in_thread(create_app(training_settings)) as base_url:
        done = subprocess.run(  # fixed argument list
            [python, str(HERE / "vertex_sdk_client.py"), base_url, api_tokens.editor],
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
    assert done.returncode == 0, f"the SDK script failed:\n{done.stdout}\n{done.stderr}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["name"].startswith("projects/default/locations/us-central1/customJobs/")
    assert seen["state"] == "JOB_STATE_QUEUED"
    assert seen["fetched"] == {
        "state": "JOB_STATE_QUEUED",
        "labels": {"team": "sdk"},
        "accelerator": "NVIDIA_TESLA_T4",
        "replicas": 1,
        "timeout": 3600,
        "output": seen["fetched"]["output"],
    }
    assert seen["fetched"]["output"].startswith("gs://mldiag-staging/aiplatform-custom-job-")
    assert seen["listed"] == [seen["name"]]
    assert seen["after_cancel"] in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    # api_core picks the class by HTTP status alone: a 400 is BadRequest (InvalidArgument's
    # parent), a 501 MethodNotImplemented, whatever google.rpc status the body names.
    assert seen["unknown_machine"]["exception"] == "BadRequest"
    assert "machineType" in seen["unknown_machine"]["message"]
    assert seen["network"]["exception"] == "MethodNotImplemented"
    assert "jobSpec.network" in seen["network"]["message"]
    assert seen["deleted"] is True
