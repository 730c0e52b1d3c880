"""``<home>/state.json``: where every component of a running stack is (pids, URLs, ports,
logs). ``mldiag status`` and ``mldiag down`` work from it alone.
"""

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mldiag.local.config import STATE_FILE
from mldiag.local.nats import PID_FILE as NATS_PID_FILE
from mldiag.local.postgres import PID_FILE as POSTGRES_PID_FILE
from mldiag.local.process import (
    command_line_contains,
    pid_alive,
    process_start_ticks,
    read_pid_file,
    same_process,
)

log = logging.getLogger(__name__)

STATE_VERSION = 1

ComponentKind = Literal["nats", "postgres", "storage", "service"]
StackStatus = Literal["starting", "healthy", "stopping"]
ComponentState = Literal["running", "restarting", "failed"]
"""``restarting``: it exited and is waiting out its backoff, or was started again and is not
healthy yet. ``failed``: it crashed in a loop and the supervisor gave up on it."""


@dataclass
class Component:
    """One running part of the stack, as recorded in the state file."""

    name: str
    kind: ComponentKind
    label: str
    url: str
    port: int | None = None
    pid: int | None = None
    start_ticks: int | None = None
    """When ``pid`` started, so a reused pid is never mistaken for it (None: unknown)."""
    log: str | None = None
    health_url: str | None = None
    detail: str | None = None
    state: ComponentState = "running"
    restarts: int = 0
    """How many times the supervisor started it again after it exited on its own."""
    last_exit_status: int | None = None
    """How its last unrequested exit ended, as ``Popen`` reports it (negative: that signal)."""
    last_restart_at: str | None = None
    """When it was last started again (ISO 8601, UTC)."""


@dataclass
class StackState:
    """Contents of ``<home>/state.json``."""

    home: str
    supervisor_pid: int
    supervisor_start_ticks: int | None
    status: StackStatus
    started_at: str
    ready_seconds: float | None = None
    components: list[Component] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Services not started because they are not installed."""
    progress: list[str] = field(default_factory=list)
    """The start-up's stages so far, one line each, as the supervisor reported them."""
    version: int = STATE_VERSION

    def to_json(self) -> str:
        """The state as indented JSON."""
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "StackState":
        """Parse a state file; raises ``ValueError`` (or ``KeyError``/``TypeError``) if invalid."""
        raw: dict[str, Any] = json.loads(text)
        if raw.get("version") != STATE_VERSION:
            raise ValueError(f"unknown state file version {raw.get('version')!r}")
        raw["components"] = [Component(**item) for item in raw.get("components", [])]
        return cls(**raw)

    def component(self, name: str) -> Component | None:
        """The component called ``name``, if recorded."""
        return next((c for c in self.components if c.name == name), None)


def read_state(home: Path) -> StackState | None:
    """The state of the stack in ``home``; None if none is recorded (or the file is unreadable)."""
    path = home / STATE_FILE
    try:
        return StackState.from_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("local.state.unreadable path=%s error=%s", path, error)
        return None


def write_state(home: Path, state: StackState) -> None:
    """Write ``state`` atomically, so a reader never sees half a file."""
    path = home / STATE_FILE
    partial = path.with_suffix(".json.partial")
    partial.write_text(state.to_json())
    partial.replace(path)


def supervisor_alive(state: StackState) -> bool:
    """Whether the supervisor that wrote ``state`` is still running."""
    return same_process(state.supervisor_pid, state.supervisor_start_ticks)


def alive_components(components: list[Component]) -> list[Component]:
    """Those of ``components`` whose process is still running."""
    return [c for c in components if c.pid is not None and same_process(c.pid, c.start_ticks)]


def recorded_and_orphaned(home: Path, state: StackState | None) -> list[Component]:
    """The state's components, plus servers found through their pid files but not recorded:
    a supervisor killed while NATS or PostgreSQL was starting had not written them down yet.
    """
    components = list(state.components) if state else []
    known = {c.pid for c in components}
    servers: tuple[tuple[str, ComponentKind, str, Path, bytes], ...] = (
        ("nats", "nats", "NATS", home / "nats" / NATS_PID_FILE, b"nats-server"),
        (
            "postgres",
            "postgres",
            "PostgreSQL",
            home / "postgres" / POSTGRES_PID_FILE,
            b"postgres",
        ),
    )
    for name, kind, label, pid_file, marker in servers:
        pid = read_pid_file(pid_file)
        if pid is None or pid in known or not pid_alive(pid):
            continue
        if command_line_contains(pid, marker):
            components.append(
                Component(
                    name=name,
                    kind=kind,
                    label=label,
                    url="",
                    pid=pid,
                    start_ticks=process_start_ticks(pid),
                )
            )
    return components
