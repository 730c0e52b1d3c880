"""`mldiag up --detach`, `status` and `down` with real processes (ingestion only, to stay fast;
the full stack is exercised by the platform's end-to-end tests)."""

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mldiag.cli import main
from mldiag.local.nats import EmbeddedNats
from mldiag.local.process import pid_alive, wait_pids_gone
from mldiag.local.stack import STATE_FILE, Component, StackState, stop_stack, write_state
from support import free_port, free_port_flags, world_readable_tempdir

pytestmark = pytest.mark.e2e

_SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def home() -> Iterator[Path]:
    base = world_readable_tempdir("mldiag-test-local-stack-")
    yield base / "home"
    stop_stack(base / "home", timeout=10.0)  # whatever the test left running
    shutil.rmtree(base, ignore_errors=True)


def test_up_detach_status_down(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    up = ["up", "--detach", "--home", str(home), "--services", "ingestion", *free_port_flags()]
    assert main(up) == 0
    out = capsys.readouterr().out
    assert "mldiag is up in" in out
    assert "ingestion" in out

    state = json.loads((home / STATE_FILE).read_text())
    assert state["status"] == "healthy"
    by_name = {c["name"]: c for c in state["components"]}
    assert set(by_name) == {"nats", "postgres", "storage", "ingestion"}
    assert by_name["storage"]["url"] == f"file://{home}/storage"
    health = httpx.get(by_name["ingestion"]["health_url"], trust_env=False)
    assert health.status_code == 200
    assert (home / "logs" / "ingestion.log").stat().st_size > 0

    assert main(["status", "--home", str(home)]) == 0
    assert "healthy" in capsys.readouterr().out

    assert main(up) == 1
    assert "already running" in capsys.readouterr().err

    pids = [state["supervisor_pid"], *(c["pid"] for c in state["components"] if c["pid"])]
    assert main(["down", "--home", str(home)]) == 0
    assert "stopped" in capsys.readouterr().out
    assert not [pid for pid in pids if pid_alive(pid)]
    assert not (home / STATE_FILE).exists()
    assert main(["status", "--home", str(home)]) == 1


def test_down_stops_what_a_dead_supervisor_left(home: Path) -> None:
    home.mkdir(parents=True)
    orphans = [
        subprocess.Popen([sys.executable, "-c", _SLEEP], start_new_session=True),
        subprocess.Popen([sys.executable, "-c", _SLEEP], start_new_session=True),
    ]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_state(
        home,
        StackState(
            home=str(home),
            supervisor_pid=dead.pid,
            supervisor_start_ticks=1,
            status="healthy",
            started_at="2026-01-01T00:00:00+00:00",
            components=[
                Component(name=f"s{i}", kind="service", label="s", url="x", pid=process.pid)
                for i, process in enumerate(orphans)
            ],
        ),
    )
    assert main(["up", "--home", str(home), "--services", "ingestion", *free_port_flags()]) == 1
    result = stop_stack(home, timeout=5.0)
    assert result.was_running
    for process in orphans:
        assert process.wait(timeout=5.0) == -signal.SIGTERM
    assert not wait_pids_gone([(p.pid, None) for p in orphans], 1.0)
    assert not (home / STATE_FILE).exists()


def test_down_finds_a_server_the_state_file_never_recorded(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As if the supervisor was killed while NATS was starting: no state.json at all.
    server = EmbeddedNats(home / "nats", port=free_port(), monitor_port=free_port())
    server.start()
    try:
        assert server.pid is not None
        assert main(["up", "--home", str(home), "--services", "ingestion", *free_port_flags()]) == 1
        assert f"nats {server.pid}" in capsys.readouterr().err
        result = stop_stack(home, timeout=5.0)
        assert result.was_running
        assert not wait_pids_gone([(server.pid, None)], 5.0)
    finally:
        server.stop()
