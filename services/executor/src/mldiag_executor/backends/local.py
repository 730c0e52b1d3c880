"""The local backend: every replica attempt a process group, in a session of its own, on
this machine, supervised by the launcher (``python -m mldiag.cli run --replica …``).

Attempts outlive the executor (kill -9 included): each has a directory under the state dir
whose ``replica.json`` names its process (pid and start time, so a reused pid is not taken
for it) and where the launcher writes ``exit.json``. A restarted executor re-adopts the
live ones and watches them by polling; those that ended meanwhile are reported from their
files. Stopping sends SIGTERM to the whole group, waits the grace, then SIGKILL: nothing of
the attempt survives it, grandchildren included.

stdout/stderr go straight to ``<logs_uri>/stdout.log`` and ``stderr.log`` when the logs URI
maps to a local path (file storage), else to ``<attempt>/logs/`` and are uploaded every
few seconds and at the end (GCS).
"""

import asyncio
import contextlib
import functools
import importlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil  # type: ignore[import-untyped,unused-ignore]
import structlog

from mldiag_executor import attempts
from mldiag_executor.backends.base import BackendName, PreparedLaunch, ReplicaExit
from mldiag_executor.backends.processes import exit_status, signal_group, tail
from mldiag_executor.errors import Rejected, SetupFailed
from mldiag_executor.launch import (
    LaunchConfig,
    Storage,
    SyncedOutput,
    attempt_name,
    push_output,
)
from mldiag_schemas.replicas import ExitReason, ReplicaKey, Resources, StartReplica

if TYPE_CHECKING:
    from mldiag_executor.settings import ExecutorSettings

log = structlog.get_logger(__name__)

POLL_SECONDS = 0.2
"""How often attempts are checked for their end."""
DRAIN_SECONDS = 15.0
"""How long a launcher may flush telemetry after its program ended before it is killed."""
LAUNCHER = ("cli", "replica_launcher.py")
"""The SDK's replica launcher (``mldiag.cli.replica_launcher``), run by its file's path: the
program starts before the SDK is imported (``-m`` would import the whole package first)."""

_VERTEX_GPU_NAMES = (
    ("H200", "NVIDIA_H200_141GB"),
    ("H100", "NVIDIA_H100_80GB"),
    ("A100-SXM4-80GB", "NVIDIA_A100_80GB"),
    ("A100 80GB", "NVIDIA_A100_80GB"),
    ("A100", "NVIDIA_TESLA_A100"),
    ("L4", "NVIDIA_L4"),
    ("T4", "NVIDIA_TESLA_T4"),
    ("V100", "NVIDIA_TESLA_V100"),
    ("P100", "NVIDIA_TESLA_P100"),
    ("P4", "NVIDIA_TESLA_P4"),
    ("K80", "NVIDIA_TESLA_K80"),
)


def vertex_gpu_name(nvml_name: str) -> str:
    """Vertex's accelerator name for an NVML device name (``NVIDIA H100 80GB HBM3`` →
    ``NVIDIA_H100_80GB``); an unknown one is upper-cased with underscores."""
    for marker, name in _VERTEX_GPU_NAMES:
        if marker in nvml_name:
            return name
    return "_".join(nvml_name.upper().replace("-", " ").split())


def discover_gpus(module: Any = None) -> tuple[str, int]:
    """The GPUs NVML sees: (Vertex accelerator type, count); ("", 0) without NVML."""
    try:
        nvml: Any = module if module is not None else importlib.import_module("pynvml")
        nvml.nvmlInit()
        count = int(nvml.nvmlDeviceGetCount())
        if count == 0:
            return "", 0
        name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0))
        return vertex_gpu_name(name.decode() if isinstance(name, bytes) else str(name)), count
    except Exception:  # noqa: BLE001  # no library, no driver, no GPU: all mean "none"
        return "", 0


def group_members(pgid: int) -> list[psutil.Process]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


