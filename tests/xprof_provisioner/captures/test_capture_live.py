"""Captures from real JAX workloads (CPU) through XProf's client in a child process; the
store is a FileStore and the publisher a recorder, except in the bus test (real NATS)."""

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mldiag_platform.bus import connect_bus
from mldiag_platform.settings import NatsSettings
from mldiag_platform.storage import FileStore
from mldiag_schemas import bus
from mldiag_schemas.profiling import (
    CaptureProfile,
    CaptureTarget,
    ProfileCaptureFinished,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerSessionReported,
    TracerLevels,
)
from mldiag_xprof_provisioner.captures.handlers import CaptureBusHandler, captures_consumer
from mldiag_xprof_provisioner.captures.process import SubprocessTraceClient
from mldiag_xprof_provisioner.captures.service import CaptureRunner, TraceRequest, TraceResult
from mldiag_xprof_provisioner.captures.settings import CaptureSettings
from support import free_port, read_messages, wait_until
from xprof_provisioner.xprof_fakes import Recorder

pytestmark = pytest.mark.connected

WORKLOAD = Path(__file__).with_name("profiled_workload.py")
DURATION = 0.3


@dataclass(frozen=True)
class Workload:
    host: str
    port: int
    control: Path
    process: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def target(self) -> CaptureTarget:
        return CaptureTarget(host=self.host, address=self.address)


