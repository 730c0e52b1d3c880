"""``mldiag run`` ships its program's lines: the pump hands them over as a terminal shows them,
and, through the real ingestion (real NATS), they reach the bus with host, pid and stream,
between mldiag's own ``started`` and ``exited`` lines; replicas ship too; ``--no-logs`` and
``MLDIAG_LOGS=0`` turn it off."""

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mldiag.cli import replica_launcher
from mldiag.cli.supervise import OutputPump
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import LOGS_RECEIVED
from mldiag_schemas.logs import LogLine, LogLinesReceived, LogStream
from sdk.cli.conftest import Platform
from sdk.cli.test_cli_run import WRAPPER_TIMEOUT, _environment, _program, _run_id, _wrapper
from support import read_messages


def _pump(tmp_path: Path, data: bytes) -> list[str]:
    shipped: list[str] = []

    def ship(texts: list[str], *, at: float) -> None:
        assert at > 0
        shipped.extend(texts)

    read_end, write_end = os.pipe()
    with (tmp_path / "sink").open("w") as sink, os.fdopen(read_end, "rb", buffering=0) as source:
        pump = OutputPump(source, sink, keep=3, name="test", ship=ship)
        pump.start()
        os.write(write_end, data)
        os.close(write_end)
        pump.join(10)
    assert (tmp_path / "sink").read_bytes() == data  # shipping changes nothing passed through
    return shipped


def test_the_pump_ships_every_line_as_a_terminal_shows_it(tmp_path: Path) -> None:
    data = b"".join(f"line {i}\n".encode() for i in range(3000))
    data += b"progress 10%\rprogress 99%\r\n\xff\xfe binary\r\nno newline at the end"
    shipped = _pump(tmp_path, data)
    assert shipped[:3000] == [f"line {i}" for i in range(3000)]
    assert shipped[3000:] == ["progress 99%", "\ufffd\ufffd binary", "no newline at the end"]


def test_an_endless_line_is_shipped_bounded_from_its_start_or_its_last_redraw(
    tmp_path: Path,
) -> None:
    endless = b"a" * 300_000 + b"\n"
    bar = b"".join(f"\r{i}%".encode() for i in range(100_000)) + b"\n"
    head, last = _pump(tmp_path, endless + bar)
    assert head.startswith("a" * 1000) and len(head) <= 4 * 16_384
    assert last == "99999%"


# --- through the real ingestion -----------------------------------------------------------


async def _shipped(settings: NatsSettings, run_id: str, until: str) -> list[LogLine]:
    """The run's lines on the bus, once one of them starts with ``until``."""
    deadline = time.monotonic() + 20
    while True:
        messages = await read_messages(settings, LOGS_RECEIVED, LogLinesReceived)
        lines = [line for m in messages if m.run_id == run_id for line in m.lines]
        if any(line.text.startswith(until) for line in lines) or time.monotonic() > deadline:
            return sorted(lines, key=lambda line: line.time)
        await asyncio.sleep(0.1)


def _wrapped(platform: Platform, tmp_path: Path, *args: str, **env: str) -> Any:
    environment = {**_environment(platform, tmp_path), **env}
    return subprocess.run(  # noqa: PLW1510  # the status is the point
        _wrapper(*args), env=environment, capture_output=True, timeout=WRAPPER_TIMEOUT
    )


@pytest.mark.connected
async def test_the_program_s_lines_reach_the_bus_between_mldiag_s_own(
    platform_apps: Platform, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    program = _program(
        """
        import os, sys
        for step in range(1500):
            print(f"step {step}")
        print("Traceback (most recent call last):", file=sys.stderr)
        sys.exit(3)
        """
    )
    done = await asyncio.to_thread(
        _wrapped, platform_apps, tmp_path, "--interval", "0", "--", *program, MLDIAG_HOST="box-1"
    )
    assert done.returncode == 3, done.stderr.decode()
    run_id = _run_id(done.stderr)
    lines = await _shipped(nats_settings, run_id, "exited with status")
    started, *output, exited = lines
    assert (started.stream, exited.stream) == (LogStream.SYSTEM, LogStream.SYSTEM)
    assert started.text.startswith(f"started pid {started.pid}: ") and started.pid
    assert exited.text == "exited with status 3"
    stdout = [line.text for line in output if line.stream is LogStream.STDOUT]
    assert stdout == [f"step {step}" for step in range(1500)]
    [stderr] = [line for line in output if line.stream is LogStream.STDERR]
    assert stderr.text == "Traceback (most recent call last):"
    assert {(line.host, line.pid) for line in lines} == {("box-1", started.pid)}
    assert {line.severity for line in lines} == {"DEFAULT"}  # stderr is no error by itself


@pytest.mark.connected
@pytest.mark.parametrize("launcher", ["mldiag run --replica", "replica_launcher.py"])
async def test_a_replica_ships_as_itself_and_keeps_its_output(
    platform_apps: Platform, nats_settings: NatsSettings, tmp_path: Path, launcher: str
) -> None:
    run_id = "777002" if launcher.startswith("mldiag") else "777003"
    exit_file = tmp_path / "exit.json"
    program = _program('print("replica says hi")')
    options = ["--replica", "workerpool0-1", "--exit-file", str(exit_file)]
    if launcher.startswith("mldiag"):
        argv = _wrapper(*options, "--interval", "0", "--", *program)
    else:  # how the executor starts a replica: the launcher file, the program first
        argv = [sys.executable, replica_launcher.__file__, *options, "--", *program]
    environment = {
        **_environment(platform_apps, tmp_path),
        "MLDIAG_RUN_ID": run_id,
        "MLDIAG_SYSTEM_METRICS_INTERVAL": "0",
    }
    done = await asyncio.to_thread(
        subprocess.run, argv, env=environment, capture_output=True, timeout=WRAPPER_TIMEOUT
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"replica says hi\n"  # the replica's log file gets it as before
    lines = await _shipped(nats_settings, run_id, "exited with status")
    assert [line.text for line in lines][1:] == ["replica says hi", "exited with status 0"]
    assert {line.host for line in lines} == {"workerpool0-1"}


@pytest.mark.connected
async def test_no_logs_and_mldiag_logs_0_ship_nothing(
    platform_apps: Platform, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    program = _program('print("kept to myself")')
    quiet = await asyncio.to_thread(
        _wrapped, platform_apps, tmp_path, "--no-logs", "--interval", "0", "--", *program
    )
    off = await asyncio.to_thread(
        _wrapped, platform_apps, tmp_path, "--interval", "0", "--", *program, MLDIAG_LOGS="0"
    )
    assert quiet.returncode == off.returncode == 0
    assert quiet.stdout == off.stdout == b"kept to myself\n"
    messages = await read_messages(nats_settings, LOGS_RECEIVED, LogLinesReceived)
    assert {message.run_id for message in messages} & {
        _run_id(quiet.stderr),
        _run_id(off.stderr),
    } == set()
