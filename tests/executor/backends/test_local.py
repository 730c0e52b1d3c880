"""The local backend with real processes: logs land where the logs URI says, stops leave
nothing behind (grandchildren included), deadlines kill, and a new executor process
re-adopts what runs and reports what ended, once."""

import asyncio
import json
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil  # type: ignore[import-untyped,unused-ignore]
import pytest

from executor.support_executor import start_command
from mldiag_executor.backends.base import ReplicaExit
from mldiag_executor.backends.local import LocalBackend, discover_gpus, vertex_gpu_name
from mldiag_executor.launch import LaunchConfig, Storage, prepare
from mldiag_platform.storage import GcsStore
from mldiag_schemas.replicas import StartReplica
from support import free_port

EXECUTOR = "local-test"
NO_API = {"MLDIAG_API_URL": "http://127.0.0.1:1", "MLDIAG_INGESTION_URL": "http://127.0.0.1:1"}


@pytest.fixture
def config(tmp_path: Path) -> LaunchConfig:
    return LaunchConfig(
        storage=Storage(f"file://{tmp_path / 'store'}"),
        state_dir=tmp_path / "state",
        images={"python-test": sys.executable},
    )


def _backend(config: LaunchConfig) -> LocalBackend:
    return LocalBackend(
        attempts_dir=config.attempts_dir,
        storage=config.storage,
        cpus=8,
        memory_bytes=1 << 34,
        deadline_grace_seconds=0.5,
    )


@pytest.fixture
async def backend(config: LaunchConfig) -> AsyncIterator[LocalBackend]:
    backend = _backend(config)
    yield backend
    for key in backend.running():
        await backend.stop(key, 0)
    await backend.close()


def _command(
    tmp_path: Path, script: str, *, index: int = 0, deadline_seconds: float = 3600
) -> StartReplica:
    return start_command(
        executor_id=EXECUTOR,
        logs_uri=f"gs://bucket/jobs/1234/logs/workerpool0-{index}/attempt-0",
        command=["python", "-c", textwrap.dedent(script)],
        env={**NO_API, "MARKER_DIR": str(tmp_path)},
        index=index,
        deadline_seconds=deadline_seconds,
    )


async def _start(backend: LocalBackend, config: LaunchConfig, command: StartReplica) -> None:
    await backend.start(command, await prepare(command, config))


async def _next_exit(backend: LocalBackend, timeout: float = 30) -> ReplicaExit:
    return await asyncio.wait_for(anext(backend.exits()), timeout)