@pytest.fixture(scope="module")
def workloads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Workload]]:
    """Two JAX processes with profiler servers: two hosts of one run."""
    started = []
    for index in range(2):
        control = tmp_path_factory.mktemp(f"workload{index}")
        port = free_port()
        with (control / "workload.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, str(WORKLOAD), str(port), str(control)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(Workload(f"host-{index}", port, control, process))
    try:
        deadline = time.monotonic() + 90
        for workload in started:
            while not (workload.control / "ready").exists():
                assert workload.process.poll() is None, workload.control / "workload.log"
                assert time.monotonic() < deadline, "the workloads did not start"
                time.sleep(0.1)
        yield started
    finally:
        for workload in started:
            workload.process.kill()
            workload.process.wait()


class CountingClient(SubprocessTraceClient):
    """The real client, counting its runs and timing them."""

    def __init__(self) -> None:
        super().__init__(probe_timeout_seconds=1.0)
        self.spans: list[tuple[float, float]] = []

    async def trace(self, request: TraceRequest) -> TraceResult:
        began = time.monotonic()
        try:
            return await super().trace(request)
        finally:
            self.spans.append((began, time.monotonic()))


def _command(*targets: CaptureTarget, session_id: str = "ondemand-1") -> CaptureProfile:
    return CaptureProfile(
        run_id="run-1",
        session_id=session_id,
        kind=ProfilerSessionKind.ON_DEMAND,
        operation="projects/p/locations/l/operations/op-1",
        targets=list(targets),
        duration_seconds=DURATION,
        tracer_levels=TracerLevels(),
    )


def _setup(tmp_path: Path) -> tuple[CaptureRunner, FileStore, Recorder, CountingClient]:
    store = FileStore(tmp_path / "storage")
    recorder = Recorder()
    client = CountingClient()
    settings = CaptureSettings(timeout_margin_seconds=20, scratch_dir=tmp_path)
    return CaptureRunner(settings, store, recorder, client), store, recorder, client


def _valid_xplane(data: bytes, tmp_path: Path) -> bool:
    """Whether XProf makes a trace of it (a copy: XProf may write caches next to it)."""
    from xprof.convert import (  # type: ignore[import-untyped]  # noqa: PLC0415
        _pywrap_profiler_plugin,
    )

    path = tmp_path / f"check-{uuid.uuid4().hex}" / "h.xplane.pb"
    path.parent.mkdir()
    path.write_bytes(data)
    _, ok = _pywrap_profiler_plugin.xspace_to_tools_data([path], "trace_viewer")
    return bool(ok)


def _reports(recorder: Recorder) -> dict[str, ProfilerSessionReported]:
    return {m.report.host: m for m in recorder.published if isinstance(m, ProfilerSessionReported)}


async def test_one_host(workloads: list[Workload], tmp_path: Path) -> None:
    runner, store, recorder, _ = _setup(tmp_path)
    host = workloads[0]

    began = time.monotonic()
    finished = await runner.run(_command(host.target))
    elapsed = time.monotonic() - began

    assert finished.error_code == "", finished.error_message
    key = "run-1/plugins/profile/ondemand-1/host-0.xplane.pb"
    assert await store.list("run-1/plugins/") == [key]
    data = await store.get(key)
    assert _valid_xplane(data, tmp_path)
    assert f"workload-{host.port}".encode() in data, "the file is that workload's"
    report = _reports(recorder)["host-0"].report
    assert report.phase is ProfilerSessionPhase.SUCCEEDED
    assert report.size_bytes == len(data)
    assert report.start_time is not None
    print(f"one-host capture of {DURATION} s: {elapsed:.2f} s")  # noqa: T201
    assert elapsed < DURATION + 5


async def test_two_hosts(workloads: list[Workload], tmp_path: Path) -> None:
    runner, store, recorder, _ = _setup(tmp_path)

    began = time.monotonic()
    finished = await runner.run(_command(*(w.target for w in workloads)))
    elapsed = time.monotonic() - began

    assert finished.error_code == "", finished.error_message
    prefix = "run-1/plugins/profile/ondemand-1/"
    assert await store.list(prefix) == [prefix + "host-0.xplane.pb", prefix + "host-1.xplane.pb"]
    for workload in workloads:
        data = await store.get(f"{prefix}{workload.host}.xplane.pb")
        assert _valid_xplane(data, tmp_path)
        assert f"workload-{workload.port}".encode() in data, "mapped back by address"
    reports = _reports(recorder)
    assert {r.report.phase for r in reports.values()} == {ProfilerSessionPhase.SUCCEEDED}
    assert recorder.published[-1] == finished
    print(f"two-host capture of {DURATION} s: {elapsed:.2f} s")  # noqa: T201
    assert elapsed < DURATION + 3 + 5, "the multi-host delay is ~3 s"


async def test_a_dead_target_fails_fast(workloads: list[Workload], tmp_path: Path) -> None:
    runner, _, recorder, client = _setup(tmp_path)
    dead = CaptureTarget(host="host-9", address=f"127.0.0.1:{free_port()}")

    began = time.monotonic()
    finished = await runner.run(_command(dead))
    elapsed = time.monotonic() - began

    assert finished.error_code == "capture_failed"
    assert "host-9 (127.0.0.1:" in finished.error_message
    assert "does not answer (connection refused)" in finished.error_message
    assert client.spans == [], "no client run for a target that refuses"
    assert elapsed < 1.0
    # A live host next to a dead one is still captured, without the multi-host delay.
    finished = await runner.run(_command(workloads[0].target, dead, session_id="s2"))
    assert finished.error_code == "targets_missing"
    assert finished.missing_hosts == ["host-9"]
    assert _reports(recorder)["host-0"].report.phase is ProfilerSessionPhase.SUCCEEDED


async def test_a_target_tracing_itself_is_busy(workloads: list[Workload], tmp_path: Path) -> None:
    runner, store, _, client = _setup(tmp_path)
    host = workloads[0]
    (host.control / "trace").touch()
    try:
        await wait_until(_exists(host.control / "tracing"), timeout=30)
        finished = await runner.run(_command(host.target))
    finally:
        (host.control / "trace").unlink()
        await wait_until(_gone(host.control / "tracing"), timeout=60)

    assert finished.error_code == "target_busy"
    assert finished.error_message.startswith(
        f"another profiling session is active on host-0 ({host.address})"
    )
    assert finished.missing_hosts == ["host-0"]
    assert await store.list("run-1/plugins/") == []
    assert len(client.spans) == 1
    # Once the programmatic trace ends, the target can be captured again.
    again = await runner.run(_command(host.target, session_id="s2"))
    assert again.error_code == "", again.error_message


async def test_captures_of_one_target_take_turns(workloads: list[Workload], tmp_path: Path) -> None:
    runner, store, _, client = _setup(tmp_path)
    target = workloads[1].target

    results = await asyncio.gather(
        runner.run(_command(target, session_id="s1")),
        runner.run(_command(target, session_id="s2")),
    )

    assert [r.error_code for r in results] == ["", ""], [r.error_message for r in results]
    assert len(await store.list("run-1/plugins/")) == 2
    (_, first_end), (second_start, _) = sorted(client.spans)
    assert second_start >= first_end


async def test_a_redelivered_command_does_not_capture_again(
    workloads: list[Workload], tmp_path: Path
) -> None:
    runner, _, recorder, client = _setup(tmp_path)
    command = _command(workloads[0].target)

    first = await runner.run(command)
    published = list(recorder.published)
    second = await runner.run(command)

    assert len(client.spans) == 1
    assert second == first
    assert recorder.published == published * 2


async def test_a_capture_past_its_timeout_is_killed(
    workloads: list[Workload], tmp_path: Path
) -> None:
    store = FileStore(tmp_path / "storage")
    client = CountingClient()
    # No margin: the child's own start-up already takes longer than the trace's 0.3 s.
    settings = CaptureSettings(timeout_margin_seconds=0.01, scratch_dir=tmp_path)
    runner = CaptureRunner(settings, store, Recorder(), client)
    target = workloads[1].target

    finished = await runner.run(_command(target))

    assert finished.error_code == "capture_failed"
    assert "did not end within 0.31 s" in finished.error_message
    assert client.spans[0][1] - client.spans[0][0] < 2.0
    leftovers = await asyncio.to_thread(lambda: list(tmp_path.glob("capture-*")))
    assert leftovers == [], "its scratch directory is gone"
    # The workload ends the orphaned trace on its own; then it can be captured again.
    await asyncio.sleep(DURATION + 0.5)
    again = await _setup(tmp_path)[0].run(_command(target, session_id="s2"))
    assert again.error_code == "", again.error_message


async def test_a_command_on_the_bus(
    workloads: list[Workload], tmp_path: Path, nats_settings: NatsSettings
) -> None:
    """The consumer as app.py wires it: command in, reports and outcome out on JetStream."""
    store = FileStore(tmp_path / "storage")
    settings = CaptureSettings(timeout_margin_seconds=20, scratch_dir=tmp_path)
    command = _command(*(w.target for w in workloads))
    async with connect_bus(nats_settings, "xprof-provisioner") as connected:
        client = SubprocessTraceClient(settings.probe_timeout_seconds)
        runner = CaptureRunner(settings, store, connected.publisher, client)
        connected.consume(captures_consumer(settings), CaptureBusHandler(runner).on_commands)
        await connected.start()
        await connected.publisher.publish(command)

        async def finished() -> list[ProfileCaptureFinished]:
            return await read_messages(
                nats_settings, bus.PROFILE_CAPTURE_FINISHED, ProfileCaptureFinished
            )

        (outcome,) = await wait_until(finished, timeout=30, interval=0.2)
        reports = await read_messages(
            nats_settings, bus.PROFILER_SESSION_REPORTED, ProfilerSessionReported
        )

    assert outcome.error_code == "", outcome.error_message
    assert outcome.operation == command.operation
    assert sorted(r.report.host for r in reports) == ["host-0", "host-1"]
    assert {r.report.phase for r in reports} == {ProfilerSessionPhase.SUCCEEDED}
    assert len(await store.list("run-1/plugins/profile/ondemand-1/")) == 2


def _exists(path: Path) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return await asyncio.to_thread(path.exists)

    return probe


def _gone(path: Path) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return not await asyncio.to_thread(path.exists)

    return probe
