"""``mldiag jobs create``'s flags and config file made into a CustomJob (no API needed), and
local package directories packed into wheels."""

import argparse
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from mldiag.cli import build_parser
from mldiag.cli.common import UsageError
from mldiag.cli.jobs import (
    POOL_KEYS,
    build_job_request,
    parse_key_values,
    parse_timeout,
    parse_worker_pool_spec,
)
from mldiag.jobs import parse_job_name
from mldiag.packaging import PackagingError, build_wheel


def _create_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["jobs", "create", "--display-name", "demo", *argv])


def test_every_gcloud_key_lands_in_its_field() -> None:
    pool = parse_worker_pool_spec(
        "machine-type=a2-highgpu-1g,replica-count=3,accelerator-type=NVIDIA_TESLA_A100,"
        "accelerator-count=2,container-image-uri=python:3.11,disk-type=pd-ssd,disk-size=200"
    )
    assert pool.spec == {
        "machineSpec": {
            "machineType": "a2-highgpu-1g",
            "acceleratorType": "NVIDIA_TESLA_A100",
            "acceleratorCount": 2,
        },
        "replicaCount": "3",
        "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 200},
        "containerSpec": {"imageUri": "python:3.11"},
    }
    assert pool.local_package_path is None
    package = parse_worker_pool_spec(
        "machine-type=e2-standard-4,executor-image-uri=python:3.11,"
        "python-module=trainer.task,local-package-path=./src"
    )
    assert package.spec == {
        "machineSpec": {"machineType": "e2-standard-4"},
        "replicaCount": "1",
        "pythonPackageSpec": {
            "executorImageUri": "python:3.11",
            "pythonModule": "trainer.task",
            "packageUris": [],
        },
    }
    assert package.local_package_path == Path("src")
    covered = {
        "machine-type",
        "replica-count",
        "accelerator-type",
        "accelerator-count",
        "container-image-uri",
        "executor-image-uri",
        "python-module",
        "local-package-path",
        "disk-type",
        "disk-size",
    }
    assert set(POOL_KEYS) == covered


