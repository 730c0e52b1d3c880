"""``mldiag run -- COMMAND`` against the real run-registry and ingestion (real NATS and
PostgreSQL): the wrapper runs as its own process, as a person or a scheduler starts it, and
its program is a real child process.
"""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from mldiag.cli.supervise import OutputPump, classify_exit, oom_in_output
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.telemetry import WorkloadSignalReported
from sdk.cli.conftest import Platform
from support import read_messages

WRAPPER_TIMEOUT = 90


# --- unit: how an exit is reported ---------------------------------------------------------


def test_exit_codes_and_signals_become_codes_reasons_and_shell_statuses() -> None:
    ok = classify_exit(0, oom_evidence=False)
    assert ok.succeeded and (ok.status, ok.code, ok.reason) == (0, "", "")
    failed = classify_exit(3, oom_evidence=True)  # evidence without a kill is no OOM kill
    assert (failed.status, failed.exit_code, failed.signal) == (3, 3, None)
    assert (failed.code, failed.reason) == ("exit_3", "exit_code")
    killed = classify_exit(-signal.SIGKILL, oom_evidence=False)
    assert (killed.status, killed.exit_code, killed.signal) == (137, None, "SIGKILL")
    assert (killed.code, killed.reason) == ("SIGKILL", "killed")
    assert classify_exit(-signal.SIGKILL, oom_evidence=True).reason == "oom_killed"
    assert classify_exit(137, oom_evidence=True).reason == "oom_killed"  # a shell's SIGKILL
    assert classify_exit(-signal.SIGTERM, oom_evidence=True).reason == "killed"
    assert classify_exit(-signal.SIGTERM, oom_evidence=False).status == 143


def test_oom_words_in_the_output() -> None:
    assert oom_in_output("Traceback ...\nMemoryError\n")
    assert oom_in_output("torch.OutOfMemoryError: CUDA out of memory.")
    assert not oom_in_output("Killed\n")  # what a shell prints for any SIGKILL


def test_the_pump_passes_bytes_unchanged_and_keeps_the_last_visible_lines(
    tmp_path: Path,
) -> None:
    read_end, write_end = os.pipe()
    sink_path = tmp_path / "sink"
    with sink_path.open("w") as sink, os.fdopen(read_end, "rb", buffering=0) as source:
        pump = OutputPump(source, sink, keep=3, name="test")
        pump.start()
        data = b"".join(f"line {i}\n".encode() for i in range(1000))
        data += b"progress 10%\rprogress 99%\r\n\xff\xfe binary\nno newline at the end"
        os.write(write_end, data)
        os.close(write_end)
        pump.join(10)
    assert sink_path.read_bytes() == data
    assert pump.tail() == "progress 99%\n\ufffd\ufffd binary\nno newline at the end"


# --- connected: the wrapper against the platform ------------------------------------------


def _environment(platform: Platform, tmp_path: Path) -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("MLDIAG_") or key == "MLDIAG_HOME"
    }
    environment.update(
        MLDIAG_API_URL=platform.api_url,
        MLDIAG_INGESTION_URL=platform.ingestion_url,
        MLDIAG_TOKEN=platform.tokens.admin,
        MLDIAG_SPOOL_DIR=str(tmp_path / "spool"),
    )
    return environment


def _wrapper(*args: str) -> list[str]:
    return [sys.executable, "-m", "mldiag.cli", "run", *args]


