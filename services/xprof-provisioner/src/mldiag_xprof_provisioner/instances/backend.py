"""What the provisioner needs from whatever runs XProf: the ``XProfLauncher`` and
``XProfProcess`` protocols, and the ``LaunchSpec`` it hands over.

Local processes fill them in today (``process.py``); a Kubernetes backend (a pod per
instance) fits the same two protocols.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class LaunchSpec:
    """What an XProf process needs: a logdir, a loopback HTTP port, a log file, and the secret
    every request to it must carry."""

    logdir: Path
    port: int
    log_path: Path
    secret: str = field(repr=False)
    """Handed to XProf privately (never on its command line) and sent only by the proxy."""


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
