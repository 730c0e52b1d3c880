"""``mldiag jobs`` against a real training service (real NATS, PostgreSQL and file://
storage), invoked in-process as a person or a script would."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sdk.cli.training_service import Training

pytestmark = pytest.mark.connected

CONTAINER = "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=python:3.12"


def _json(result: Any) -> Any:
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_create_list_describe_cancel(training: Training, mldiag: Callable[..., Any]) -> None:
    api = ("--api-url", training.api_url)
    created = mldiag(
        "jobs", "create", *api, "--display-name", "first", CONTAINER, "--labels", "team=ml"
    )
    assert created.code == 0, created.err
    first_line = created.out.splitlines()[0]
    assert first_line.startswith("created custom job projects/default/locations/local/customJobs/")
    assert first_line.endswith("(JOB_STATE_QUEUED)")
    first = first_line.split("customJobs/")[1].split()[0]

    second = _json(
        mldiag(
            "jobs",
            "create",
            *api,
            "--format",
            "json",
            "--region",
            "us-central1",
            "--project",
            "demo",
            "--display-name",
            "second",
            CONTAINER + ",replica-count=1,accelerator-type=NVIDIA_TESLA_T4",
            "--worker-pool-spec=machine-type=n1-standard-4,replica-count=2,"
            "container-image-uri=python:3.12",
            "--command=python,-m,trainer",
            "--args=--epochs,3",
            "--env-vars=SEED=7",
            "--timeout=2h",
        )
    )
    assert second["name"].startswith("projects/demo/locations/us-central1/customJobs/")
    pools = second["jobSpec"]["workerPoolSpecs"]
    assert pools[0]["machineSpec"]["acceleratorType"] == "NVIDIA_TESLA_T4"
    assert pools[1]["replicaCount"] == "2"
    assert pools[1]["containerSpec"]["command"] == ["python", "-m", "trainer"]
    assert pools[1]["containerSpec"]["args"] == ["--epochs", "3"]
    assert pools[1]["containerSpec"]["env"] == [{"name": "SEED", "value": "7"}]
    assert second["jobSpec"]["scheduling"]["timeout"] == "7200s"

    table = mldiag("jobs", "list", *api)
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == ["JOB", "ID", "DISPLAY", "NAME", "STATE", "CREATED", "LABELS"]
    assert lines[1].split()[:3] == [first, "first", "JOB_STATE_QUEUED"]
    assert lines[1].split()[-1] == "team=ml"
    regional = _json(
        mldiag(
            "jobs", "list", *api, "--region", "us-central1", "--project", "demo", "--format", "json"
        )
    )
    assert [job["displayName"] for job in regional["customJobs"]] == ["second"]

    described = mldiag("jobs", "describe", *api, first)
    assert described.code == 0, described.err
    assert "displayName" in described.out and "first" in described.out
    as_yaml = mldiag("jobs", "describe", *api, second["name"], "--format", "yaml")
    assert as_yaml.code == 0, as_yaml.err
    assert "displayName: second" in as_yaml.out

    cancelled = mldiag("jobs", "cancel", *api, first)
    assert cancelled.code == 0, cancelled.err
    assert f"asked job {first} to cancel" in cancelled.out
    state = training.sql("SELECT cancel_requested, state FROM custom_jobs WHERE job_id = $1", first)
    assert state[0]["cancel_requested"] or state[0]["state"] != "JOB_STATE_QUEUED"

    missing = mldiag("jobs", "describe", *api, "123")
    assert missing.code == 1
    assert missing.err.startswith("error: not_found: ")


def test_bad_input_exits_2_with_a_clear_message(
    training: Training, mldiag: Callable[..., Any]
) -> None:
    api = ("--api-url", training.api_url)
    unknown = mldiag("jobs", "create", *api, "--display-name", "x", CONTAINER + ",gpus=2")
    assert unknown.code == 2
    assert "unknown key 'gpus'" in unknown.err
    assert mldiag("jobs", "create", *api, "--display-name", "x").code == 2
    refused = mldiag(
        "jobs",
        "create",
        *api,
        "--display-name",
        "x",
        "--worker-pool-spec=machine-type=no-such-machine,container-image-uri=python:3.12",
    )
    assert refused.code == 1  # the API refuses it, naming the field
    assert refused.err.startswith("error: ")
    assert "machineType" in refused.err or "machine" in refused.err
    assert training.sql("SELECT count(*) AS n FROM custom_jobs")[0]["n"] == 0


def test_a_local_package_is_packed_uploaded_and_named(
    training: Training, mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    source = tmp_path / "src" / "trainer"
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("")
    (source / "task.py").write_text("print('training')\n")
    job = _json(
        mldiag(
            "jobs",
            "create",
            "--api-url",
            training.api_url,
            "--format",
            "json",
            "--display-name",
            "packaged",
            "--worker-pool-spec=machine-type=n1-standard-4,executor-image-uri=python:3.12,"
            f"python-module=trainer.task,local-package-path={tmp_path / 'src'}",
            "--python-package-uris=gs://bucket/extra-1.0.tar.gz",
        )
    )
    task = job["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    uploaded, extra = task["packageUris"]
    assert extra == "gs://bucket/extra-1.0.tar.gz"
    assert uploaded.startswith(f"file://{training.storage.resolve()}/packages/")
    assert uploaded.endswith("/trainer-0.0.0-py3-none-any.whl")
    assert Path(uploaded.removeprefix("file://")).stat().st_size > 0
    assert task["pythonModule"] == "trainer.task"

    wrong = mldiag(
        "jobs",
        "create",
        "--api-url",
        training.api_url,
        "--display-name",
        "packaged",
        "--worker-pool-spec=executor-image-uri=python:3.12,"
        f"python-module=trainer.missing,local-package-path={tmp_path / 'src'}",
    )
    assert wrong.code == 2
    assert "python-module trainer.missing is not in" in wrong.err


def test_logs_and_waiting_for_the_end(training: Training, mldiag: Callable[..., Any]) -> None:
    api = ("--api-url", training.api_url)
    ending = training.end_when_created("JOB_STATE_SUCCEEDED", b"epoch 1\nepoch 2\n")
    followed = mldiag("jobs", "create", *api, "--display-name", "f", CONTAINER, "--follow")
    ending.join()
    assert followed.code == 0, followed.err
    assert "epoch 1\nepoch 2\n" in followed.out
    assert "ended: JOB_STATE_SUCCEEDED" in followed.err
    job = followed.out.split("customJobs/")[1].split()[0]

    logs = mldiag("jobs", "logs", *api, job)
    assert (logs.code, logs.out) == (0, "epoch 1\nepoch 2\n")
    tail = mldiag("jobs", "logs", *api, job, "--stream", "stdout", "--tail", "8")
    assert tail.out == "epoch 2\n"
    streamed = mldiag("jobs", "stream-logs", *api, job)
    assert (streamed.code, streamed.out) == (0, "epoch 1\nepoch 2\n")
    bad = mldiag("jobs", "logs", *api, job, "--replica", "workerpool3-0")
    assert bad.code == 1
    assert "replica_not_found" in bad.err

    failing = training.end_when_created("JOB_STATE_FAILED")
    waited = mldiag("jobs", "create", *api, "--display-name", "w", CONTAINER, "--wait")
    failing.join()
    assert waited.code == 1
    assert "ended: JOB_STATE_FAILED" in waited.err
