"""XProf instances: admitting, copying profiles, bringing up, reaping and stopping them.

No HTTP, no bus client and no process handling here: the provisioner depends on small
protocols (an object store, a message publisher, an XProf launcher) that ``app.py`` fills in.

State lives in memory because the XProf processes are this service's children: when it
goes, they go (see ``xprof_child``), so there is nothing to recover on restart except the
copies the previous process left on disk.
"""

import asyncio
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import NamedTuple, Protocol

import structlog
from prometheus_client import Gauge, Histogram

from mldiag_platform.bus import MessagePublisher
from mldiag_platform.errors import MldiagError
from mldiag_platform.storage import ObjectStore
from mldiag_schemas.ids import is_run_id
from mldiag_schemas.profiling import XProfInstance, XProfInstanceChanged, XProfInstanceState
from mldiag_xprof_provisioner.errors import (
    InstanceNotFound,
    InvalidRunId,
    NoFreePorts,
    TooManyInstances,
    XProfStartFailed,
)
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings

log = structlog.get_logger(__name__)

INSTANCES_ACTIVE = Gauge(
    "mldiag_xprof_instances_active", "XProf instances starting or running (holding ports)."
)
INSTANCE_START_SECONDS = Histogram(
    "mldiag_xprof_instance_start_seconds",
    "From request to a RUNNING instance: copying profiles and XProf's start-up.",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120),
)

ACTIVE_STATES = frozenset({XProfInstanceState.STARTING, XProfInstanceState.RUNNING})
OWNER_FILE = "owner.pid"
"""Inside each instance directory: the pid of the provisioner that made it."""
LOG_FILE = "xprof.log"
"""Inside each instance directory: XProf's stdout and stderr."""
_DOWNLOAD_CONCURRENCY = 8


@dataclass(frozen=True)
class LaunchSpec:
    """What an XProf process needs: a logdir, two ports, and a log file."""

    logdir: Path
    port: int
    grpc_port: int
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


