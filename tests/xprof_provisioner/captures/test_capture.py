"""The capture runner's rules, with a scripted capture client (no workload, no NATS)."""

import asyncio
import os
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mldiag_platform.bus import Delivery
from mldiag_platform.storage import FileStore
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.profiling import (
    CaptureProfile,
    CaptureTarget,
    ProfileCaptureFinished,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerSessionReported,
    TracerLevels,
)
from mldiag_xprof_provisioner.captures import process as capture_process
from mldiag_xprof_provisioner.captures.handlers import CaptureBusHandler, captures_consumer
from mldiag_xprof_provisioner.captures.service import CaptureRunner, TraceRequest, TraceResult
from mldiag_xprof_provisioner.captures.settings import CaptureSettings
from mldiag_xprof_provisioner.files import OWNER_FILE
from xprof_provisioner.xprof_fakes import Recorder

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BUSY = "INTERNAL: Another profiling session active."
NO_TRACE = (
    "UNAVAILABLE: No trace event was collected because there were no responses from clients "
    "or the responses did not have trace data."
)


class FakeClient:
    """Answers like XProf's client: down addresses refuse, busy ones say so, others trace."""

    def __init__(self) -> None:
        self.down: set[str] = set()
        self.busy: set[str] = set()
        self.answers: dict[str, str] = {}
        self.hang = False
        self.requests: list[TraceRequest] = []
        self.active: set[str] = set()
        self.overlaps: list[str] = []
        self.most_at_once = 0
        self.gate: asyncio.Event | None = None
        self.tracing = asyncio.Event()

    async def probe(self, address: str) -> str | None:
        return "connection refused" if address in self.down else None

    async def trace(self, request: TraceRequest) -> TraceResult:
        self.requests.append(request)
        self.overlaps += [a for a in request.addresses if a in self.active]
        self.active |= set(request.addresses)
        self.most_at_once = max(self.most_at_once, len(self.active))
        self.tracing.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(0)
            if self.hang:
                return TraceResult(files={}, error="did not end", timed_out=True)
            files = {}
            for address in request.addresses:
                if address not in self.busy and address not in self.answers:
                    path = request.work_dir / f"{address.replace(':', '_')}.xplane.pb"
                    path.write_bytes(f"xplane of {address}".encode())
                    files[address] = path
            errors = {a: BUSY for a in request.addresses if a in self.busy} | self.answers
            return TraceResult(
                files=files,
                error=NO_TRACE if not files else "",
                host_errors=errors,
                started_at=T0,
            )
        finally:
            self.active -= set(request.addresses)


class BrokenStore(FileStore):
    async def put(self, key: str, data: bytes) -> None:  # noqa: ARG002  # it never stores
        raise OSError("bucket unreachable")

    async def upload_from(self, path: Path, key: str) -> int:  # noqa: ARG002  # nor uploads
        raise OSError("bucket unreachable")


def _command(*targets: tuple[str, str], session_id: str = "ondemand-1") -> CaptureProfile:
    return CaptureProfile(
        run_id="run-1",
        session_id=session_id,
        kind=ProfilerSessionKind.ON_DEMAND,
        operation="projects/p/locations/l/operations/op-1",
        targets=[CaptureTarget(host=host, address=address) for host, address in targets],
        duration_seconds=0.5,
        tracer_levels=TracerLevels(host_tracer_level=3, python_tracer_level=1),
    )


def _runner(
    tmp_path: Path, client: FakeClient, max_concurrent: int = 4
) -> tuple[CaptureRunner, Recorder]:
    recorder = Recorder()
    store = FileStore(tmp_path / "storage")
    settings = CaptureSettings(max_concurrent=max_concurrent)
    return CaptureRunner(settings, store, recorder, client), recorder


async def _until(condition: Callable[[], bool]) -> None:
    # The runner's store and scratch calls run in threads: wait in real time, briefly.
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met within 2 s")


