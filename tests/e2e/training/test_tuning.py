"""Hyperparameter tuning jobs through the whole platform, as Vertex users run them: `mldiag
up`, the one API address, the real executor running the trials.

The real ``google-cloud-aiplatform`` SDK (in its own venv) runs
``HyperparameterTuningJob(...).run()``; each trial is a script that reports through
``cloudml-hypertune`` unchanged (run with the SDK venv's interpreter, mapped as an image in
the executor's image table), and ``job.trials`` shows every trial's parameters and final
measurement.
"""

import json
import math
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stacks import Stack, running_stack

pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
IMAGE = "vertex-python"
"""The image the trials ask for: the Vertex SDK venv's interpreter (it has hypertune)."""


def _vertex_python() -> str | None:
    named = os.environ.get("MLDIAG_TEST_VERTEX_SDK_PYTHON")
    if named:
        return named
    local = Path(__file__).parents[3] / ".ci-venvs" / "vertex-sdk" / "bin" / "python"
    return str(local) if local.exists() else None


@pytest.fixture(scope="module")
def python() -> str:
    found = _vertex_python()
    if found is None:
        pytest.skip("set MLDIAG_TEST_VERTEX_SDK_PYTHON to a Python with google-cloud-aiplatform")
    return found


@pytest.fixture(scope="module")
def stack(python: str) -> Iterator[Stack]:
    images = json.dumps({IMAGE: python})
    with running_stack("mldiag-tuning-e2e-", {"MLDIAG_EXECUTOR_IMAGES": images}) as running:
        yield running


@pytest.fixture(scope="module")
def study(stack: Stack, python: str) -> dict[str, Any]:
    """What the SDK saw of a 4-trial study, 2 at a time."""
    done = subprocess.run(  # fixed argument list
        [
            python,
            str(WORKLOADS / "tuning_vertex_client.py"),
            stack.api,
            stack.token,
            IMAGE,
            str(WORKLOADS / "tuning_trial.py"),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, f"the Vertex SDK script failed:\n{done.stdout}\n{done.stderr}"
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_the_vertex_sdk_runs_a_study_to_success(study: dict[str, Any]) -> None:
    assert study["state"] == "JOB_STATE_SUCCEEDED", study
    assert study["fetchedState"] == "JOB_STATE_SUCCEEDED"
    assert study["listed"] is True
    assert study["name"].startswith(
        "projects/default/locations/us-central1/hyperparameterTuningJobs/"
    )


def test_every_trial_shows_its_parameters_and_final_measurement(study: dict[str, Any]) -> None:
    trials = study["trials"]
    assert [t["id"] for t in trials] == ["1", "2", "3", "4"]
    for trial in trials:
        assert trial["state"] == "SUCCEEDED", trial
        lr, layers = trial["parameters"]["lr"], trial["parameters"]["layers"]
        assert 0.001 <= lr <= 0.1
        assert layers in (1, 2, 3, 4)
        assert trial["step"] == 3  # the loss falls by step: the last is also the best
        # hypertune's value came through unchanged: the trial's formula at step 3.
        expected = math.log10(lr / 0.01) ** 2 + 1.0 / layers + 1.0 / 3
        assert trial["final"]["loss"] == pytest.approx(expected, rel=1e-9)
        assert "/customJobs/" in trial["customJob"]
