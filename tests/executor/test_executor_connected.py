"""The executor as its own process against real NATS: commands on its subject run real
replicas, facts arrive once, logs land in storage, stops leave nothing behind, and a
kill -9 of the executor loses nothing and runs nothing twice."""

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import psutil  # type: ignore[import-untyped,unused-ignore]
import pytest

from executor.support_executor import start_command
from mldiag_executor.launch import find_pip
from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.replicas import (
    ExecutorAnnounced,
    ReplicaExited,
    ReplicaStarted,
    StartReplica,
    StopReplica,
)
from support import free_port, read_messages

pytestmark = pytest.mark.connected

EXECUTOR = "local-test-executor"
NO_API = {"MLDIAG_API_URL": "http://127.0.0.1:1", "MLDIAG_INGESTION_URL": "http://127.0.0.1:1"}


class ExecutorProcess:
    """``python -m mldiag_executor`` with this test's NATS namespace, state and storage."""

    def __init__(self, nats_settings: NatsSettings, tmp_path: Path, images: dict[str, str]):
        self.store = tmp_path / "store"
        self.state = tmp_path / "state"
        self.log = tmp_path / "executor.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MLDIAG_")}
        self.env.update(
            MLDIAG_NATS_URL=nats_settings.url,
            MLDIAG_NATS_NAMESPACE=nats_settings.namespace,
            MLDIAG_NATS_ACK_WAIT_SECONDS="5",
            MLDIAG_EXECUTOR_EXECUTOR_ID=EXECUTOR,
            MLDIAG_EXECUTOR_PORT=str(free_port()),
            MLDIAG_EXECUTOR_STATE_DIR=str(self.state),
            MLDIAG_EXECUTOR_ANNOUNCE_SECONDS="0.5",
            MLDIAG_EXECUTOR_IMAGES=json.dumps(images),
            MLDIAG_STORAGE_URL=f"file://{self.store}",
            MLDIAG_LOG_FORMAT="json",
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mldiag_executor"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill9(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@pytest.fixture
async def executor(
    nats_settings: NatsSettings, publisher: Publisher, tmp_path: Path
) -> AsyncIterator[ExecutorProcess]:
    process = ExecutorProcess(nats_settings, tmp_path, {"python-test": sys.executable})
    process.start()
    try:
        yield process
    finally:
        process.stop()
        _kill_attempts(process.state)


def _kill_attempts(state: Path) -> None:
    """Whatever a failed test left running."""
    for record in state.glob("attempts/*/replica.json"):
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            os.killpg(json.loads(record.read_text())["pgid"], signal.SIGKILL)


def _command(tmp_path: Path, script: str, **kwargs: Any) -> StartReplica:
    index = kwargs.pop("index", 0)
    return start_command(
        executor_id=EXECUTOR,
        logs_uri=f"gs://platform/jobs/{kwargs.get('job_id', '1234')}/logs/"
        f"workerpool0-{index}/attempt-{kwargs.get('attempt', 0)}",
        command=["python", "-c", textwrap.dedent(script)],
        env={**NO_API, "MARKER_DIR": str(tmp_path), **kwargs.pop("env", {})},
        index=index,
        **kwargs,
    )


async def _publish(publisher: Publisher, message: Envelope) -> None:
    await publisher.publish(message)


async def _facts(
    nats_settings: NatsSettings,
    kind: type[ReplicaStarted] | type[ReplicaExited],
    accept: Callable[[list[Any]], bool],
    timeout: float = 60,
) -> list[Any]:
    subject = bus.REPLICA_STARTED if kind is ReplicaStarted else bus.REPLICA_EXITED
    deadline = time.monotonic() + timeout
    while True:
        found = await read_messages(nats_settings, subject, kind)
        if accept(found):
            return found
        assert time.monotonic() < deadline, f"no matching {kind.__name__}: {found}"
        await asyncio.sleep(0.1)


async def _wait_for_file(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = await asyncio.to_thread(lambda: path.read_text() if path.exists() else "")
        if text.strip():
            return text.strip()
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.05)


async def test_a_start_runs_a_replica_and_its_facts_and_logs_arrive(
    executor: ExecutorProcess,
    publisher: Publisher,
    nats_settings: NatsSettings,
    tmp_path: Path,
) -> None:
    client = await nats.connect(nats_settings.url)
    announced: list[ExecutorAnnounced] = []

    async def on_announce(message: Any) -> None:
        announced.append(ExecutorAnnounced.model_validate_json(message.data))

    await client.subscribe(
        f"{nats_settings.namespace}.{bus.EXECUTOR_ANNOUNCED}.{EXECUTOR}", cb=on_announce
    )
    try:
        command = _command(
            tmp_path,
            """
            import os, pathlib, sys, time
            print("model dir", os.environ["AIP_MODEL_DIR"])
            print("a warning", file=sys.stderr)
            pathlib.Path(os.environ["AIP_MODEL_DIR"], "model.txt").write_text("trained")
            while not pathlib.Path(os.environ["MARKER_DIR"], "finish").exists():
                time.sleep(0.05)
            """,
            env={"AIP_MODEL_DIR": "gs://out/job/model/"},
        )
        await _publish(publisher, command)
        [started] = await _facts(nats_settings, ReplicaStarted, bool)
        assert (started.replica, started.executor_id) == (command.replica, EXECUTOR)
        deadline = time.monotonic() + 30
        while not any(command.replica in message.running for message in announced):
            assert time.monotonic() < deadline, announced
            await asyncio.sleep(0.1)
        latest = announced[-1]
        assert (latest.backend, latest.first_port, latest.port_count) == ("local", 20000, 1000)
        assert latest.capacity.cpus > 0 and latest.capacity.memory_bytes > 0
        (tmp_path / "finish").write_text("1")
        [exited] = await _facts(nats_settings, ReplicaExited, bool)
        assert (exited.replica, exited.reason, exited.exit_code) == (command.replica, "exited", 0)
    finally:
        await client.close()
    logs = executor.store / "gs/platform/jobs/1234/logs/workerpool0-0/attempt-0"
    stdout = (logs / "stdout.log").read_text()
    assert f"model dir {executor.store}/gs/out/job/model/" in stdout
    assert "a warning" in (logs / "stderr.log").read_text()
    assert (executor.store / "gs/out/job/model/model.txt").read_text() == "trained"


async def test_a_stop_kills_the_replica_and_its_grandchild(
    executor: ExecutorProcess,
    publisher: Publisher,
    nats_settings: NatsSettings,
    tmp_path: Path,
) -> None:
    command = _command(
        tmp_path,
        """
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c",
            "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(os.environ['MARKER_DIR'] + '/grandchild', 'w').write(str(os.getpid())); "
            "time.sleep(300)"])
        time.sleep(300)
        """,
    )
    await _publish(publisher, command)
    grandchild = int(await _wait_for_file(tmp_path / "grandchild"))
    await _publish(
        publisher,
        StopReplica(
            executor_id=EXECUTOR, replica=command.replica, reason="cancelled", grace_seconds=1
        ),
    )
    [exited] = await _facts(nats_settings, ReplicaExited, bool)
    assert (exited.replica, exited.reason) == (command.replica, "killed")
    assert not psutil.pid_exists(grandchild) or (
        psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
    )


async def test_kill_9_of_the_executor_loses_nothing_and_runs_nothing_twice(
    executor: ExecutorProcess,
    publisher: Publisher,
    nats_settings: NatsSettings,
    tmp_path: Path,
) -> None:
    command = _command(
        tmp_path,
        """
        import os, pathlib, time
        marker = pathlib.Path(os.environ["MARKER_DIR"])
        with (marker / "starts").open("a") as starts:
            starts.write(f"{os.getpid()}\\n")
        while not (marker / "finish").exists():
            time.sleep(0.05)
        raise SystemExit(9)
        """,
    )
    await _publish(publisher, command)
    await _facts(nats_settings, ReplicaStarted, bool)
    await _wait_for_file(tmp_path / "starts")
    executor.kill9()
    # the scheduler, not knowing, sends the start again; the executor comes back
    await _publish(publisher, command.model_copy(update={"event_id": uuid.uuid4()}))
    executor.start()
    await asyncio.sleep(3.0)  # long enough to re-adopt, and to start it twice if it would
    (tmp_path / "finish").write_text("1")
    [exited] = await _facts(nats_settings, ReplicaExited, bool)
    assert (exited.reason, exited.exit_code) == ("exited", 9)
    assert len((tmp_path / "starts").read_text().split()) == 1
    await asyncio.sleep(1.5)  # a second report would have come by now
    assert len(await read_messages(nats_settings, bus.REPLICA_EXITED, ReplicaExited)) == 1
    assert len(await read_messages(nats_settings, bus.REPLICA_STARTED, ReplicaStarted)) == 1
    # and after yet another restart it is not reported again
    executor.kill9()
    executor.start()
    await asyncio.sleep(2.0)
    assert len(await read_messages(nats_settings, bus.REPLICA_EXITED, ReplicaExited)) == 1


def _sdist(directory: Path, body: str) -> Path:
    """A tiny setuptools sdist whose ``trainer.task`` runs ``body``."""
    files = {
        "setup.py": "from setuptools import setup\n"
        "setup(name='trainer', version='0.1', packages=['trainer'])\n",
        "trainer/__init__.py": "",
        "trainer/task.py": textwrap.dedent(body),
        "PKG-INFO": "Metadata-Version: 1.0\nName: trainer\nVersion: 0.1\n",
    }
    path = directory / "trainer-0.1.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"trainer-0.1/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


async def test_a_python_package_is_installed_once_and_setup_failures_are_reported(
    nats_settings: NatsSettings, publisher: Publisher, tmp_path: Path
) -> None:
    pip = find_pip(sys.executable)
    if pip is None:
        pytest.skip("no interpreter with pip here")
    # the image's interpreter is one with pip (the executor's own venv may have none)
    executor = ExecutorProcess(nats_settings, tmp_path, {"python-pip": pip[0]})
    _sdist(
        executor.store / "gs/platform/packages",
        """
        import os, sys
        print("trainer ran with", sys.argv[1:])
        with open(os.path.join(os.environ["MARKER_DIR"], "ran-" + sys.argv[1]), "w") as f:
            f.write(sys.executable)
        """,
    )
    executor.start()
    try:
        uri = "gs://platform/packages/trainer-0.1.tar.gz"
        for job in ("2001", "2002"):
            command = start_command(
                executor_id=EXECUTOR,
                job_id=job,
                logs_uri=f"gs://platform/jobs/{job}/logs/workerpool0-0/attempt-0",
                image_uri="python-pip",
                package_uris=[uri],
                python_module="trainer.task",
                args=[job],
                env={**NO_API, "MARKER_DIR": str(tmp_path)},
            )
            await _publish(publisher, command)
            await _facts(
                nats_settings,
                ReplicaExited,
                lambda found, job=job: any(m.replica.job_id == job for m in found),
                timeout=240,
            )
            assert (tmp_path / f"ran-{job}").read_text()  # a quick look
        exits = await read_messages(nats_settings, bus.REPLICA_EXITED, ReplicaExited)
        assert {(m.reason, m.exit_code) for m in exits} == {("exited", 0)}
        assert len(list((executor.state / "packages").iterdir())) == 1  # cached

        broken = executor.store / "gs/platform/packages/broken-0.1.tar.gz"
        broken.write_bytes(b"not a tarball")
        for job, uris in (("2003", [uri[:-7] + "-missing.tar.gz"]), ("2004", [str(broken)])):
            await _publish(
                publisher,
                start_command(
                    executor_id=EXECUTOR,
                    job_id=job,
                    logs_uri=f"gs://platform/jobs/{job}/logs/workerpool0-0/attempt-0",
                    image_uri="python-pip",
                    package_uris=[u if u.startswith("gs://") else f"file://{u}" for u in uris],
                    python_module="trainer.task",
                    env=NO_API,
                ),
            )
        found = await _facts(
            nats_settings,
            ReplicaExited,
            lambda found: {m.replica.job_id for m in found} >= {"2003", "2004"},
            timeout=240,
        )
        failed = {m.replica.job_id: m for m in found if m.replica.job_id in ("2003", "2004")}
        assert {m.reason for m in failed.values()} == {"setup_failed"}
        assert "cannot fetch" in failed["2003"].message
        assert "pip install failed" in failed["2004"].message
        started = await read_messages(nats_settings, bus.REPLICA_STARTED, ReplicaStarted)
        assert {m.replica.job_id for m in started} == {"2001", "2002"}
    finally:
        executor.stop()
        _kill_attempts(executor.state)