def _reports(messages: Sequence[Envelope]) -> dict[str, ProfilerSessionReported]:
    return {m.report.host: m for m in messages if isinstance(m, ProfilerSessionReported)}


def _finished(messages: Sequence[Envelope]) -> list[ProfileCaptureFinished]:
    return [m for m in messages if isinstance(m, ProfileCaptureFinished)]


async def test_two_hosts_land_in_the_session_and_are_reported(tmp_path: Path) -> None:
    client = FakeClient()
    runner, recorder = _runner(tmp_path, client)
    command = _command(("h0", "10.0.0.1:9999"), ("h1", "10.0.0.2:9999"))

    finished = await runner.run(command)

    store = FileStore(tmp_path / "storage")
    prefix = "run-1/plugins/profile/ondemand-1/"
    assert await store.get(prefix + "h1.xplane.pb") == b"xplane of 10.0.0.2:9999"
    assert finished.error_code == ""
    assert finished.missing_hosts == []
    assert finished.event_id == uuid.uuid5(command.event_id, "finished")
    # Every report first, then the outcome: the registry finishes a complete session.
    assert recorder.published[-1] == finished
    reports = _reports(recorder.published)
    assert sorted(reports) == ["h0", "h1"]
    h1 = reports["h1"]
    assert h1.event_id == uuid.uuid5(command.event_id, "report:h1")
    assert h1.report.phase is ProfilerSessionPhase.SUCCEEDED
    assert h1.report.file_uri == f"{store.url}/{prefix}h1.xplane.pb"
    assert h1.report.size_bytes == len(b"xplane of 10.0.0.2:9999")
    assert h1.report.storage_folder_uri == f"{store.url}/run-1/plugins/profile/ondemand-1"
    assert h1.report.start_time == T0
    assert h1.report.end_time == T0 + timedelta(seconds=0.5)
    assert h1.report.tracer_levels == command.tracer_levels
    assert h1.report.kind is ProfilerSessionKind.ON_DEMAND
    assert h1.report.operation == command.operation
    # One client run for both hosts, with the command's settings.
    (request,) = client.requests
    assert request.addresses == ("10.0.0.1:9999", "10.0.0.2:9999")
    assert request.duration_ms == 500
    assert request.attempts == 3
    assert request.session_id == "ondemand-1"
    # duration + multi-host delay + margin
    assert request.timeout_seconds == pytest.approx(0.5 + 3.0 + 30.0)
    assert not request.work_dir.exists(), "the scratch directory is removed"


async def test_a_down_host_is_not_traced_and_is_named_missing(tmp_path: Path) -> None:
    client = FakeClient()
    client.down.add("10.0.0.2:7000")
    runner, recorder = _runner(tmp_path, client)

    finished = await runner.run(_command(("h0", "10.0.0.1:9999"), ("h1", "10.0.0.2:7000")))

    assert finished.error_code == "targets_missing"
    assert finished.missing_hosts == ["h1"]
    assert "1 of 2 hosts gave no profile" in finished.error_message
    (request,) = client.requests
    assert request.addresses == ("10.0.0.1:9999",)
    assert request.timeout_seconds == pytest.approx(0.5 + 30.0), "one host: no 3 s delay"
    reports = _reports(recorder.published)
    assert reports["h0"].report.phase is ProfilerSessionPhase.SUCCEEDED
    failed = reports["h1"].report
    assert failed.phase is ProfilerSessionPhase.FAILED
    assert failed.file_uri == ""
    assert failed.error == (
        "the profiler server of h1 (10.0.0.2:7000) does not answer (connection refused): "
        "is the workload running with its profiler server on port 7000?"
    )


async def test_every_host_down_is_capture_failed_without_tracing(tmp_path: Path) -> None:
    client = FakeClient()
    client.down |= {"10.0.0.1:9999", "10.0.0.2:9999"}
    runner, _ = _runner(tmp_path, client)

    finished = await runner.run(_command(("h0", "10.0.0.1:9999"), ("h1", "10.0.0.2:9999")))

    assert finished.error_code == "capture_failed"
    assert finished.missing_hosts == ["h0", "h1"]
    assert "h0 (10.0.0.1:9999) does not answer" in finished.error_message
    assert "h1 (10.0.0.2:9999) does not answer" in finished.error_message
    assert client.requests == []


