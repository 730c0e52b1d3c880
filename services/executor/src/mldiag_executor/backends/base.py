"""The contract every executor backend implements.

The executor service takes ``StartReplica`` / ``StopReplica`` from its work queue, prepares
each launch (storage URIs → directories, image → interpreter, packages installed; see
``mldiag_executor.launch``) and hands a :class:`PreparedLaunch` to its backend. The backend
runs the attempt somewhere (processes on this machine, a Ray cluster, Kubernetes) and
reports every attempt's end once on :meth:`Backend.exits`. The service turns starts and
exits into ``ReplicaStarted`` / ``ReplicaExited`` facts; backends never touch the bus.

Idempotency is by :class:`~mldiag_schemas.replicas.ReplicaKey`: starting an attempt the
backend already knows (running or ended) starts nothing, stopping an unknown or ended
attempt does nothing. After the executor restarts, :meth:`Backend.recover` re-adopts the
attempts that still run; attempts that ended meanwhile come out of :meth:`Backend.exits`.
"""

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol

from mldiag_schemas.replicas import ExitReason, ReplicaKey, Resources, StartReplica

BackendName = Literal["local", "ray", "kubernetes"]
"""The backends an executor can run replicas on (``ExecutorAnnounced.backend``)."""


@dataclass(frozen=True, slots=True)
class PreparedLaunch:
    """One attempt, ready to run: what launch preparation made of a ``StartReplica``.

    ``argv`` is the replica's own program (the user's command, or
    ``[python, -m, module, *args]`` for a package). Backends that supervise with the
    launcher wrap it as ``[python, -m, mldiag, run, --replica, <name>, --exit-file, <path>,
    --, *argv]`` themselves (the local backend does); ``python`` is the interpreter the
    image table chose, which has the launcher (the SDK) importable or gets it through
    ``env["PYTHONPATH"]``.
    """

    key: ReplicaKey
    """The attempt."""
    python: str
    """The interpreter the image table chose (or the executor's own)."""
    argv: list[str]
    """The program to run, without the launcher."""
    env: dict[str, str]
    """The replica's whole environment additions (the launch env with local output
    directories, ``PYTHONPATH`` for packages, ``MLDIAG_*``, ``CUDA_VISIBLE_DEVICES`` is
    the backend's to add)."""
    attempt_dir: Path
    """A directory owned by this attempt on the executor's state dir (local files:
    ``replica.json``, ``exit.json``, ``work/``)."""
    working_dir: Path
    """Where the program starts (``<attempt_dir>/work``)."""
    logs_uri: str
    """Where stdout/stderr go: ``<logs_uri>/stdout.log`` and ``<logs_uri>/stderr.log``."""
    resources: Resources
    """What the replica asked for."""
    port: int
    """The port the scheduler gave it (already in ``CLUSTER_SPEC``)."""
    deadline: datetime
    """When the job times out (the backend kills the attempt then)."""
    notes: list[str] = field(default_factory=list)
    """Lines for the head of the replica's stderr log (e.g. an unmatched image)."""
    outputs: list[tuple[Path, str]] = field(default_factory=list)
    """(local directory, URI) of output directories to push at exit (GCS storage only;
    with file storage outputs are written in place)."""


@dataclass(frozen=True, slots=True)
class ReplicaExit:
    """One attempt ended (reported once per attempt)."""

    key: ReplicaKey
    reason: ExitReason
    """``exited`` (its process ended by itself), ``killed`` (stopped on purpose or at its
    deadline), ``lost`` (the backend lost track of it), ``setup_failed``, ``rejected``."""
    exit_code: int | None
    """The exit status (128+n for signal n); None if unknown."""
    message: str
    """Why, and the last lines of stderr (at most 8000 characters)."""
    ended_at: datetime


class Backend(Protocol):
    """Where an executor runs replica attempts."""

    name: BackendName

    def capacity(self) -> Resources:
        """Everything it can run at once (announced; the scheduler does the accounting)."""
        ...

    def address(self) -> str:
        """The host name or IP other replicas reach this backend's replicas at."""
        ...

    async def start(self, command: StartReplica, launch: PreparedLaunch) -> None:
        """Start the attempt; returns once it is started (its pid or handle recorded).

        Idempotent by key: an attempt already known (running or ended) starts nothing.
        Raises :class:`~mldiag_executor.errors.SetupFailed` when it cannot start (the
        service reports ``setup_failed``).
        """
        ...

    async def stop(self, replica: ReplicaKey, grace_seconds: float) -> None:
        """Stop the attempt: SIGTERM (or the backend's equivalent), ``grace_seconds``,
        then kill, the whole process tree. Returns once it is gone. Idempotent; an
        unknown attempt is a no-op. Its end comes out of :meth:`exits` with reason
        ``killed``."""
        ...

    def running(self) -> list[ReplicaKey]:
        """The attempts running now (announced)."""
        ...

    async def recover(self) -> list[ReplicaKey]:
        """After the executor restarted: re-adopt attempts that still run and return them.
        Attempts that ended while nobody watched come out of :meth:`exits`."""
        ...

    def exits(self) -> AsyncIterator[ReplicaExit]:
        """Ended attempts, each once (until the service calls :meth:`reported`)."""
        ...

    async def reported(self, replica: ReplicaKey) -> None:
        """The service published the attempt's exit: never report it again, even after
        a restart."""
        ...

    async def close(self) -> None:
        """Stop watching (the replicas keep running: they outlive the executor)."""
        ...