@dataclass
class _Attempt:
    key: ReplicaKey
    directory: Path
    pid: int
    create_time: float
    log_dir: Path
    logs_uri: str
    uploaded: bool
    """Whether logs are uploaded (GCS) rather than written in place."""
    deadline: datetime
    gpus: list[int]
    outputs: list[SyncedOutput]
    process: subprocess.Popen[bytes] | None = None
    stop_reason: str | None = None
    stopping: asyncio.Task[None] | None = None
    drain_until: float | None = None
    exit_queued: bool = False
    """Set once the exit is reported while the launcher still flushes (monotonic)."""
    last_upload: float = field(default_factory=time.monotonic)

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        try:
            process = psutil.Process(self.pid)
            same = abs(float(process.create_time()) - self.create_time) < 1.0
            return same and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


class LocalBackend:
    """Replicas as process groups on this machine."""

    name: BackendName = "local"

    def __init__(
        self,
        *,
        attempts_dir: Path,
        storage: Storage,
        cpus: float,
        memory_bytes: int,
        address: str = "127.0.0.1",
        gpus: tuple[str, int] = ("", 0),
        log_upload_seconds: float = 5.0,
        deadline_grace_seconds: float = 10.0,
        launcher: Callable[[str, Path], list[str]] | None = None,
    ) -> None:
        self._attempts_dir = attempts_dir
        self._storage = storage
        self._capacity = Resources(
            cpus=cpus,
            memory_bytes=memory_bytes,
            accelerator_type=gpus[0],
            accelerator_count=gpus[1],
        )
        self._address = address
        self._log_upload_seconds = log_upload_seconds
        self._deadline_grace = deadline_grace_seconds
        self._launcher = launcher or launcher_argv
        self._live: dict[ReplicaKey, _Attempt] = {}
        self._exits: asyncio.Queue[ReplicaExit] = asyncio.Queue()
        self._watcher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    # -- what it offers --------------------------------------------------------------------

    def capacity(self) -> Resources:
        """CPUs (cores x overcommit), memory and the GPUs NVML found."""
        return self._capacity

    def address(self) -> str:
        """Where other replicas reach this machine's replicas."""
        return self._address

    def running(self) -> list[ReplicaKey]:
        """The attempts whose program runs now."""
        return [key for key, attempt in self._live.items() if attempt.drain_until is None]

    # -- starting --------------------------------------------------------------------------

    async def start(self, command: StartReplica, launch: PreparedLaunch) -> None:
        """Spawn the launcher in a new session; returns once ``replica.json`` is written."""
        self._ensure_watching()
        async with self._lock:  # one start at a time: GPU indices are handed out here
            directory = launch.attempt_dir
            if await asyncio.to_thread(attempts.read_record, directory, attempts.REPLICA):
                return  # started before (maybe by a previous executor process)
            gpus = self._assign_gpus(launch.resources.accelerator_count)
            attempt = await asyncio.to_thread(self._spawn, command, launch, gpus)
            self._live[attempt.key] = attempt
        log.info(
            "executor.replica.spawned",
            job=launch.key.job_id,
            replica=launch.key.replica_name,
            attempt=launch.key.attempt,
            pid=attempt.pid,
        )

    def _assign_gpus(self, count: int) -> list[int]:
        if count == 0:
            return []
        used = {
            index
            for attempt in self._live.values()
            if attempt.drain_until is None
            for index in attempt.gpus
        }
        free = [i for i in range(self._capacity.accelerator_count) if i not in used]
        if len(free) < count:
            raise Rejected(f"{count} GPUs asked for, {len(free)} free on this executor")
        return free[:count]

    def _spawn(self, command: StartReplica, launch: PreparedLaunch, gpus: list[int]) -> _Attempt:
        directory = launch.attempt_dir
        local_logs = self._storage.local_path(launch.logs_uri)
        log_dir = local_logs if local_logs is not None else directory / "logs"
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SetupFailed(f"cannot create the log directory {log_dir}: {exc}") from exc
        exit_file = directory / attempts.EXIT
        # The executor's own settings (NATS, its id, storage) are not the replica's business.
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLDIAG_")}
        env.update(launch.env)
        env["MLDIAG_HOST"] = launch.key.replica_name
        if self._capacity.accelerator_count:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpus)
        env.setdefault("PYTHONUNBUFFERED", "1")
        argv = [*self._launcher(launch.key.replica_name, exit_file), "--", *launch.argv]
        with (
            (log_dir / "stdout.log").open("ab") as stdout,
            (log_dir / "stderr.log").open("ab") as stderr,
        ):
            for note in launch.notes:
                stderr.write(f"{note}\n".encode())
            stderr.flush()
            try:
                process = subprocess.Popen(  # the launcher, no shell
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=launch.working_dir,
                    env=env,
                    start_new_session=True,  # its own group: killed whole, outlives us
                )
            except OSError as exc:
                raise SetupFailed(f"cannot start the launcher: {exc}") from exc
        try:
            create_time = psutil.Process(process.pid).create_time()
        except psutil.Error:
            create_time = 0.0  # it ended already; poll() knows
        outputs = [SyncedOutput(local, uri) for local, uri in launch.outputs]
        attempt = _Attempt(
            key=launch.key,
            directory=directory,
            pid=process.pid,
            create_time=create_time,
            log_dir=log_dir,
            logs_uri=launch.logs_uri,
            uploaded=local_logs is None,
            deadline=command.deadline,
            gpus=gpus,
            outputs=outputs,
            process=process,
        )
        attempts.write_record(directory, attempts.REPLICA, _record_of(attempt))
        return attempt

    # -- stopping --------------------------------------------------------------------------

    async def stop(self, replica: ReplicaKey, grace_seconds: float) -> None:
        """SIGTERM to the group, ``grace_seconds``, SIGKILL; returns once it is gone."""
        await self._stop(replica, grace_seconds, "scheduler")

    async def _stop(self, replica: ReplicaKey, grace_seconds: float, reason: str) -> None:
        attempt = self._live.get(replica)
        if attempt is None:
            return
        if attempt.drain_until is not None:  # its end is reported: only the launcher is left
            signal_group(attempt.pid, signal.SIGKILL)
            return
        if attempt.stopping is None:
            attempt.stop_reason = reason
            attempt.stopping = asyncio.create_task(self._terminate(attempt, grace_seconds))
        await asyncio.shield(attempt.stopping)

    async def _terminate(self, attempt: _Attempt, grace_seconds: float) -> None:
        # Recorded first: an executor restarted meanwhile reports the end as a kill.
        record = {"reason": attempt.stop_reason, "at": datetime.now(UTC).isoformat()}
        await asyncio.to_thread(attempts.write_record, attempt.directory, attempts.STOP, record)
        pgid = attempt.pid
        signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline:
            await asyncio.sleep(min(POLL_SECONDS, grace_seconds))
            if attempt.process is not None:
                attempt.process.poll()  # reap the launcher, else it stays a member
            if not await asyncio.to_thread(group_members, pgid):
                break
        signal_group(pgid, signal.SIGKILL)
        while await asyncio.to_thread(group_members, pgid):
            await asyncio.sleep(0.05)
            if attempt.process is not None:
                attempt.process.poll()
        log.info("executor.replica.stopped", job=attempt.key.job_id, pid=pgid)
        if attempt.drain_until is None:
            self._live.pop(attempt.key, None)
            await self._report(attempt)

    # -- watching --------------------------------------------------------------------------

    def _ensure_watching(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch(), name="local-backend-watch")

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            now = datetime.now(UTC)
            for attempt in list(self._live.values()):
                try:
                    await self._check(attempt, now)
                except Exception:  # one attempt's trouble must not stop the rest
                    log.exception("executor.replica.check_failed", job=attempt.key.job_id)

    async def _check(self, attempt: _Attempt, now: datetime) -> None:
        alive = attempt.alive()
        if attempt.drain_until is not None:  # reported; its launcher is flushing telemetry
            if not alive or time.monotonic() >= attempt.drain_until:
                signal_group(attempt.pid, signal.SIGKILL)
                self._live.pop(attempt.key, None)
            return
        program_ended = await asyncio.to_thread((attempt.directory / attempts.EXIT).exists)
        if alive and not program_ended:
            if now >= attempt.deadline and attempt.stopping is None:
                asyncio.create_task(self._stop(attempt.key, self._deadline_grace, "deadline"))  # noqa: RUF006
            if (
                attempt.uploaded
                and time.monotonic() - attempt.last_upload > self._log_upload_seconds
            ):
                attempt.last_upload = time.monotonic()
                await self._upload_logs(attempt)
            return
        if attempt.stopping is not None and not attempt.stopping.done():
            return  # the stop reports it when the whole group is gone
        if alive:
            # The program ended and the launcher wrote its exit; it may still be sending
            # telemetry (to a platform that may be down): report now, reap it later.
            attempt.drain_until = time.monotonic() + DRAIN_SECONDS
        else:
            # The launcher is gone: whatever it left behind in its group goes too.
            signal_group(attempt.pid, signal.SIGKILL)
            self._live.pop(attempt.key, None)
        await self._report(attempt)

    async def _report(self, attempt: _Attempt) -> None:
        if attempt.exit_queued:  # the watcher and a stop may both get here
            return
        attempt.exit_queued = True
        if attempt.uploaded:
            await self._upload_logs(attempt)
        for output in attempt.outputs:
            try:
                await push_output(self._storage, output)
            except Exception:  # the exit still must be reported
                log.exception("executor.outputs.push_failed", uri=output.uri)
        self._exits.put_nowait(await asyncio.to_thread(self._exit_of, attempt))

    def _exit_of(self, attempt: _Attempt) -> ReplicaExit:
        record = attempts.read_record(attempt.directory, attempts.EXIT)
        stop = attempts.read_record(attempt.directory, attempts.STOP)
        stop_reason = attempt.stop_reason or (stop or {}).get("reason")
        returncode = attempt.process.returncode if attempt.process is not None else None
        exit_code: int | None = None
        message = ""
        ended_at = datetime.now(UTC)
        if record is not None:
            exit_code = record.get("exit_code")
            message = str(record.get("message") or "")
            with contextlib.suppress(TypeError, ValueError):
                ended_at = datetime.fromisoformat(str(record["ended_at"]))
        elif returncode is not None:
            exit_code = exit_status(returncode)
        reason: ExitReason
        if stop_reason is not None:
            reason = "killed"
            message = f"stopped ({stop_reason})" + (f"\n{message}" if message else "")
        elif record is not None or returncode is not None:
            reason = "exited"
        else:
            reason = "lost"
            message = "the launcher ended without writing its exit record"
        if record is None:
            message = (message + "\n" + tail(attempt.log_dir / "stderr.log")).strip()
        return ReplicaExit(attempt.key, reason, exit_code, message[-8000:], ended_at)

    async def _upload_logs(self, attempt: _Attempt) -> None:
        store, prefix = self._storage.gcs_object(attempt.logs_uri)
        prefix = prefix.rstrip("/")
        for name in ("stdout.log", "stderr.log"):
            path = attempt.log_dir / name
            if path.exists():
                try:
                    await store.upload_from(path, f"{prefix}/{name}")
                except Exception as exc:  # noqa: BLE001  # the next round tries again
                    log.warning("executor.logs.upload_failed", error=repr(exc))

    # -- recovery --------------------------------------------------------------------------

    async def recover(self) -> list[ReplicaKey]:
        """Re-adopt the attempts that still run; queue the exits of those that ended."""
        self._ensure_watching()
        adopted: list[ReplicaKey] = []
        directories = await asyncio.to_thread(
            lambda: sorted(self._attempts_dir.glob("*/")) if self._attempts_dir.exists() else []
        )
        for directory in directories:
            if (directory / attempts.REPORTED).exists():
                continue
            record = await asyncio.to_thread(attempts.read_record, directory, attempts.REPLICA)
            if record is None:
                continue
            try:
                attempt = _attempt_of(record, directory)
            except (KeyError, TypeError, ValueError):
                log.warning("executor.replica.unreadable", directory=str(directory))
                continue
            if attempt.key in self._live:
                continue
            stop = await asyncio.to_thread(attempts.read_record, directory, attempts.STOP)
            attempt.stop_reason = (stop or {}).get("reason")
            if attempt.alive():
                self._live[attempt.key] = attempt  # an exit written meanwhile: reported soon
                if not (directory / attempts.EXIT).exists():
                    adopted.append(attempt.key)
                if attempt.stop_reason is not None:  # a stop the previous process began
                    attempt.stopping = asyncio.create_task(self._terminate(attempt, 1.0))
                log.info("executor.replica.adopted", job=attempt.key.job_id, pid=attempt.pid)
            else:
                signal_group(attempt.pid, signal.SIGKILL)
                await self._report(attempt)
        return adopted

    async def exits(self) -> AsyncIterator[ReplicaExit]:
        """Ended attempts, each once per executor process (until :meth:`reported`)."""
        while True:
            yield await self._exits.get()

    async def reported(self, replica: ReplicaKey) -> None:
        """Mark the attempt's exit published."""
        directory = self._attempts_dir / attempt_name(replica)
        record = {"at": datetime.now(UTC).isoformat()}
        await asyncio.to_thread(attempts.write_record, directory, attempts.REPORTED, record)

    async def close(self) -> None:
        """Stop watching; the replicas keep running."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None


def launcher_argv(replica_name: str, exit_file: Path) -> list[str]:
    """The SDK's replica launcher, run by its path with this interpreter (which has the
    SDK), before ``-- <program>``: ``mldiag run --replica NAME --exit-file PATH`` that starts
    the program before importing the SDK (see ``mldiag.cli.replica_launcher``)."""
    return [
        sys.executable,
        str(_launcher_script()),
        "--replica",
        replica_name,
        "--exit-file",
        str(exit_file),
    ]


@functools.cache
def _launcher_script() -> Path:
    # Looked up once, not on every replica's start; find_spec of a top-level package finds
    # it without importing it.
    spec = importlib.util.find_spec("mldiag")
    if spec is None or spec.origin is None:
        raise SetupFailed("the SDK (its replica launcher) is not installed")
    return Path(spec.origin).parent.joinpath(*LAUNCHER)


def _record_of(attempt: _Attempt) -> dict[str, Any]:
    return {
        "key": attempt.key.model_dump(mode="json"),
        "pid": attempt.pid,
        "pgid": attempt.pid,
        "create_time": attempt.create_time,
        "host": socket.gethostname(),
        "log_dir": str(attempt.log_dir),
        "logs_uri": attempt.logs_uri,
        "uploaded": attempt.uploaded,
        "deadline": attempt.deadline.isoformat(),
        "gpus": attempt.gpus,
        "outputs": [{"local": str(o.local), "uri": o.uri} for o in attempt.outputs],
        "started_at": datetime.now(UTC).isoformat(),
    }


def _attempt_of(record: dict[str, Any], directory: Path) -> _Attempt:
    return _Attempt(
        key=ReplicaKey.model_validate(record["key"]),
        directory=directory,
        pid=int(record["pid"]),
        create_time=float(record["create_time"]),
        log_dir=Path(record["log_dir"]),
        logs_uri=str(record["logs_uri"]),
        uploaded=bool(record["uploaded"]),
        deadline=datetime.fromisoformat(record["deadline"]),
        gpus=[int(i) for i in record.get("gpus", [])],
        outputs=[SyncedOutput(Path(o["local"]), o["uri"]) for o in record.get("outputs", [])],
    )


def create(settings: "ExecutorSettings") -> LocalBackend:
    """The local backend of ``settings``: cores x overcommit, the host's memory, NVML's GPUs."""
    config = LaunchConfig(storage=Storage(settings.storage.url), state_dir=settings.state_dir)
    cpus = settings.cpus or float(os.cpu_count() or 1) * settings.cpu_overcommit
    memory = settings.memory_bytes or int(psutil.virtual_memory().total)
    return LocalBackend(
        attempts_dir=config.attempts_dir,
        storage=config.storage,
        cpus=cpus,
        memory_bytes=memory,
        address=settings.address or "127.0.0.1",
        gpus=discover_gpus(),
        log_upload_seconds=settings.log_upload_seconds,
        deadline_grace_seconds=settings.stop_grace_seconds,
    )