async def test_a_target_tracing_itself_is_busy(tmp_path: Path) -> None:
    client = FakeClient()
    client.busy.add("10.0.0.1:9999")
    runner, recorder = _runner(tmp_path, client)

    finished = await runner.run(_command(("h0", "10.0.0.1:9999")))

    assert finished.error_code == "target_busy"
    assert finished.missing_hosts == ["h0"]
    assert finished.error_message == (
        "another profiling session is active on h0 (10.0.0.1:9999): wait for the "
        "programmatic trace to end, then capture again"
    )
    assert _reports(recorder.published)["h0"].report.phase is ProfilerSessionPhase.FAILED
    assert len(client.requests) == 1, "no retry of our own on a busy target"


async def test_a_port_that_is_no_profiler_says_what_it_answered(tmp_path: Path) -> None:
    client = FakeClient()
    client.answers["127.0.0.1:4222"] = (
        "UNAVAILABLE: failed to connect to all addresses; last error: UNAVAILABLE: "
        "ipv4:127.0.0.1:4222: Failed parsing HTTP/2"
    )
    runner, _ = _runner(tmp_path, client)

    finished = await runner.run(_command(("h0", "127.0.0.1:4222")))

    assert finished.error_code == "capture_failed"
    assert finished.error_message.startswith(
        "h0 (127.0.0.1:4222) answered but gave no profile (UNAVAILABLE: failed to connect"
    )
    assert finished.error_message.endswith("is 4222 the port of the workload's profiler server?")


async def test_busy_and_down_together_is_capture_failed(tmp_path: Path) -> None:
    client = FakeClient()
    client.busy.add("10.0.0.1:9999")
    client.down.add("10.0.0.2:9999")
    runner, _ = _runner(tmp_path, client)

    finished = await runner.run(_command(("h0", "10.0.0.1:9999"), ("h1", "10.0.0.2:9999")))

    assert finished.error_code == "capture_failed"
    assert finished.missing_hosts == ["h0", "h1"]
    assert "another profiling session is active on h0" in finished.error_message
    assert "h1 (10.0.0.2:9999) does not answer" in finished.error_message


async def test_a_capture_past_its_timeout_fails(tmp_path: Path) -> None:
    client = FakeClient()
    client.hang = True
    runner, _ = _runner(tmp_path, client)

    finished = await runner.run(_command(("h0", "10.0.0.1:9999")))

    assert finished.error_code == "capture_failed"
    assert finished.error_message == ("the capture of h0 (10.0.0.1:9999) did not end within 30.5 s")


async def test_an_upload_error_is_upload_failed_and_still_published(tmp_path: Path) -> None:
    client = FakeClient()
    recorder = Recorder()
    runner = CaptureRunner(CaptureSettings(), BrokenStore(tmp_path / "storage"), recorder, client)

    finished = await runner.run(_command(("h0", "10.0.0.1:9999")))

    assert finished.error_code == "upload_failed"
    assert finished.missing_hosts == [], "the host did produce its file"
    assert "uploading the profile of h0 (10.0.0.1:9999) failed" in finished.error_message
    assert "bucket unreachable" in finished.error_message
    assert _reports(recorder.published)["h0"].report.phase is ProfilerSessionPhase.FAILED
    assert _finished(recorder.published) == [finished]


class CrashingClient(FakeClient):
    async def trace(self, request: TraceRequest) -> TraceResult:
        await super().trace(request)
        raise RuntimeError("the child's result is not JSON")


class UnlistableStore(FileStore):
    async def list(self, prefix: str = "") -> list[str]:  # noqa: ARG002  # it never lists
        raise OSError("bucket unreachable")


