"""``mldiag up`` shows its start-up stages as they happen on a terminal (a real pseudo-terminal
here, with real NATS, PostgreSQL and ingestion), and stays quiet in a script or with --quiet."""

import argparse
import os
import pty
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mldiag.cli.stack import _progress_printer
from mldiag.local.stack import read_state, stop_stack
from support import free_port_flags, world_readable_tempdir

STAGE = re.compile(r"^\s*\d+\.\d+s  (.+)$")


@pytest.fixture
def home() -> Iterator[Path]:
    base = world_readable_tempdir("mldiag-test-progress-")
    yield base / "home"
    stop_stack(base / "home", timeout=10.0)
    shutil.rmtree(base, ignore_errors=True)


def _up_on_a_terminal(home: Path, ports: list[str]) -> tuple[int, list[str]]:
    """Run ``mldiag up --detach`` with a pseudo-terminal as its stdout; its exit status and
    the stage lines it printed, in order."""
    main, child = pty.openpty()
    command = [sys.executable, "-m", "mldiag.cli", "up", "--detach", "--home", str(home)]
    process = subprocess.Popen(
        [*command, "--services", "ingestion", *ports],
        stdout=child,
        stderr=child,
        env={**os.environ, "MLDIAG_HOME": str(home)},
    )
    os.close(child)
    chunks: list[bytes] = []

    def drain() -> None:  # read while it runs: a full terminal buffer would block it
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the child side is closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    code = process.wait(timeout=180)
    reader.join(timeout=10)
    os.close(main)
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    stages = [m.group(1) for line in text.splitlines() if (m := STAGE.match(line))]
    return code, stages


@pytest.mark.e2e
def test_up_prints_each_stage_as_it_happens_on_a_terminal(home: Path) -> None:
    ports = free_port_flags()
    code, stages = _up_on_a_terminal(home, ports)
    assert code == 0, stages
    assert [stage.split(" ")[0] for stage in stages] == [
        "NATS",
        "PostgreSQL:",
        "PostgreSQL",
        "ingestion",
    ], stages
    assert stages[1].startswith("PostgreSQL: first start, initialising ")
    assert stages[3].startswith("ingestion healthy on http://127.0.0.1:")
    state = read_state(home)
    assert state is not None
    assert [line.split("s  ", 1)[1] for line in state.progress] == stages

    stop_stack(home, timeout=30.0)
    code, again = _up_on_a_terminal(home, ports)  # the data directory is kept: no initdb
    assert code == 0, again
    assert [stage.split(" ")[0] for stage in again] == ["NATS", "PostgreSQL", "ingestion"]


@pytest.mark.parametrize(
    ("quiet", "terminal", "prints"),
    [(False, True, True), (True, True, False), (False, False, False)],
)
def test_stages_go_to_a_terminal_only_and_not_with_quiet(
    quiet: bool, terminal: bool, prints: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdout.isatty", lambda: terminal)
    printer = _progress_printer(argparse.Namespace(quiet=quiet))
    assert (printer is not None) is prints