class Started(NamedTuple):
    """The outcome of a start request."""

    instance: XProfInstance
    created: bool
    """False when an instance for the run was already starting or running."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(eq=False)
class _Instance:
    instance_id: str
    run_id: str
    port: int
    grpc_port: int
    directory: Path
    create_time: datetime
    last_access_time: datetime
    log: structlog.stdlib.BoundLogger
    state: XProfInstanceState = XProfInstanceState.STARTING
    url: str = ""
    error: str = ""
    end_time: datetime | None = None
    process: XProfProcess | None = None
    # Both tasks are awaited with asyncio.wait by any number of callers: a caller that goes
    # away (a client disconnecting) never cancels a half-done start or stop.
    startup: "asyncio.Task[None] | None" = None
    stopping: "asyncio.Task[None] | None" = None

    @property
    def name(self) -> str:
        return f"xprofInstances/{self.instance_id}"

    @property
    def logdir(self) -> Path:
        return self.directory / "logdir"

    def snapshot(self) -> XProfInstance:
        return XProfInstance(
            name=self.name,
            instance_id=self.instance_id,
            run_id=self.run_id,
            state=self.state,
            url=self.url,
            port=self.port,
            grpc_port=self.grpc_port,
            logdir=str(self.logdir),
            error=self.error,
            create_time=self.create_time,
            last_access_time=self.last_access_time,
        )


class XProfProvisioner:
    """Runs at most ``max_instances`` XProf servers, one per run, each on its own copy."""

    def __init__(
        self,
        settings: XProfProvisionerSettings,
        store: ObjectStore,
        publisher: MessagePublisher,
        launcher: XProfLauncher,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._settings = settings
        self._store = store
        self._publisher = publisher
        self._launcher = launcher
        self._clock = clock
        self._work_dir = settings.work_dir.resolve()
        self._instances: dict[str, _Instance] = {}
        self._reserved_ports: set[int] = set()

    # -- requests -------------------------------------------------------------------------

    async def start(self, run_id: str) -> Started:
        """Serve ``run_id``'s profiles; reuse the run's instance if one is up or coming up."""
        if not is_run_id(run_id):
            raise InvalidRunId(
                f"invalid run id {run_id!r}: use lower-case letters, digits and '-' (max 63)"
            )
        existing = self._active_for_run(run_id)
        if existing is not None:
            await self._refresh(existing)  # a crashed XProf must not be handed out again
            existing = self._active_for_run(run_id)
        # From here to create_task nothing awaits: two requests for one run cannot both admit.
        if existing is None:
            record = self._admit(run_id)
            record.startup = _watched(asyncio.create_task(self._bring_up(record)))
            created = True
        else:
            record = existing
            record.last_access_time = self._clock()
            created = False
        await self._settled(record)
        if record.state is XProfInstanceState.FAILED:
            raise XProfStartFailed(
                f"XProf for run {run_id!r} did not start: {record.error}",
                details=[{"instance": record.name}],
            )
        return Started(record.snapshot(), created)

    async def get(self, instance_id: str) -> XProfInstance:
        """One instance; reading it counts as use, so it postpones the idle stop."""
        record = self._record(instance_id)
        await self._refresh(record)
        record.last_access_time = self._clock()
        return record.snapshot()

    async def list_instances(self) -> list[XProfInstance]:
        """Every instance still remembered, oldest first (listing is not use)."""
        records = list(self._instances.values())
        await asyncio.gather(*(self._refresh(record) for record in records))
        return [record.snapshot() for record in sorted(records, key=lambda r: r.create_time)]

    async def stop(self, instance_id: str) -> XProfInstance:
        """Stop an instance and delete its copy; stopping a stopped one changes nothing."""
        record = self._record(instance_id)
        await self._stop(record, reason="requested")
        return record.snapshot()

    # -- lifecycle ------------------------------------------------------------------------

    async def remove_stale_copies(self) -> None:
        """Delete instance directories left by provisioners that are gone (crash, SIGKILL)."""

        def stale() -> list[Path]:
            if not self._work_dir.is_dir():
                return []
            found = []
            for directory in self._work_dir.iterdir():
                owner = directory / OWNER_FILE
                if not owner.is_file():
                    continue  # not one of ours: leave it alone
                text = owner.read_text().strip()
                if not text.isdigit() or not self._launcher.is_alive(int(text)):
                    found.append(directory)
            return found

        for directory in await asyncio.to_thread(stale):
            await asyncio.to_thread(shutil.rmtree, directory, ignore_errors=True)
            log.info("xprof.copy.stale_removed", directory=str(directory))

    async def reap(self) -> None:
        """Stop instances idle for longer than the idle timeout; notice crashed ones; forget
        stopped ones after as long again."""
        now = self._clock()
        idle_after = self._settings.idle_timeout_seconds
        idle: list[_Instance] = []
        for record in list(self._instances.values()):
            await self._refresh(record)
            if (
                record.state is XProfInstanceState.RUNNING
                and record.stopping is None
                and (now - record.last_access_time).total_seconds() > idle_after
            ):
                idle.append(record)
            elif (
                record.end_time is not None and (now - record.end_time).total_seconds() > idle_after
            ):
                del self._instances[record.instance_id]
        await asyncio.gather(*(self._stop(record, reason="idle") for record in idle))

    async def run_reaper(self) -> None:
        """Reap forever (until cancelled), a few times per idle timeout."""
        interval = min(max(self._settings.idle_timeout_seconds / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.reap()
            except Exception:  # the reaper must outlive one bad pass
                log.exception("xprof.reaper.failed")

    async def close(self) -> None:
        """Stop every instance: no XProf outlives the service."""
        records = [r for r in self._instances.values() if r.state in ACTIVE_STATES]
        await asyncio.gather(*(self._stop(record, reason="shutdown") for record in records))

    # -- internals ------------------------------------------------------------------------

    def _record(self, instance_id: str) -> _Instance:
        record = self._instances.get(instance_id)
        if record is None:
            raise InstanceNotFound(f"no XProf instance {instance_id!r}")
        return record

    def _active_for_run(self, run_id: str) -> _Instance | None:
        for record in self._instances.values():
            if (
                record.run_id == run_id
                and record.state in ACTIVE_STATES
                and record.stopping is None
            ):
                return record
        return None

    def _active_count(self) -> int:
        # An instance being stopped still holds its process and ports until it is STOPPED.
        return sum(1 for record in self._instances.values() if record.state in ACTIVE_STATES)

    def _admit(self, run_id: str) -> _Instance:
        limit = self._settings.max_instances
        if self._active_count() >= limit:
            raise TooManyInstances(
                f"the limit of {limit} XProf instances are running or starting: stop one, or "
                f"wait until an idle one is stopped (after "
                f"{self._settings.idle_timeout_seconds:g} s unused)"
            )
        port, grpc_port = self._allocate_ports()
        instance_id = str(uuid.uuid4())
        now = self._clock()
        record = _Instance(
            instance_id=instance_id,
            run_id=run_id,
            port=port,
            grpc_port=grpc_port,
            directory=self._work_dir / instance_id,
            create_time=now,
            last_access_time=now,
            log=log.bind(instance_id=instance_id, run_id=run_id),
        )
        self._instances[instance_id] = record
        self._reserved_ports.update((port, grpc_port))
        INSTANCES_ACTIVE.set(self._active_count())
        return record

    def _allocate_ports(self) -> tuple[int, int]:
        found: list[int] = []
        for port in self._settings.instance_ports:
            if port in self._reserved_ports or not self._launcher.port_is_free(port):
                continue
            found.append(port)
            if len(found) == 2:
                return found[0], found[1]
        ports = self._settings.instance_ports
        raise NoFreePorts(
            f"no two free ports left in {ports.start}-{ports.stop - 1} for another XProf"
        )

    async def _bring_up(self, record: _Instance) -> None:
        started = time.perf_counter()
        await self._announce(record)
        try:
            files, size = await self._copy_profiles(record)
            record.process = await self._launcher.launch(
                LaunchSpec(
                    logdir=record.logdir,
                    port=record.port,
                    grpc_port=record.grpc_port,
                    log_path=record.directory / LOG_FILE,
                )
            )
            await self._wait_ready(record, record.process)
        except Exception as exc:  # noqa: BLE001  # whatever went wrong is the instance's FAILED reason
            reason = exc.message if isinstance(exc, MldiagError) else f"{type(exc).__name__}: {exc}"
            record.log.warning("xprof.instance.start_failed", error=reason)
            await self._teardown(record, XProfInstanceState.FAILED, reason)
            return
        record.state = XProfInstanceState.RUNNING
        record.url = f"http://{self._settings.advertised_host}:{record.port}/"
        elapsed = time.perf_counter() - started
        INSTANCE_START_SECONDS.observe(elapsed)
        record.log.info(
            "xprof.instance.running",
            port=record.port,
            grpc_port=record.grpc_port,
            pid=record.process.pid,
            files=files,
            bytes=size,
            duration_ms=round(elapsed * 1000, 1),
        )
        await self._announce(record)

    async def _wait_ready(self, record: _Instance, process: XProfProcess) -> None:
        limit = self._settings.startup_timeout_seconds
        try:
            async with asyncio.timeout(limit):
                await process.wait_ready()
        except TimeoutError:
            raise XProfStartFailed(
                f"XProf did not answer on port {record.port} within {limit:g} s. "
                f"Log tail:\n{process.log_tail()}"
            ) from None

    async def _copy_profiles(self, record: _Instance) -> tuple[int, int]:
        """Download the run's profile tree into the instance's own writable logdir.

        XProf writes its caches next to each xplane and shows nothing on read-only data;
        a private copy also keeps one instance from reading another run's files.
        """
        prefix = f"{record.run_id}/plugins/profile/"
        profile_root = record.logdir / "plugins" / "profile"

        def prepare() -> None:
            profile_root.mkdir(parents=True)  # XProf refuses a logdir that does not exist
            (record.directory / OWNER_FILE).write_text(str(os.getpid()))

        await asyncio.to_thread(prepare)
        keys = await self._store.list(prefix)
        targets = [(key, _target(profile_root, key[len(prefix) :])) for key in keys]
        wanted = [(key, target) for key, target in targets if target is not None]
        gate = asyncio.Semaphore(_DOWNLOAD_CONCURRENCY)

        async def fetch(key: str, target: Path) -> int:
            async with gate:
                data = await self._store.get(key)
                await asyncio.to_thread(_write_file, target, data)
                return len(data)

        sizes = await asyncio.gather(*(fetch(key, target) for key, target in wanted))
        record.log.debug("xprof.copy.done", files=len(wanted), bytes=sum(sizes))
        return len(wanted), sum(sizes)

    async def _refresh(self, record: _Instance) -> None:
        """Notice an XProf that died on its own: it is FAILED, with its last words."""
        process = record.process
        if (
            record.state is not XProfInstanceState.RUNNING
            or record.stopping is not None
            or process is None
            or process.returncode is None
        ):
            return
        reason = f"XProf exited with status {process.returncode}. Log tail:\n{process.log_tail()}"
        record.log.warning("xprof.instance.crashed", status=process.returncode)
        record.stopping = _watched(
            asyncio.create_task(self._teardown(record, XProfInstanceState.FAILED, reason))
        )
        await asyncio.wait({record.stopping})

    async def _stop(self, record: _Instance, reason: str) -> None:
        if record.stopping is None:
            if record.state not in ACTIVE_STATES:
                return
            record.stopping = _watched(asyncio.create_task(self._shut_down(record, reason)))
        await asyncio.wait({record.stopping})

    async def _shut_down(self, record: _Instance, reason: str) -> None:
        startup = record.startup
        if startup is not None and not startup.done():
            startup.cancel()
            await asyncio.wait({startup})
        if record.state in ACTIVE_STATES:
            record.log.info("xprof.instance.stopping", reason=reason)
            await self._teardown(record, XProfInstanceState.STOPPED, "")

    async def _settled(self, record: _Instance) -> None:
        """Wait for a pending start, then for a stop that may have begun meanwhile."""
        if record.startup is not None:
            await asyncio.wait({record.startup})
        if record.stopping is not None:
            await asyncio.wait({record.stopping})

    async def _teardown(self, record: _Instance, state: XProfInstanceState, error: str) -> None:
        """Stop the process, delete the copy, free the ports, record and announce ``state``.

        Every step tolerates its work having been half done by an interrupted teardown.
        """
        status = None
        if record.process is not None:
            status = await record.process.stop(self._settings.stop_grace_seconds)
        await asyncio.to_thread(shutil.rmtree, record.directory, ignore_errors=True)
        self._reserved_ports.difference_update((record.port, record.grpc_port))
        record.state = state
        record.error = error
        record.url = ""
        record.end_time = self._clock()
        INSTANCES_ACTIVE.set(self._active_count())
        record.log.info("xprof.instance.stopped", state=state.value, exit_status=status)
        await self._announce(record)

    async def _announce(self, record: _Instance) -> None:
        message = XProfInstanceChanged(instance=record.snapshot(), occurred_at=self._clock())
        try:
            await self._publisher.publish_many([message])
        except Exception as exc:  # noqa: BLE001  # the in-memory state is the truth; the message is news
            record.log.warning(
                "xprof.instance.announce_failed", state=record.state.value, error=repr(exc)
            )


def _watched(task: "asyncio.Task[None]") -> "asyncio.Task[None]":
    """Log a start or stop task that crashed: callers wait on it but never read its result."""

    def report(done: "asyncio.Task[None]") -> None:
        if not done.cancelled() and (exc := done.exception()) is not None:
            log.error("xprof.instance.task_crashed", task=done.get_name(), exc_info=exc)

    task.add_done_callback(report)
    return task


def _target(root: Path, relative: str) -> Path | None:
    """Where an object lands under ``root``; ``None`` for keys that are not plain files."""
    if not relative or relative.endswith("/"):
        return None  # a "directory" placeholder object
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts:
        return None  # never write outside the copy, whatever a bucket lists
    return root.joinpath(*path.parts)


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