async def test_an_unexpected_error_while_tracing_is_capture_failed(tmp_path: Path) -> None:
    recorder = Recorder()
    store = FileStore(tmp_path / "storage")
    runner = CaptureRunner(CaptureSettings(), store, recorder, CrashingClient())

    finished = await runner.run(_command(("h0", "10.0.0.1:9999"), ("h1", "10.0.0.2:9999")))

    # Published, so the operation finishes: a raise would be redelivered, then dead-lettered.
    assert finished.error_code == "capture_failed"
    assert finished.missing_hosts == ["h0", "h1"]
    assert "RuntimeError: the child's result is not JSON" in finished.error_message
    assert _finished(recorder.published) == [finished]
    assert {r.report.phase for r in _reports(recorder.published).values()} == {
        ProfilerSessionPhase.FAILED
    }


async def test_an_unexpected_store_error_before_tracing_is_capture_failed(
    tmp_path: Path,
) -> None:
    client = FakeClient()
    recorder = Recorder()
    runner = CaptureRunner(CaptureSettings(), UnlistableStore(tmp_path / "s"), recorder, client)

    finished = await runner.run(_command(("h0", "10.0.0.1:9999")))

    assert finished.error_code == "capture_failed"
    assert "OSError: bucket unreachable" in finished.error_message
    assert client.requests == []
    assert _finished(recorder.published) == [finished]


async def test_an_unreadable_record_captures_anew(tmp_path: Path) -> None:
    client = FakeClient()
    runner, recorder = _runner(tmp_path, client)
    command = _command(("h0", "10.0.0.1:9999"))
    store = FileStore(tmp_path / "storage")
    await store.put(f"run-1/captures/{command.event_id}.json", b"{not json")

    finished = await runner.run(command)

    assert finished.error_code == ""
    assert _finished(recorder.published) == [finished]


async def test_scratch_lives_in_the_work_dir_marked_as_ours(tmp_path: Path) -> None:
    client = FakeClient()
    client.gate = asyncio.Event()
    work = tmp_path / "work"
    runner = CaptureRunner(
        CaptureSettings(), FileStore(tmp_path / "storage"), Recorder(), client, work_dir=work
    )
    task = asyncio.create_task(runner.run(_command(("h0", "10.0.0.1:9999"))))
    await client.tracing.wait()

    (request,) = client.requests
    # A provisioner killed now leaves it for its successor's remove_stale_copies.
    assert request.work_dir.parent == work
    assert (request.work_dir / OWNER_FILE).read_text() == str(os.getpid())
    client.gate.set()
    await task
    assert list(work.iterdir()) == []


async def test_a_redelivered_command_republishes_without_capturing(tmp_path: Path) -> None:
    client = FakeClient()
    client.busy.add("10.0.0.2:9999")
    runner, recorder = _runner(tmp_path, client)
    command = _command(("h0", "10.0.0.1:9999"), ("h1", "10.0.0.2:9999"))

    first = await runner.run(command)
    published = list(recorder.published)
    client.busy.clear()  # a new capture would now succeed: it must not happen
    # A fresh runner, as after a restart: what it knows comes from the store.
    recorder.published.clear()
    again = await CaptureRunner(
        CaptureSettings(), FileStore(tmp_path / "storage"), recorder, client
    ).run(command)

    assert len(client.requests) == 1
    assert again == first
    assert recorder.published == published, "the same messages, event ids and all"


async def test_files_already_stored_are_the_capture(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "storage")
    await store.put("run-1/plugins/profile/ondemand-1/h0.xplane.pb", b"12345")
    client = FakeClient()
    runner, recorder = _runner(tmp_path, client)

    finished = await runner.run(_command(("h0", "10.0.0.1:9999")))

    assert finished.error_code == ""
    assert client.requests == []
    assert _reports(recorder.published)["h0"].report.size_bytes == 5