def _program(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def _run_wrapper(
    platform: Platform, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(  # noqa: PLW1510  # the status is the point of the tests
        _wrapper(*args),
        env=_environment(platform, tmp_path),
        capture_output=True,
        timeout=WRAPPER_TIMEOUT,
    )


def _run_id(stderr: bytes) -> str:
    for line in stderr.decode().splitlines():
        if line.startswith("mldiag run: run "):
            return line.removeprefix("mldiag run: run ").strip()
    raise AssertionError(f"no run id in the wrapper's stderr: {stderr.decode()}")


def _get(platform: Platform, path: str) -> Any:
    response = httpx.get(
        f"{platform.api_url}/v1/machineLearningRuns/{path}",
        headers=platform.tokens.headers(),
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return response.json()


def _points(platform: Platform, run_id: str, metric: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while True:
        response = httpx.get(
            f"{platform.api_url}/v1/machineLearningRuns/{run_id}/metrics/{metric}",
            headers=platform.tokens.headers(),
            timeout=10,
        )
        if response.status_code == 200 and (points := response.json()["points"]):
            found: list[dict[str, Any]] = points
            return found
        assert time.monotonic() < deadline, f"no {metric} points: {response.text}"
        time.sleep(0.1)


async def _signals(nats_settings: NatsSettings, run_id: str) -> list[WorkloadSignalReported]:
    deadline = time.monotonic() + 10
    while True:
        found = [
            message
            for message in await read_messages(
                nats_settings, bus.SIGNAL_RECEIVED, WorkloadSignalReported
            )
            if message.run_id == run_id
        ]
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.1)


@pytest.mark.connected
def test_a_program_that_succeeds_completes_the_run_with_its_tree_measured(
    platform_apps: Platform, tmp_path: Path
) -> None:
    program = _program(
        """
        import subprocess, sys, time
        ballast = bytearray(64 * 1024 * 1024)  # resident once written
        ballast[::4096] = b"x" * len(ballast[::4096])
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print("hello from the program")
        time.sleep(2.0)
        helper.kill()
        """
    )
    done = _run_wrapper(
        platform_apps,
        tmp_path,
        "--name",
        "wrapped",
        "--run-set",
        "wrapping",
        "--label",
        "team=ml",
        "--config",
        "lr=0.001",
        "--config",
        "optimizer.name=adam",
        "--interval",
        "0.3",
        "--",
        *program,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"hello from the program\n"  # the program's output, and only it
    run_id = _run_id(done.stderr)

    run = _get(platform_apps, run_id)
    assert run["runPhase"] == "COMPLETED"
    assert (run["displayName"], run["runSet"], run["labels"]) == (
        "wrapped",
        "wrapping",
        {"team": "ml"},
    )
    assert run["configs"]["userConfigs"] == {"lr": 0.001, "optimizer": {"name": "adam"}}

    rss = _points(platform_apps, run_id, "process_memory_rss_bytes")
    assert max(point["value"] for point in rss) > 64 * 1024 * 1024
    assert {point["host"] for point in rss} == {socket.gethostname()}
    assert max(point["value"] for point in _points(platform_apps, run_id, "process_count")) >= 2
    assert _points(platform_apps, run_id, "process_thread_count")
    assert _points(platform_apps, run_id, "process_cpu_utilization")
    assert _points(platform_apps, run_id, "host_memory_used_bytes")


@pytest.mark.connected
@pytest.mark.parametrize(
    ("code", "status", "last_line"),
    [
        ("sys.exit(3)", 3, "about to exit"),
        ("raise ValueError('boom')", 1, "ValueError: boom"),
    ],
)
async def test_a_failing_program_fails_the_run_and_reports_its_exit(
    platform_apps: Platform,
    nats_settings: NatsSettings,
    tmp_path: Path,
    code: str,
    status: int,
    last_line: str,
) -> None:
    program = _program(
        f"""
        import sys
        print("working on stdout")
        print("about to exit", file=sys.stderr)
        {code}
        """
    )
    done = await asyncio.to_thread(
        _run_wrapper, platform_apps, tmp_path, "--interval", "0", "--", *program
    )
    assert done.returncode == status
    assert done.stdout == b"working on stdout\n"
    assert b"about to exit\n" in done.stderr  # passed through
    run_id = _run_id(done.stderr)

    run = _get(platform_apps, run_id)
    assert run["runPhase"] == "FAILED"
    assert run["errorDetails"]["code"] == f"exit_{status}"
    assert run["errorDetails"]["message"].splitlines()[-1] == last_line

    [exited] = [
        message.signal
        for message in await _signals(nats_settings, run_id)
        if message.signal.kind == "PROCESS_EXITED"
    ]
    assert (exited.exit_code, exited.signal, exited.reason) == (status, None, "exit_code")
    assert exited.message.splitlines()[-1] == last_line
    assert "about to exit" in exited.message
    assert exited.host == socket.gethostname()


@pytest.mark.connected
@pytest.mark.parametrize(
    ("last_words", "reason"),
    [
        ("going down", "killed"),  # kill -9: no evidence of memory trouble
        ("MemoryError: cannot allocate 4 GiB", "oom_killed"),
    ],
)
async def test_a_killed_program_fails_the_run_with_the_signal(
    platform_apps: Platform,
    nats_settings: NatsSettings,
    tmp_path: Path,
    last_words: str,
    reason: str,
) -> None:
    program = _program(
        f"""
        import os, signal, sys
        print({last_words!r}, file=sys.stderr)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = await asyncio.to_thread(
        _run_wrapper, platform_apps, tmp_path, "--interval", "0", "--", *program
    )
    assert done.returncode == 137  # as a shell says it
    run_id = _run_id(done.stderr)
    run = _get(platform_apps, run_id)
    assert run["runPhase"] == "FAILED"
    assert run["errorDetails"]["code"] == "SIGKILL"
    [exited] = [
        message.signal
        for message in await _signals(nats_settings, run_id)
        if message.signal.kind == "PROCESS_EXITED"
    ]
    assert (exited.exit_code, exited.signal, exited.reason) == (None, "SIGKILL", reason)
    assert exited.message == last_words


@pytest.mark.connected
async def test_sigterm_is_forwarded_to_the_program_and_reported(
    platform_apps: Platform, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    program = _program(
        """
        import time
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    wrapper = await asyncio.to_thread(
        subprocess.Popen,
        _wrapper("--interval", "0", "--", *program),
        env=_environment(platform_apps, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert wrapper.stdout is not None
        assert await asyncio.to_thread(wrapper.stdout.readline) == b"ready\n"
        wrapper.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.to_thread(wrapper.communicate, timeout=WRAPPER_TIMEOUT)
    finally:
        wrapper.kill()
    assert wrapper.returncode == 143  # the program died of the forwarded SIGTERM
    run_id = _run_id(stderr)
    assert _get(platform_apps, run_id)["errorDetails"]["code"] == "SIGTERM"
    deadline = time.monotonic() + 10
    while len(reported := await _signals(nats_settings, run_id)) < 2:
        assert time.monotonic() < deadline, reported
        await asyncio.sleep(0.1)
    kinds = [(message.signal.kind, message.signal.signal) for message in reported]
    assert kinds == [("SIGTERM", "SIGTERM"), ("PROCESS_EXITED", "SIGTERM")]


@pytest.mark.connected
def test_large_and_binary_output_passes_through_whole(
    platform_apps: Platform, tmp_path: Path
) -> None:
    program = _program(
        """
        import sys
        block = bytes(range(256)) * 4096  # 1 MiB, not text
        for _ in range(8):  # both pipes at once: a wrapper reading one only would block
            sys.stdout.buffer.write(block)
            sys.stderr.buffer.write(block[::-1])
        """
    )
    done = _run_wrapper(platform_apps, tmp_path, "-q", "--interval", "0", "--", *program)
    assert done.returncode == 0
    block = bytes(range(256)) * 4096
    assert done.stdout == block * 8
    assert done.stderr.startswith(block[::-1] * 8)  # then only the SDK's own warnings, if any


_SDK_PROGRAM = """
    import mldiag
    run = mldiag.init(name="the program's own name", flush_interval=0.05)
    run.log({"loss": 0.5})
    run.log({"loss": 0.25})
    print(run.run_id, run.process_index)
    run.flush(10)
    """


@pytest.mark.connected
def test_an_sdk_inside_the_program_attaches_to_the_same_run(
    platform_apps: Platform, tmp_path: Path
) -> None:
    done = _run_wrapper(
        platform_apps, tmp_path, "--name", "the wrapper's name", "--", *_program(_SDK_PROGRAM)
    )
    assert done.returncode == 0, done.stderr.decode()
    run_id = _run_id(done.stderr)
    assert done.stdout.decode().split() == [run_id, "0"]
    losses = _points(platform_apps, run_id, "loss")
    assert [point["value"] for point in losses] == [0.5, 0.25]
    run = _get(platform_apps, run_id)
    assert run["displayName"] == "the wrapper's name"  # created by the wrapper, first
    assert run["runPhase"] == "COMPLETED"


@pytest.mark.connected
def test_the_wrapper_not_an_sdk_inside_decides_the_final_state(
    platform_apps: Platform, tmp_path: Path
) -> None:
    program = _program(_SDK_PROGRAM + "\n    import sys; sys.exit(3)\n")
    done = _run_wrapper(platform_apps, tmp_path, "--", *program)
    assert done.returncode == 3
    run = _get(platform_apps, _run_id(done.stderr))
    assert (run["runPhase"], run["errorDetails"]["code"]) == ("FAILED", "exit_3")


@pytest.mark.connected
def test_a_command_that_does_not_exist_fails_the_run(
    platform_apps: Platform, tmp_path: Path
) -> None:
    done = _run_wrapper(platform_apps, tmp_path, "--", str(tmp_path / "no-such-program"))
    assert done.returncode == 127
    assert b"cannot start" in done.stderr
    run = _get(platform_apps, _run_id(done.stderr))
    assert (run["runPhase"], run["errorDetails"]["code"]) == ("FAILED", "exec_failed")


# --- the launcher of a training job's replica (--replica) ------------------------------------


def test_a_replica_without_a_platform_is_neither_held_nor_failed(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MLDIAG_")}
    environment.update(
        MLDIAG_RUN_ID="4242",
        MLDIAG_API_URL="http://127.0.0.1:1",  # nothing listens there
        MLDIAG_INGESTION_URL="http://127.0.0.1:1",
        MLDIAG_SPOOL_DIR=str(tmp_path / "spool"),
    )
    exit_file = tmp_path / "attempt" / "exit.json"
    program = _program(
        """
        import os, sys
        print(os.environ["MLDIAG_HOST"], os.environ["MLDIAG_CREATE_RUN"])
        print("giving up", file=sys.stderr)
        sys.exit(5)
        """
    )
    started = time.monotonic()
    done = subprocess.run(  # noqa: PLW1510  # the status is the point
        _wrapper("--replica", "workerpool1-0", "--exit-file", str(exit_file), "--", *program),
        env=environment,
        capture_output=True,
        timeout=WRAPPER_TIMEOUT,
    )
    assert done.returncode == 5
    assert done.stdout == b"workerpool1-0 0\n"
    assert time.monotonic() - started < 20  # bounded: signal + a short final flush
    record = json.loads(exit_file.read_text())
    assert (record["exit_code"], record["message"]) == (5, "giving up")
    assert record["ended_at"]
    assert not list(exit_file.parent.glob(".tmp-*"))
    # a replica without its run is a mistake the executor hears about, with a status
    missing = subprocess.run(  # noqa: PLW1510
        _wrapper("--replica", "workerpool1-0", "--exit-file", str(exit_file), "--", *program),
        env={k: v for k, v in environment.items() if k != "MLDIAG_RUN_ID"},
        capture_output=True,
        timeout=WRAPPER_TIMEOUT,
    )
    assert missing.returncode == 2
    assert json.loads(exit_file.read_text())["exit_code"] == 2


@pytest.mark.connected
async def test_a_replica_attaches_to_the_jobs_run_and_reports_as_itself(
    platform_apps: Platform, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    run_id = "777001"
    created = await asyncio.to_thread(
        httpx.post,
        f"{platform_apps.api_url}/v1/machineLearningRuns",
        json={"runId": run_id, "displayName": "job", "runSet": "training-jobs"},
        headers=platform_apps.tokens.headers(),
        timeout=10,
    )
    assert created.status_code < 300, created.text
    environment = _environment(platform_apps, tmp_path)
    environment["MLDIAG_RUN_ID"] = run_id
    exit_file = tmp_path / "exit.json"
    program = _program(
        """
        import sys, time
        time.sleep(1.0)
        print("replica failing", file=sys.stderr)
        sys.exit(4)
        """
    )
    done = await asyncio.to_thread(
        subprocess.run,
        _wrapper(
            "--replica",
            "workerpool0-0",
            "--exit-file",
            str(exit_file),
            "--interval",
            "0.3",
            "--heartbeat-interval",
            "0.3",
            "--",
            *program,
        ),
        env=environment,
        capture_output=True,
        timeout=WRAPPER_TIMEOUT,
    )
    assert done.returncode == 4, done.stderr.decode()
    assert json.loads(exit_file.read_text())["exit_code"] == 4
    # the run is the training service's: the replica neither created nor ended it
    assert _get(platform_apps, run_id)["runPhase"] == "ACTIVE"
    [exited] = [
        message.signal
        for message in await _signals(nats_settings, run_id)
        if message.signal.kind == "PROCESS_EXITED"
    ]
    assert (exited.exit_code, exited.host) == (4, "workerpool0-0")
    assert "replica failing" in exited.message
    hosts = {point["host"] for point in _points(platform_apps, run_id, "host_memory_used_bytes")}
    assert hosts == {"workerpool0-0"}
