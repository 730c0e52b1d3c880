"""The embedded supervisor keeps the stack up: a `kill -9` of a service, of NATS or of
PostgreSQL is restarted with backoff while the rest keeps running, `mldiag status` shows the
restarts, a crash loop is given up on visibly, and `mldiag down` still stops everything.

One stack (ingestion and analyzer, to stay fast) serves the whole module, in file order.
"""

import os
import shutil
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mldiag.cli import main
from mldiag.local.process import pid_alive, port_is_free, same_process, wait_until
from mldiag.local.stack import STATE_FILE, Component, StackState, read_state, stop_stack
from support import free_port_flags, world_readable_tempdir

pytestmark = pytest.mark.e2e

_SEEN: set[int] = set()
"""Every pid the stack ever had: `mldiag down` must leave none of them."""


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    base = world_readable_tempdir("mldiag-e2e-restarts-")
    home = base / "home"
    ports = free_port_flags()
    up = ["up", "--detach", "--home", str(home), "--services", "ingestion,analyzer", *ports]
    try:
        assert main(up) == 0
        yield home
    finally:
        stop_stack(home, timeout=10.0)
        shutil.rmtree(base, ignore_errors=True)


def _state(home: Path) -> StackState:
    state = read_state(home)
    assert state is not None
    _SEEN.update(c.pid for c in state.components if c.pid is not None)
    return state


def _component(home: Path, name: str) -> Component:
    component = _state(home).component(name)
    assert component is not None
    return component


def _healthy(url: str | None) -> bool:
    assert url is not None
    try:
        return httpx.get(url, trust_env=False, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _up_log(home: Path) -> str:
    return (home / "logs" / "up.log").read_text()


def _still_the_same(before: Component, home: Path) -> bool:
    now = _component(home, before.name)
    return (
        now.pid == before.pid
        and now.pid is not None
        and same_process(now.pid, before.start_ticks)
        and now.restarts == before.restarts
    )


def test_a_killed_service_is_restarted_and_nothing_else_stops(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _state(home)
    analyzer = _component(home, "analyzer")
    others = [c for c in state.components if c.pid is not None and c.name != "analyzer"]
    assert analyzer.pid is not None
    assert {c.name for c in others} == {"nats", "postgres", "ingestion"}

    os.kill(analyzer.pid, signal.SIGKILL)

    def back() -> bool:
        now = _component(home, "analyzer")
        return now.pid != analyzer.pid and now.state == "running" and _healthy(now.health_url)

    assert wait_until(back, timeout=60.0, interval=0.2), _up_log(home)
    restarted = _component(home, "analyzer")
    assert restarted.restarts == analyzer.restarts + 1
    assert restarted.last_exit_status == -signal.SIGKILL
    assert restarted.last_restart_at is not None
    assert all(_still_the_same(c, home) for c in others)
    assert same_process(state.supervisor_pid, state.supervisor_start_ticks)
    assert "analyzer exited (signal 9 (SIGKILL)); restarting it in 1s" in _up_log(home)

    assert main(["status", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert f"analyzer: restarted {restarted.restarts} time" in out
    assert "last exit: signal 9 (SIGKILL)" in out


@pytest.mark.parametrize("name", ["nats", "postgres"])
def test_a_killed_server_is_restarted_and_the_stack_recovers(
    home: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _component(home, name)
    assert server.pid is not None

    os.kill(server.pid, signal.SIGKILL)

    def recovered() -> bool:
        now = _component(home, name)
        return (
            now.pid not in (None, server.pid)
            and now.state == "running"
            and main(["status", "--home", str(home)]) == 0
        )

    assert wait_until(recovered, timeout=60.0, interval=0.5), _up_log(home)
    capsys.readouterr()
    restarted = _component(home, name)
    assert restarted.restarts >= server.restarts + 1
    assert restarted.last_exit_status == -signal.SIGKILL
    assert f"{name} exited (signal 9 (SIGKILL)); restarting it in 1s" in _up_log(home)


def test_a_crash_loop_is_given_up_on_and_the_rest_keeps_running(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _state(home)
    ingestion = _component(home, "ingestion")
    others = [c for c in state.components if c.pid is not None and c.name != "ingestion"]
    assert ingestion.pid is not None and ingestion.port is not None

    # Hold ingestion's port once it is dead: every restart then exits at once.
    os.kill(ingestion.pid, signal.SIGKILL)
    with socket.socket() as squatter:

        def squatted() -> bool:
            try:
                squatter.bind(("127.0.0.1", ingestion.port or 0))
            except OSError:
                return False
            return True

        assert wait_until(squatted, timeout=5.0)
        squatter.listen()
        # 5 crashes within 120 s: 1 + 2 + 4 + 8 s of backoff and four failed starts.
        failed = wait_until(
            lambda: _component(home, "ingestion").state == "failed", timeout=90.0, interval=0.5
        )
        assert failed, _up_log(home)

    given_up = _component(home, "ingestion")
    assert given_up.restarts == ingestion.restarts + 4
    assert given_up.last_exit_status not in (None, 0, -signal.SIGKILL)
    log = _up_log(home)
    assert "ingestion crashed 5 times within 120s" in log
    assert "giving up on it" in log
    assert "the rest of the stack keeps running without ingestion" in log
    assert same_process(state.supervisor_pid, state.supervisor_start_ticks)
    assert all(_still_the_same(c, home) for c in others)
    assert _healthy(_component(home, "analyzer").health_url)

    assert main(["status", "--home", str(home)]) == 1
    out = capsys.readouterr().out
    assert "degraded: ingestion failed (crash loop); the rest keeps running" in out
    assert "ingestion: failed in a crash loop" in out


def test_down_during_a_pending_restart_leaves_no_process_behind(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _state(home)
    _SEEN.add(state.supervisor_pid)
    analyzer = _component(home, "analyzer")
    assert analyzer.pid is not None and analyzer.port is not None
    os.kill(analyzer.pid, signal.SIGKILL)
    assert wait_until(lambda: _component(home, "analyzer").state == "restarting", timeout=5.0)

    # Within the backoff: the stop must win, and no analyzer may start after it.
    assert main(["down", "--home", str(home)]) == 0
    assert "stopped" in capsys.readouterr().out
    assert not [pid for pid in _SEEN if pid_alive(pid)]
    assert not (home / STATE_FILE).exists()
    assert port_is_free(analyzer.port)
    assert "analyzer is healthy again" not in _up_log(home).rsplit("restarting it in", 1)[1]