async def test_a_failed_publish_raises_and_the_retry_replays(tmp_path: Path) -> None:
    client = FakeClient()
    runner, recorder = _runner(tmp_path, client)
    command = _command(("h0", "10.0.0.1:9999"))
    recorder.fail = True

    with pytest.raises(ConnectionError):
        await runner.run(command)
    recorder.fail = False
    finished = await runner.run(command)

    assert finished.error_code == ""
    assert len(client.requests) == 1


async def test_captures_of_one_target_take_turns(tmp_path: Path) -> None:
    client = FakeClient()
    client.gate = asyncio.Event()
    runner, _ = _runner(tmp_path, client)
    first = asyncio.create_task(runner.run(_command(("h0", "10.0.0.1:9999"))))
    await client.tracing.wait()
    second = asyncio.create_task(
        runner.run(_command(("h0", "10.0.0.1:9999"), ("h1", "10.0.0.2:9999"), session_id="s2"))
    )
    other = asyncio.create_task(runner.run(_command(("h5", "10.0.0.5:9999"), session_id="s3")))
    await _until(lambda: len(client.requests) == 2)
    await asyncio.sleep(0.1)

    # The other target traces alongside; the second capture of h0 waits its turn.
    assert [r.addresses for r in client.requests] == [("10.0.0.1:9999",), ("10.0.0.5:9999",)]
    client.gate.set()
    results = await asyncio.gather(first, second, other)

    assert [r.error_code for r in results] == ["", "", ""]
    assert client.overlaps == []
    assert len(client.requests) == 3


async def test_concurrency_is_bounded(tmp_path: Path) -> None:
    client = FakeClient()
    client.gate = asyncio.Event()
    runner, _ = _runner(tmp_path, client, max_concurrent=1)
    tasks = [
        asyncio.create_task(runner.run(_command((f"h{i}", f"10.0.0.{i}:9999"), session_id=f"s{i}")))
        for i in range(3)
    ]
    await _until(lambda: len(client.requests) == 1)
    await asyncio.sleep(0.1)
    assert len(client.requests) == 1
    client.gate.set()
    await asyncio.gather(*tasks)
    assert client.most_at_once == 1
    assert len(client.requests) == 3


@pytest.mark.parametrize(
    ("targets", "problem"),
    [
        (
            [("h0", "10.0.0.1:9999"), ("h0", "10.0.0.2:9999")],
            "the targets 10.0.0.1:9999 and 10.0.0.2:9999 share the host name h0",
        ),
        (
            [("h0", "10.0.0.1:9999"), ("h1", "10.0.0.1:9999")],
            "the hosts h0 and h1 share the address 10.0.0.1:9999",
        ),
        ([("h0", "10.0.0.1:9999,10.0.0.2:9999")], "is not host:port"),
        ([("h0", "10.0.0.1:70000")], "is not host:port"),
        ([("h0", "10.0.0.1")], "is not host:port"),
    ],
)
async def test_targets_that_cannot_be_captured_as_asked(
    tmp_path: Path, targets: list[tuple[str, str]], problem: str
) -> None:
    client = FakeClient()
    runner, _ = _runner(tmp_path, client)

    finished = await runner.run(_command(*targets))

    assert finished.error_code == "capture_failed"
    assert problem in finished.error_message
    assert client.requests == []


async def test_the_bus_handler_runs_a_batch_side_by_side(tmp_path: Path) -> None:
    client = FakeClient()
    client.gate = asyncio.Event()
    runner, recorder = _runner(tmp_path, client)
    handler = CaptureBusHandler(runner)
    commands = [_command((f"h{i}", f"10.0.0.{i}:9999"), session_id=f"s{i}") for i in range(2)]
    deliveries = [Delivery(c, f"mldiag.profiling.capture.start.{c.run_id}", 1) for c in commands]

    handling = asyncio.create_task(handler.on_commands(deliveries))
    await _until(lambda: client.most_at_once == 2)
    client.gate.set()
    await handling
    assert len(_finished(recorder.published)) == 2

    recorder.fail = True
    with pytest.raises(ConnectionError):
        await handler.on_commands(deliveries)