def test_an_accelerator_type_alone_counts_one_and_empty_skips_a_position() -> None:
    pool = parse_worker_pool_spec("accelerator-type=NVIDIA_L4,container-image-uri=img")
    assert pool.spec["machineSpec"] == {"acceleratorType": "NVIDIA_L4", "acceleratorCount": 1}
    assert parse_worker_pool_spec("").spec == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("machine-type=x,gpu=1,container-image-uri=i", "unknown key 'gpu'; the keys are"),
        ("machine-type", "expected KEY=VALUE"),
        ("container-image-uri=a,container-image-uri=b", "container-image-uri is given twice"),
        ("container-image-uri=", "container-image-uri has no value"),
        ("machine-type=x", "give one of container-image-uri"),
        ("container-image-uri=a,executor-image-uri=b", "give one of container-image-uri"),
        ("container-image-uri=a,python-module=m", "go with executor-image-uri"),
        ("container-image-uri=a,local-package-path=.", "go with executor-image-uri"),
        ("executor-image-uri=a", "executor-image-uri needs python-module"),
        ("container-image-uri=a,replica-count=0", "replica-count=0: expected at least 1"),
        ("container-image-uri=a,replica-count=two", "replica-count=two: expected an integer"),
        ("container-image-uri=a,accelerator-count=2", "accelerator-count needs accelerator-type"),
        (
            "container-image-uri=a,accelerator-type=NVIDIA_L4,accelerator-count=0",
            "accelerator-count=0",
        ),
        ("container-image-uri=a,disk-size=big", "disk-size=big: expected an integer"),
    ],
)
def test_bad_pool_specs_are_refused_clearly(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_worker_pool_spec(text)


@pytest.mark.parametrize(
    ("text", "duration"),
    [("3600", "3600s"), ("3600s", "3600s"), ("90m", "5400s"), ("2h", "7200s"), ("1.5s", "1.5s")],
)
def test_timeouts_become_durations(text: str, duration: str) -> None:
    assert parse_timeout(text) == duration


@pytest.mark.parametrize("text", ["0", "soon", "-5s", "1w"])
def test_bad_timeouts_are_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--timeout"):
        parse_timeout(text)


def test_key_values_split_on_commas_and_repeat() -> None:
    assert parse_key_values(["a=1,b=2", "c=x=y"], "--labels") == {"a": "1", "b": "2", "c": "x=y"}
    with pytest.raises(UsageError, match="--env-vars: expected KEY=VALUE"):
        parse_key_values(["novalue"], "--env-vars")


def test_flags_make_the_whole_job() -> None:
    request = build_job_request(
        _create_args(
            "--worker-pool-spec=machine-type=e2-standard-4,container-image-uri=python:3.11",
            "--worker-pool-spec=machine-type=e2-standard-4,replica-count=2,"
            "container-image-uri=python:3.11",
            "--command=python,-c",
            "--args=print(1)",
            "--env-vars",
            "A=1,B=two",
            "--labels",
            "team=ml",
            "--timeout",
            "1h",
            "--base-output-dir",
            "gs://bucket/out",
        )
    )
    spec = request.body["jobSpec"]
    assert request.body["displayName"] == "demo"
    assert request.body["labels"] == {"team": "ml"}
    assert spec["scheduling"] == {"timeout": "3600s"}
    assert spec["baseOutputDirectory"] == {"outputUriPrefix": "gs://bucket/out"}
    for pool in spec["workerPoolSpecs"]:
        assert pool["containerSpec"]["command"] == ["python", "-c"]
        assert pool["containerSpec"]["args"] == ["print(1)"]
        assert pool["containerSpec"]["env"] == [
            {"name": "A", "value": "1"},
            {"name": "B", "value": "two"},
        ]
    assert spec["workerPoolSpecs"][1]["replicaCount"] == "2"
    assert request.local_packages == []


def test_python_packages_need_a_local_path_or_uris() -> None:
    spec = "--worker-pool-spec=executor-image-uri=python:3.11,python-module=trainer.task"
    with pytest.raises(UsageError, match="add local-package-path=DIR"):
        build_job_request(_create_args(spec))
    request = build_job_request(
        _create_args(spec, "--python-package-uris=gs://b/t-0.1.tar.gz,gs://b/u.whl")
    )
    task = request.body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    assert task["packageUris"] == ["gs://b/t-0.1.tar.gz", "gs://b/u.whl"]
    local = build_job_request(_create_args(spec + ",local-package-path=./src"))
    assert local.local_packages == [(0, Path("src"), "trainer.task")]


def test_command_needs_a_container_pool_and_some_pool_is_needed() -> None:
    with pytest.raises(UsageError, match="--command applies to container-image-uri pools"):
        build_job_request(
            _create_args(
                "--worker-pool-spec=executor-image-uri=i,python-module=m",
                "--python-package-uris=gs://b/p.whl",
                "--command=python",
            )
        )
    with pytest.raises(UsageError, match="give at least one --worker-pool-spec"):
        build_job_request(_create_args())


GCLOUD_CONFIG = """\
# gcloud's documented example shape: a CustomJobSpec
workerPoolSpecs:
  - machineSpec:
      machineType: n1-highmem-2
    replicaCount: 1
    containerSpec:
      imageUri: gcr.io/ucaip-test/ucaip-training-test
      args:
        - port=8500
      command:
        - start
  - {}
  - machineSpec:
      machineType: n1-standard-4
    replicaCount: 2
    pythonPackageSpec:
      executorImageUri: python:3.11
      packageUris: [gs://b/trainer-0.1.tar.gz]
      pythonModule: trainer.task
scheduling:
  timeout: 600s
baseOutputDirectory:
  outputUriPrefix: gs://bucket/base
"""


def test_a_gcloud_config_file_is_the_job_spec(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(GCLOUD_CONFIG)
    request = build_job_request(_create_args("--config", str(config), "--labels=a=b"))
    spec = request.body["jobSpec"]
    assert spec["workerPoolSpecs"][0]["containerSpec"]["command"] == ["start"]
    assert spec["workerPoolSpecs"][1] == {}
    assert spec["workerPoolSpecs"][2]["pythonPackageSpec"]["pythonModule"] == "trainer.task"
    assert spec["scheduling"] == {"timeout": "600s"}
    assert request.body["labels"] == {"a": "b"}

    # flags override the file: the pools, the timeout, the args of every pool
    overridden = build_job_request(
        _create_args(
            "--config",
            str(config),
            "--worker-pool-spec=machine-type=e2-standard-4,container-image-uri=python:3.12",
            "--timeout=30s",
            "--args=x,y",
        )
    )
    spec = overridden.body["jobSpec"]
    assert spec["workerPoolSpecs"] == [
        {
            "machineSpec": {"machineType": "e2-standard-4"},
            "replicaCount": "1",
            "containerSpec": {"imageUri": "python:3.12", "args": ["x", "y"]},
        }
    ]
    assert spec["scheduling"] == {"timeout": "30s"}
    assert spec["baseOutputDirectory"] == {"outputUriPrefix": "gs://bucket/base"}


def test_a_config_may_be_json_or_a_whole_custom_job(tmp_path: Path) -> None:
    config = tmp_path / "job.json"
    whole: dict[str, Any] = {
        "displayName": "from-file",
        "labels": {"k": "v"},
        "jobSpec": {"workerPoolSpecs": [{"containerSpec": {"imageUri": "i"}}]},
    }
    config.write_text(json.dumps(whole))
    request = build_job_request(_create_args("--config", str(config)))
    assert request.body["displayName"] == "demo"  # the flag wins
    assert request.body["labels"] == {"k": "v"}
    assert request.body["jobSpec"]["workerPoolSpecs"] == [{"containerSpec": {"imageUri": "i"}}]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("- a\n- b\n", "expected a mapping"),
        ("workerPoolSpecs: [\n", "not valid YAML"),
        ("workerPoolSpecs: []\n", "give at least one --worker-pool-spec"),
        ("workerPoolSpecs: [3]\n", r"workerPoolSpecs\[0\] must be a mapping"),
        ("jobSpec: 3\n", "jobSpec must be a mapping"),
    ],
)
def test_bad_config_files_are_refused(tmp_path: Path, content: str, message: str) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(content)
    with pytest.raises(UsageError, match=message):
        build_job_request(_create_args("--config", str(config)))


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--config .*missing\.yaml"):
        build_job_request(_create_args("--config", str(tmp_path / "missing.yaml")))