def _read(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


async def _wait_for_file(path: Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while not (text := await asyncio.to_thread(_read, path)):
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.05)
    return text


def test_gpu_names_and_no_nvml() -> None:
    assert vertex_gpu_name("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB"
    assert vertex_gpu_name("Tesla T4") == "NVIDIA_TESLA_T4"
    assert vertex_gpu_name("NVIDIA GeForce RTX 4090") == "NVIDIA_GEFORCE_RTX_4090"

    class NoDriver:
        def nvmlInit(self) -> None:  # noqa: N802  # NVML's name
            raise RuntimeError("no driver")

    assert discover_gpus(NoDriver()) == ("", 0)


async def test_a_replica_runs_under_the_launcher_with_its_logs_in_storage(
    backend: LocalBackend, config: LaunchConfig, tmp_path: Path
) -> None:
    command = _command(
        tmp_path,
        """
        import os, sys
        print("hello from", os.environ["MLDIAG_HOST"], os.getcwd())
        print("about to fail", file=sys.stderr)
        sys.exit(3)
        """,
    )
    await _start(backend, config, command)
    directory = config.attempt_dir(command.replica)
    record = json.loads((directory / "replica.json").read_text())
    assert record["pid"] > 0 and record["key"]["jobId"] == "1234"
    assert backend.running() == [command.replica]
    ended = await _next_exit(backend)
    assert (ended.key, ended.reason, ended.exit_code) == (command.replica, "exited", 3)
    assert "about to fail" in ended.message
    logs = tmp_path / "store/gs/bucket/jobs/1234/logs/workerpool0-0/attempt-0"
    assert (
        (logs / "stdout.log")
        .read_text()
        .startswith(f"hello from workerpool0-0 {directory / 'work'}")
    )
    stderr = (logs / "stderr.log").read_text()
    assert "about to fail" in stderr
    assert json.loads((directory / "exit.json").read_text())["exit_code"] == 3
    assert backend.running() == []
    await _start(backend, config, command)  # known: nothing starts again
    assert backend.running() == []


async def test_stop_kills_the_whole_group_grandchildren_included(
    backend: LocalBackend, config: LaunchConfig, tmp_path: Path
) -> None:
    command = _command(
        tmp_path,
        """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(__import__('os').environ['MARKER_DIR'] + '/grandchild', 'w')"
            ".write(str(__import__('os').getpid())); time.sleep(300)"])
        time.sleep(300)
        """,
    )
    await _start(backend, config, command)
    grandchild = int(await _wait_for_file(tmp_path / "grandchild"))
    started = time.monotonic()
    await backend.stop(command.replica, 1.0)
    assert time.monotonic() - started < 10
    assert not psutil.pid_exists(grandchild) or (
        psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
    )
    ended = await _next_exit(backend)
    assert ended.reason == "killed"
    assert ended.message.startswith("stopped")
    await backend.stop(command.replica, 1.0)  # idempotent


async def test_a_deadline_kills_the_attempt(
    backend: LocalBackend, config: LaunchConfig, tmp_path: Path
) -> None:
    command = _command(tmp_path, "import time; time.sleep(300)", deadline_seconds=1)
    await _start(backend, config, command)
    ended = await _next_exit(backend)
    assert ended.reason == "killed"
    assert "deadline" in ended.message


async def test_a_new_executor_process_adopts_what_runs_and_reports_what_ended_once(
    config: LaunchConfig, tmp_path: Path
) -> None:
    first = _backend(config)
    running = _command(
        tmp_path,
        """
        import os, pathlib, time
        pathlib.Path(os.environ["MARKER_DIR"], "running").write_text(str(os.getpid()))
        while not pathlib.Path(os.environ["MARKER_DIR"], "finish").exists():
            time.sleep(0.05)
        """,
    )
    quick = _command(
        tmp_path,
        """
        import os, pathlib, time
        while not pathlib.Path(os.environ["MARKER_DIR"], "go").exists():
            time.sleep(0.05)
        raise SystemExit(7)
        """,
        index=1,
    )
    await _start(first, config, running)
    await _start(first, config, quick)
    program = int(await _wait_for_file(tmp_path / "running"))
    try:
        await _adopt_then_report_once(config, tmp_path, first, running, quick, program)
    finally:  # whatever failed above, the replicas this test started end with it
        (tmp_path / "go").write_text("1")
        (tmp_path / "finish").write_text("1")


async def _adopt_then_report_once(
    config: LaunchConfig,
    tmp_path: Path,
    first: LocalBackend,
    running: StartReplica,
    quick: StartReplica,
    program: int,
) -> None:
    await first.close()  # the executor is gone; its replicas are not
    (tmp_path / "go").write_text("1")
    await _wait_for_file(config.attempt_dir(quick.replica) / "exit.json")

    second = _backend(config)
    try:
        assert await second.recover() == [running.replica]
        ended = await _next_exit(second)
        assert (ended.key, ended.reason, ended.exit_code) == (quick.replica, "exited", 7)
        await second.reported(quick.replica)
        await _start(second, config, running)  # a redelivered start: not started twice
        assert psutil.pid_exists(program)
        (tmp_path / "finish").write_text("1")
        ended = await _next_exit(second)
        assert (ended.key, ended.reason, ended.exit_code) == (running.replica, "exited", 0)
        await second.reported(running.replica)
    finally:
        await second.close()

    third = _backend(config)
    try:
        assert await third.recover() == []
        with pytest.raises(TimeoutError):
            await _next_exit(third, timeout=0.5)
    finally:
        await third.close()
    assert await asyncio.to_thread((config.attempt_dir(running.replica) / "reported.json").exists)


@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[GcsStore]:
    from gcp_storage_emulator.server import create_server  # noqa: PLC0415

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="mldiag-test")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield GcsStore("mldiag-test")
    finally:
        server.stop()


async def test_on_gcs_outputs_are_pulled_and_pushed_and_logs_uploaded(
    gcs: GcsStore, tmp_path: Path
) -> None:
    config = LaunchConfig(
        storage=Storage("gs://mldiag-test/platform"),
        state_dir=tmp_path / "state",
        images={"python-test": sys.executable},
    )
    backend = LocalBackend(
        attempts_dir=config.attempts_dir,
        storage=config.storage,
        cpus=1,
        memory_bytes=1 << 30,
        log_upload_seconds=0.2,
    )
    await gcs.put("jobs/9/checkpoints/step-1", b"resume here")
    command = start_command(
        executor_id=EXECUTOR,
        job_id="9",
        logs_uri="gs://mldiag-test/jobs/9/logs/workerpool0-0/attempt-0",
        command=[
            "python",
            "-c",
            textwrap.dedent(
                """
                import os, pathlib
                checkpoint = pathlib.Path(os.environ["AIP_CHECKPOINT_DIR"], "step-1")
                print("resumed from", checkpoint.read_text(), os.environ["MLDIAG_AIP_MODEL_URI"])
                pathlib.Path(os.environ["AIP_MODEL_DIR"], "sub").mkdir()
                pathlib.Path(os.environ["AIP_MODEL_DIR"], "sub", "model.bin").write_text("w")
                """
            ),
        ],
        env={
            **NO_API,
            "AIP_MODEL_DIR": "gs://mldiag-test/jobs/9/model/",
            "AIP_CHECKPOINT_DIR": "gs://mldiag-test/jobs/9/checkpoints/",
        },
    )
    launch = await prepare(command, config)
    assert launch.env["AIP_MODEL_DIR"].startswith(str(config.attempt_dir(command.replica)))
    try:
        await backend.start(command, launch)
        ended = await _next_exit(backend)
    finally:
        await backend.close()
    assert (ended.reason, ended.exit_code) == ("exited", 0)
    assert await gcs.get("jobs/9/model/sub/model.bin") == b"w"
    stdout = await gcs.get("jobs/9/logs/workerpool0-0/attempt-0/stdout.log")
    assert stdout == b"resumed from resume here gs://mldiag-test/jobs/9/model/\n"
    assert await gcs.list("jobs/9/logs/") == [
        "jobs/9/logs/workerpool0-0/attempt-0/stderr.log",
        "jobs/9/logs/workerpool0-0/attempt-0/stdout.log",
    ]
