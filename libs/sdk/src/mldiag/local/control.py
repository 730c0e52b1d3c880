"""``mldiag status`` and ``mldiag down``: checking and stopping a stack from its state file."""

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from mldiag.local.config import STATE_FILE
from mldiag.local.postgres import probe
from mldiag.local.process import (
    LOCALHOST,
    same_process,
    signal_group,
    wait_pids_gone,
)
from mldiag.local.state import (
    Component,
    StackState,
    alive_components,
    read_state,
    recorded_and_orphaned,
    supervisor_alive,
)


def _ignore(_message: str) -> None:
    return None


@dataclass(frozen=True)
class ComponentHealth:
    """What ``mldiag status`` found about one component."""

    component: Component
    alive: bool
    healthy: bool


@dataclass(frozen=True)
class StackReport:
    """The recorded state of a home's stack and what a health check found."""

    state: StackState | None
    supervisor_alive: bool
    components: list[ComponentHealth]

    @property
    def running(self) -> bool:
        """A supervisor for this home is alive."""
        return self.state is not None and self.supervisor_alive

    @property
    def healthy(self) -> bool:
        """Running, started up, and every component answers its health check."""
        return (
            self.running
            and self.state is not None
            and self.state.status == "healthy"
            and all(health.healthy for health in self.components)
        )


def check_component(component: Component, client: httpx.Client) -> ComponentHealth:
    """Whether ``component``'s process is alive and its health check passes."""
    alive = component.pid is None or same_process(component.pid, component.start_ticks)
    if not alive:
        return ComponentHealth(component, alive=False, healthy=False)
    if component.kind == "postgres" and component.port is not None:
        healthy = probe(LOCALHOST, component.port, user="mldiag")
    elif component.kind == "storage":
        healthy = Path(component.url.removeprefix("file://")).is_dir()
    elif component.health_url is not None:
        try:
            healthy = client.get(component.health_url).status_code == 200
        except httpx.HTTPError:
            healthy = False
    else:
        healthy = True
    return ComponentHealth(component, alive=True, healthy=healthy)


def stack_status(home: Path) -> StackReport:
    """Read ``<home>/state.json`` and check every component it lists."""
    state = read_state(home)
    if state is None:
        return StackReport(None, supervisor_alive=False, components=[])
    with httpx.Client(trust_env=False, timeout=2.0) as client:
        health = [check_component(c, client) for c in state.components]
    return StackReport(state, supervisor_alive=supervisor_alive(state), components=health)


@dataclass(frozen=True)
class DownResult:
    """What ``mldiag down`` did."""

    was_running: bool
    """Some process of the stack was alive."""
    killed: list[int]
    """Pids that had to be killed (SIGKILL) because they did not stop in time."""


def stop_stack(
    home: Path, timeout: float = 45.0, notify: Callable[[str], None] = _ignore
) -> DownResult:
    """Stop the stack recorded in ``home``: SIGTERM its supervisor (which stops the rest in
    order) and wait until it and every recorded process are gone, SIGKILL after ``timeout``.

    Without a live supervisor (it was killed), stops the processes it left directly.
    """
    state = read_state(home)
    components = recorded_and_orphaned(home, state)
    supervisor = (state.supervisor_pid, state.supervisor_start_ticks) if state else (0, None)
    processes = [(c.pid, c.start_ticks) for c in components if c.pid is not None]
    if state is not None and supervisor_alive(state):
        notify(f"stopping the stack (supervisor pid {state.supervisor_pid})")
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.supervisor_pid, signal.SIGTERM)
        left = wait_pids_gone([supervisor, *processes], timeout)
    else:
        supervisor = (0, None)
        alive = alive_components(components)
        if not alive:
            (home / STATE_FILE).unlink(missing_ok=True)
            return DownResult(was_running=False, killed=[])
        notify(f"the supervisor is gone; stopping what it left: {', '.join(c.name for c in alive)}")
        # The supervisor's order: services, then PostgreSQL (SIGINT: fast shutdown), then NATS.
        for kinds in (("service",), ("postgres",), ("nats",)):
            group = [(c, c.pid) for c in alive if c.kind in kinds and c.pid is not None]
            for component, pid in group:
                sig = signal.SIGINT if component.kind == "postgres" else signal.SIGTERM
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            wait_pids_gone([(pid, c.start_ticks) for c, pid in group], timeout / 3)
        left = wait_pids_gone(processes, 0.0)
    killed = []
    for pid, ticks in [supervisor, *processes]:
        if pid and pid in left and same_process(pid, ticks):
            signal_group(pid, signal.SIGKILL)
            killed.append(pid)
    if killed:
        notify(f"killed {', '.join(map(str, killed))}: they did not stop within {timeout:.0f}s")
        wait_pids_gone([(pid, None) for pid in killed], 5.0)
    (home / STATE_FILE).unlink(missing_ok=True)
    return DownResult(was_running=True, killed=killed)
