"""The whole platform as ``mldiag up --detach`` runs it, in a temporary home on free ports,
for the tests (and benchmarks) that need real processes end to end."""

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support import free_port_flags, world_readable_tempdir

MLDIAG = [sys.executable, "-m", "mldiag.cli"]
API_COMPONENTS = ("edge", "run-registry")
"""The component whose URL is the one address users call (the edge, where there is one)."""


STACK_BASE_PORTS = (
    4317,
    4318,
    8080,
    8081,
    8082,
    8083,
    8084,
    8085,
    8086,
    8087,
    8090,
    14222,
    18222,
    15432,
)
"""Every port `mldiag up` listens on, before ``MLDIAG_PORT_OFFSET`` shifts them."""


def ports_free(offset: int) -> bool:
    """Whether every stack port shifted by ``offset`` can be bound now."""
    import socket  # noqa: PLC0415

    for port in STACK_BASE_PORTS:
        with socket.socket() as sock:
            # as servers do: a port in TIME_WAIT after a clean stop counts as free
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port + offset))
            except OSError:
                return False
    return True


def free_port_offset(start: int = 2_000, stride: int = 137) -> int:
    """A port offset whose whole range is free. Every shifted port stays below 32768, where
    Linux picks ephemeral ports for outgoing connections, and clear of XProf's 9100+; callers
    that run side by side take different ``start``/``stride``."""
    for offset in range(start, 14_000, stride):
        if ports_free(offset):
            return offset
    raise RuntimeError("no free port range for the stack")


class Stack:
    """A running stack: its home, its API address and its admin token."""

    def __init__(self, home: Path, env: Mapping[str, str]) -> None:
        self.home = home
        self.env = dict(env)

    def state(self) -> dict[str, Any]:
        """``<home>/state.json`` as the supervisor last wrote it."""
        state: dict[str, Any] = json.loads((self.home / "state.json").read_text())
        return state

    def component(self, name: str) -> dict[str, Any]:
        """One component of the state file, by name."""
        for component in self.state()["components"]:
            if component["name"] == name:
                found: dict[str, Any] = component
                return found
        raise KeyError(f"the stack has no component {name!r}")

    @property
    def api(self) -> str:
        """The one base URL."""
        names = {component["name"] for component in self.state()["components"]}
        name = next(name for name in API_COMPONENTS if name in names)
        url: str = self.component(name)["url"]
        return url.rstrip("/")

    @property
    def token(self) -> str:
        """The admin token ``mldiag up`` wrote into the home directory."""
        return (self.home / "admin-token").read_text().strip()

    @property
    def auth(self) -> dict[str, str]:
        """The admin token as a header."""
        return {"Authorization": f"Bearer {self.token}"}

    def service_pid(self, name: str) -> int:
        """The pid of a service process now."""
        pid: int = self.component(name)["pid"]
        return pid

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``mldiag ARGS`` against this stack."""
        env = {**os.environ, **self.env, "MLDIAG_HOME": str(self.home), "MLDIAG_API_URL": self.api}
        env["MLDIAG_TOKEN"] = self.token
        return subprocess.run(  # fixed argument list
            [*MLDIAG, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )


@contextmanager
def running_stack(prefix: str, env: Mapping[str, str] | None = None) -> Iterator[Stack]:
    """``mldiag up --detach`` on free ports in a fresh home; ``mldiag down`` at the end."""
    home = world_readable_tempdir(prefix)
    stack = Stack(home, env or {})
    up = subprocess.run(  # fixed argument list
        [*MLDIAG, "up", "--detach", "--home", str(home), *free_port_flags()],
        env={**os.environ, **stack.env, "MLDIAG_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    if up.returncode != 0:
        shutil.rmtree(home, ignore_errors=True)
        raise RuntimeError(f"mldiag up failed:\n{up.stdout}\n{up.stderr}")
    try:
        yield stack
    finally:
        subprocess.run(  # fixed argument list
            [*MLDIAG, "down", "--home", str(home)],
            env={**os.environ, "MLDIAG_HOME": str(home)},
            capture_output=True,
            timeout=120,
            check=False,
        )
        shutil.rmtree(home, ignore_errors=True)