def test_the_consumer_takes_as_many_commands_as_may_trace() -> None:
    spec = captures_consumer(CaptureSettings(max_concurrent=3))
    assert spec.subject == "profiling.capture.start.*"
    assert spec.durable == "xprof-provisioner-captures"
    assert spec.batch_size == 3
    assert spec.message_type is CaptureProfile


# Lines XProf's client (xprof 2.24.2) wrote for a two-host capture where one host was busy.
_CLIENT_LOG = """\
I0000 00:00:1796348301.962730   14378 capture_profile.cc:281] Profiler delay_ms was 3000, \
start_timestamp_ns set to 1796348304962729610 [2026-12-04T01:38:24.96272961+00:00]
Starting to trace for 300 ms. Remaining attempt(s): 2
I0000 00:00:1796348301.963328   14378 profiler_client.cc:172] Asynchronous gRPC Profile() \
to [::1]:18931
E0000 00:00:1796348301.968271   14378 profiler_client.cc:213] INTERNAL: Another profiling \
session active.
W0000 00:00:1796348305.266630   14378 capture_profile.cc:169] No trace event is collected \
from [::1]:18931
W0000 00:00:1796348305.266668   14378 capture_profile.cc:181] [::1]:18931 returned \
INTERNAL: Another profiling session active.
"""


def _client_run(tmp_path: Path, log: str, result: str | None) -> tuple[TraceRequest, Path]:
    work_dir = tmp_path / "work"
    session = work_dir / "logdir" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    (session / "localhost_18932.xplane.pb").write_bytes(b"x")
    (session / "127.0.0.1_1.xplane.pb").write_bytes(b"")  # empty: no profile
    (session / "stray.xplane.pb").write_bytes(b"x")
    (work_dir / "client.log").write_text(log)
    if result is not None:
        (work_dir / "result.json").write_text(result)
    request = TraceRequest(
        addresses=("[::1]:18931", "localhost:18932", "127.0.0.1:1"),
        session_id="s1",
        duration_ms=300,
        attempts=1,
        tracer_levels=TracerLevels(),
        timeout_seconds=5,
        work_dir=work_dir,
    )
    return request, session


def _read(request: TraceRequest, returncode: int, timed_out: bool = False) -> TraceResult:
    work_dir = request.work_dir
    return capture_process._read_result(
        request,
        work_dir / "logdir",
        work_dir / "result.json",
        work_dir / "client.log",
        returncode,
        timed_out,
    )


def test_the_client_log_names_hosts_and_the_start(tmp_path: Path) -> None:
    """Files are named after the address (IPv6 brackets kept, ':' as '_'); the log says
    what each silent host answered and when the trace really began."""
    request, session = _client_run(tmp_path, _CLIENT_LOG, '{"ok": true, "error": ""}')

    result = _read(request, 0)

    assert result.files == {"localhost:18932": session / "localhost_18932.xplane.pb"}
    assert result.host_errors == {"[::1]:18931": BUSY}
    assert result.started_at == datetime.fromtimestamp(1796348304962729610 / 1e9, UTC)
    assert result.error == ""
    assert not result.timed_out


def test_a_child_that_died_says_how(tmp_path: Path) -> None:
    request, _ = _client_run(tmp_path, "Fatal Python error: Segmentation fault\n", None)

    result = _read(request, -11)

    assert result.error == (
        "the capture client exited with status -11: Fatal Python error: Segmentation fault"
    )
    assert result.started_at is None


def test_without_the_log_the_start_comes_from_the_child(tmp_path: Path) -> None:
    request, _ = _client_run(tmp_path, "", '{"ok": false, "error": "boom", "started_at": 10.0}')

    result = _read(request, 1)

    assert result.error == "boom"
    # several hosts: the client starts them 3 s late
    assert result.started_at == datetime.fromtimestamp(13.0, UTC)
