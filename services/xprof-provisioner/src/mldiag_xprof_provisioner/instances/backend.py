"""What the provisioner needs from whatever runs XProf: the ``XProfLauncher`` and
``XProfProcess`` protocols, and the ``LaunchSpec`` it hands over.

Local processes fill them in today (``process.py``); a Kubernetes backend (a pod per
instance) fits the same two protocols.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class LaunchSpec:
    """What an XProf process needs: a logdir, a loopback HTTP port, and a log file."""

    logdir: Path
    port: int
    log_path: Path


class XProfProcess(Protocol):
    """A launched XProf."""

    @property
    def pid(self) -> int:
        """The process id."""
        ...

    @property
    def returncode(self) -> int | None:
        """The exit status once it has exited, else ``None``."""
        ...

    async def wait_ready(self) -> None:
        """Return once it answers HTTP; raise :class:`XProfStartFailed` if it exits first."""
        ...

    async def stop(self, grace: float) -> int | None:
        """Terminate it (kill after ``grace`` seconds) and return its exit status."""
        ...

    def memory_bytes(self) -> int:
        """Its resident memory now (0 when unknown)."""
        ...

    def log_tail(self) -> str:
        """The last lines of its log, for error reports."""
        ...


class XProfLauncher(Protocol):
    """Starts XProf processes and answers the questions only the OS can."""

    def port_is_free(self, port: int) -> bool:
        """Whether nothing listens on ``port``."""
        ...

    def is_alive(self, pid: int) -> bool:
        """Whether a process with that id exists."""
        ...

    async def launch(self, spec: LaunchSpec) -> XProfProcess:
        """Start XProf; return once the process exists (not once it answers)."""
        ...
