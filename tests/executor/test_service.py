"""The executor's service with the real local backend and an in-memory publisher: commands
are idempotent by attempt, facts carry derived ids, and an attempt stopped before it
started never starts."""

import asyncio
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from executor.support_executor import start_command
from mldiag_executor.backends.local import LocalBackend
from mldiag_executor.errors import Rejected
from mldiag_executor.launch import LaunchConfig, Storage
from mldiag_executor.service import ExecutorService, fact_id
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.replicas import ReplicaExited, ReplicaStarted, StopReplica

EXECUTOR = "local-test"
NO_API = {"MLDIAG_API_URL": "http://127.0.0.1:1", "MLDIAG_INGESTION_URL": "http://127.0.0.1:1"}


class Recorder:
    """What the service published, in order."""

    def __init__(self) -> None:
        self.messages: list[Envelope] = []

    async def publish_many(self, messages: Sequence[Envelope]) -> None:
        self.messages.extend(messages)


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[tuple[ExecutorService, Recorder]]:
    config = LaunchConfig(
        storage=Storage(f"file://{tmp_path / 'store'}"),
        state_dir=tmp_path / "state",
        images={"python-test": sys.executable},
    )
    backend = LocalBackend(
        attempts_dir=config.attempts_dir, storage=config.storage, cpus=4, memory_bytes=1 << 32
    )
    recorder = Recorder()
    service = ExecutorService(EXECUTOR, backend, config, recorder)
    reporting = asyncio.create_task(service.report_exits())
    yield service, recorder
    for key in backend.running():
        await backend.stop(key, 0)
    reporting.cancel()
    await backend.close()


async def _until(condition: Callable[[], bool], timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110  # files and a list, not an event
            await asyncio.sleep(0.05)


async def test_a_start_sent_twice_starts_once_with_one_fact_id(
    service: tuple[ExecutorService, Recorder], tmp_path: Path
) -> None:
    executor, recorder = service
    command = start_command(
        executor_id=EXECUTOR,
        logs_uri=f"file://{tmp_path}/logs",
        command=["python", "-c", "import time; time.sleep(0.5)"],
        env=NO_API,
    )
    await executor.start_replica(command)
    await executor.start_replica(command.model_copy(update={"event_id": command.event_id}))
    started = [m for m in recorder.messages if isinstance(m, ReplicaStarted)]
    assert len(started) == 2  # published again, under the same id: JetStream keeps one
    assert {m.event_id for m in started} == {fact_id(EXECUTOR, command.replica, "started")}
    assert started[0] == started[1]
    await _until(lambda: any(isinstance(m, ReplicaExited) for m in recorder.messages))
    [exited] = [m for m in recorder.messages if isinstance(m, ReplicaExited)]
    assert (exited.reason, exited.exit_code) == ("exited", 0)
    assert exited.event_id == fact_id(EXECUTOR, command.replica, "exited")
    directory = tmp_path / "state/attempts/1234-p0-i0-a0"
    await _until((directory / "reported.json").exists)


async def test_an_attempt_stopped_before_it_started_never_starts(
    service: tuple[ExecutorService, Recorder], tmp_path: Path
) -> None:
    executor, recorder = service
    command = start_command(
        executor_id=EXECUTOR, logs_uri=f"file://{tmp_path}/logs", command=["true"], env=NO_API
    )
    await executor.stop_replica(
        StopReplica(executor_id=EXECUTOR, replica=command.replica, reason="cancelled")
    )
    await executor.start_replica(command)
    assert executor.backend.running() == []
    [exited] = recorder.messages
    assert isinstance(exited, ReplicaExited)
    assert exited.reason == "killed"
    assert "before it started" in exited.message


async def test_a_setup_failure_is_reported_once_and_never_retried(
    service: tuple[ExecutorService, Recorder], tmp_path: Path
) -> None:
    executor, recorder = service
    command = start_command(
        executor_id=EXECUTOR,
        logs_uri=f"file://{tmp_path}/logs",
        package_uris=[f"file://{tmp_path}/missing.tar.gz"],
        python_module="trainer.task",
        env=NO_API,
    )
    await executor.start_replica(command)
    await executor.start_replica(command)  # redelivered
    assert len(recorder.messages) == 2
    assert all(isinstance(m, ReplicaExited) for m in recorder.messages)
    assert recorder.messages[0] == recorder.messages[1]
    exited = recorder.messages[0]
    assert isinstance(exited, ReplicaExited)
    assert exited.reason == "setup_failed"
    assert "cannot fetch" in exited.message


async def test_a_command_for_another_executor_is_refused(
    service: tuple[ExecutorService, Recorder], tmp_path: Path
) -> None:
    executor, _ = service
    command = start_command(
        executor_id="someone-else", logs_uri=f"file://{tmp_path}/logs", command=["true"]
    )
    with pytest.raises(Rejected):
        await executor.start_replica(command)


async def test_the_announcement_says_what_runs(
    service: tuple[ExecutorService, Recorder], tmp_path: Path
) -> None:
    executor, _ = service
    command = start_command(
        executor_id=EXECUTOR,
        logs_uri=f"file://{tmp_path}/logs",
        command=["python", "-c", "import time; time.sleep(60)"],
        env=NO_API,
    )
    await executor.start_replica(command)
    announced = executor.announcement(first_port=20000, port_count=10, interval_seconds=2.0)
    assert announced.running == [command.replica]
    assert (announced.backend, announced.address) == ("local", "127.0.0.1")
    assert announced.capacity.cpus == 4
    await executor.stop_replica(
        StopReplica(
            executor_id=EXECUTOR, replica=command.replica, reason="cancelled", grace_seconds=0
        )
    )
    assert (
        executor.announcement(first_port=20000, port_count=10, interval_seconds=2.0).running == []
    )