def test_job_references_are_ids_or_full_names() -> None:
    assert parse_job_name("123") == (None, None, "123")
    assert parse_job_name("projects/p/locations/us-central1/customJobs/42") == (
        "p",
        "us-central1",
        "42",
    )


def _trainer(root: Path) -> Path:
    package = root / "trainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text("print('trained')\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "task.cpython-311.pyc").write_bytes(b"junk")
    (root / "README.md").write_text("not packed")
    return root


def test_a_plain_directory_becomes_a_reproducible_wheel(tmp_path: Path) -> None:
    directory = _trainer(tmp_path / "code")
    built = build_wheel(directory, "trainer.task")
    assert built.filename == "trainer-0.0.0-py3-none-any.whl"
    again = build_wheel(directory, "trainer.task")
    assert again.data == built.data  # same sources, same bytes, same digest
    wheel = tmp_path / built.filename
    wheel.write_bytes(built.data)
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(archive.namelist())
        assert names == [
            "trainer-0.0.0.dist-info/METADATA",
            "trainer-0.0.0.dist-info/RECORD",
            "trainer-0.0.0.dist-info/WHEEL",
            "trainer/__init__.py",
            "trainer/task.py",
        ]
        assert b"Tag: py3-none-any" in archive.read("trainer-0.0.0.dist-info/WHEEL")
        record = archive.read("trainer-0.0.0.dist-info/RECORD").decode()
        assert "trainer/task.py,sha256=" in record
    # pure Python: it runs straight from the zip, as an installed package would
    ran = subprocess.run(
        [sys.executable, "-m", "trainer.task"],
        env={**os.environ, "PYTHONPATH": str(wheel)},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert ran.stdout == "trained\n"


def test_a_pyproject_names_the_wheel_and_its_src_layout(tmp_path: Path) -> None:
    directory = tmp_path / "project"
    _trainer(directory / "src")
    (directory / "pyproject.toml").write_text(
        '[project]\nname = "my-trainer"\nversion = "1.2.3"\ndependencies = ["numpy>=1"]\n'
    )
    built = build_wheel(directory, "trainer.task")
    assert built.filename == "my_trainer-1.2.3-py3-none-any.whl"
    wheel = tmp_path / built.filename
    wheel.write_bytes(built.data)
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("my_trainer-1.2.3.dist-info/METADATA").decode()
    assert "Name: my-trainer\nVersion: 1.2.3\nRequires-Dist: numpy>=1\n" in metadata


def test_packing_refuses_what_cannot_run(tmp_path: Path) -> None:
    directory = _trainer(tmp_path / "code")
    with pytest.raises(
        PackagingError, match=r"python-module trainer.train is not in .*trainer/train.py"
    ):
        build_wheel(directory, "trainer.train")
    with pytest.raises(PackagingError, match="is not a directory"):
        build_wheel(tmp_path / "nowhere", "trainer.task")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PackagingError, match="holds no Python module"):
        build_wheel(empty)
