"""Launch preparation: storage URIs become directories, images become interpreters,
packages are cached by their bytes."""

import sys
from pathlib import Path

import pytest

from executor.support_executor import start_command
from mldiag_executor.errors import SetupFailed
from mldiag_executor.launch import (
    LaunchConfig,
    Storage,
    attempt_name,
    interpreter_for,
    package_key,
    prepare,
)
from mldiag_schemas.replicas import ReplicaKey


def test_gs_uris_map_under_the_file_root_and_file_uris_are_paths(tmp_path: Path) -> None:
    storage = Storage(f"file://{tmp_path}")
    assert storage.local_path("gs://bucket/a/b/model/") == tmp_path / "gs/bucket/a/b/model"
    assert storage.local_path("file:///x/y") == Path("/x/y")
    assert Storage("file://.mldiag/storage").file_root == Path(".mldiag/storage").resolve()
    with pytest.raises(SetupFailed):
        storage.local_path("gs://bucket/../../etc")
    with pytest.raises(SetupFailed):
        storage.local_path("s3://bucket/x")


def test_gs_uris_have_no_local_path_on_gcs_storage() -> None:
    assert Storage("gs://platform-bucket/root").local_path("gs://b/p") is None
    assert Storage("gs://platform-bucket").local_path("file:///tmp/x") == Path("/tmp/x")


def test_the_longest_image_prefix_wins_and_a_venv_means_its_python(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    images = {"us-docker.pkg.dev/": "/usr/bin/python3", "us-docker.pkg.dev/tf/": str(venv)}
    assert interpreter_for("us-docker.pkg.dev/tf/tf-cpu:2.15", images) == (
        str(venv / "bin" / "python"),
        None,
    )
    assert interpreter_for("us-docker.pkg.dev/pt/x", images) == ("/usr/bin/python3", None)
    python, note = interpreter_for("gcr.io/other", images)
    assert python == sys.executable
    assert note is not None and "gcr.io/other" in note


def test_the_package_key_is_the_packages_bytes_in_order() -> None:
    one = package_key([("a.tar.gz", b"x"), ("b.tar.gz", b"y")])
    assert one == package_key([("a.tar.gz", b"x"), ("b.tar.gz", b"y")])
    assert one != package_key([("b.tar.gz", b"y"), ("a.tar.gz", b"x")])
    assert one != package_key([("a.tar.gz", b"x"), ("b.tar.gz", b"z")])
    # names and bytes cannot slide into each other
    assert package_key([("ab", b"c")]) != package_key([("a", b"bc")])


def test_attempt_names_are_unique_per_attempt() -> None:
    key = ReplicaKey(job_id="42", pool=1, index=3, attempt=2)
    assert attempt_name(key) == "42-p1-i3-a2"


async def test_outputs_become_writable_directories_and_keep_their_uris(tmp_path: Path) -> None:
    config = LaunchConfig(storage=Storage(f"file://{tmp_path / 'store'}"), state_dir=tmp_path)
    command = start_command(
        executor_id="e",
        logs_uri=f"file://{tmp_path}/logs",
        command=["python", "-c", "print(1)"],
        env={
            "AIP_MODEL_DIR": "gs://b/jobs/1234/model/",
            "AIP_CHECKPOINT_DIR": f"file://{tmp_path}/ckpt/",
        },
    )
    launch = await prepare(command, config)
    assert launch.env["AIP_MODEL_DIR"] == f"{tmp_path}/store/gs/b/jobs/1234/model/"
    assert launch.env["MLDIAG_AIP_MODEL_URI"] == "gs://b/jobs/1234/model/"
    assert launch.env["AIP_CHECKPOINT_DIR"] == f"{tmp_path}/ckpt/"
    assert all(
        Path(launch.env[name]).is_dir()  # noqa: ASYNC240  # a test's quick look
        for name in ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR")
    )
    assert "AIP_TENSORBOARD_LOG_DIR" not in launch.env
    # a container's `python` is the table's interpreter (here: unmatched, ours, with a note)
    assert launch.argv == [sys.executable, "-c", "print(1)"]
    assert launch.notes and "python-test" in launch.notes[0]
    assert launch.working_dir == tmp_path / "attempts" / "1234-p0-i0-a0" / "work"
    assert launch.working_dir.is_dir()
    assert launch.outputs == []


async def test_a_module_runs_with_python_m_and_nothing_to_run_is_a_setup_failure(
    tmp_path: Path,
) -> None:
    config = LaunchConfig(
        storage=Storage(f"file://{tmp_path}"),
        state_dir=tmp_path,
        images={"python-test": sys.executable},
    )
    logs = f"file://{tmp_path}/logs"
    command = start_command(
        executor_id="e", logs_uri=logs, python_module="trainer.task", args=["--epochs", "2"]
    )
    launch = await prepare(command, config)
    assert launch.argv == [sys.executable, "-m", "trainer.task", "--epochs", "2"]
    assert launch.notes == []
    with pytest.raises(SetupFailed, match="nothing to run"):
        await prepare(start_command(executor_id="e", logs_uri=logs, index=1), config)
    missing = LaunchConfig(
        storage=config.storage, state_dir=tmp_path, images={"python-test": "/no/such/python"}
    )
    with pytest.raises(SetupFailed, match="missing"):
        await prepare(command, missing)
    packaged = start_command(
        executor_id="e", logs_uri=logs, package_uris=[f"file://{tmp_path}/none.tar.gz"]
    )
    with pytest.raises(SetupFailed, match="pythonModule"):
        await prepare(packaged, config)
    packaged = start_command(
        executor_id="e",
        logs_uri=logs,
        package_uris=[f"file://{tmp_path}/none.tar.gz"],
        python_module="m",
    )
    with pytest.raises(SetupFailed, match="cannot fetch"):
        await prepare(packaged, config)
