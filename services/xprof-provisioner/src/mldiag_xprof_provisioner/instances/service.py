"""XProf instances: admitting, copying sessions, bringing up, syncing, recycling, reaping
and stopping them.

No HTTP, no bus client and no process handling here: the provisioner depends on small
protocols (an object store, a message publisher, an XProf launcher) that ``app.py`` fills in.
The launcher behind ``XProfLauncher``/``XProfProcess`` (``backend.py``) is local processes
today (``process.py``); a Kubernetes backend (a pod per instance) fits the same two protocols.

An instance serves the sessions of one or more runs from its own writable copy of them
(``copies.py``), so XProf lists ``<run>/<session>``. State lives in memory (``records.py``)
because the XProf processes are this service's children: when it goes, they go (see
``child.py``), so there is nothing to recover on restart except the copies the previous
process left on disk.
"""

import asyncio
import re
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import structlog
from prometheus_client import Counter, Gauge, Histogram

from mldiag_platform.bus import MessagePublisher
from mldiag_platform.errors import MldiagError
from mldiag_platform.storage import ObjectStore
from mldiag_schemas.ids import is_run_id
from mldiag_schemas.profiling import (
    SESSION_ID_PATTERN,
    XProfInstance,
    XProfInstanceChanged,
    XProfInstanceState,
    session_prefix,
)
from mldiag_xprof_provisioner.errors import (
    InstanceNotFound,
    InstanceNotRunning,
    InvalidRunId,
    InvalidSessionId,
    NoFreePorts,
    RunNotFound,
    SessionNotFound,
    TooManyInstances,
    XProfStartFailed,
)
from mldiag_xprof_provisioner.instances import copies
from mldiag_xprof_provisioner.instances.backend import LaunchSpec, XProfLauncher, XProfProcess
from mldiag_xprof_provisioner.instances.records import InstanceRecord, Lease
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings

log = structlog.get_logger(__name__)

INSTANCES_ACTIVE = Gauge(
    "mldiag_xprof_instances_active", "XProf instances starting or running (holding ports)."
)
INSTANCE_START_SECONDS = Histogram(
    "mldiag_xprof_instance_start_seconds",
    "From request to a RUNNING instance: copying sessions and XProf's start-up.",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120),
)
INSTANCE_RECYCLES = Counter(
    "mldiag_xprof_instance_recycles_total",
    "XProf processes restarted for passing their memory cap.",
)
ACTIVE_STATES = frozenset({XProfInstanceState.STARTING, XProfInstanceState.RUNNING})
LOG_FILE = "xprof.log"
"""Inside each instance directory: XProf's stdout and stderr."""
PROXY_PREFIX = "/xprof"
"""Where the proxy serves instances: ``/xprof/<instance id>/<XProf path>``."""
UI_PATH = "data/plugin/profile/"
"""XProf's UI below an instance's root (its ``<base href>`` is derived from this)."""
_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def check_run_id(run_id: str) -> None:
    """Raise :class:`InvalidRunId` unless ``run_id`` is a valid run id."""
    if not is_run_id(run_id):
        raise InvalidRunId(
            f"invalid run id {run_id!r}: use lower-case letters, digits and '-' (max 63)"
        )


def check_session_id(session_id: str) -> None:
    """Raise :class:`InvalidSessionId` unless ``session_id`` names a session directory."""
    if not _SESSION_ID.fullmatch(session_id):
        raise InvalidSessionId(
            f"invalid session id {session_id!r}: letters, digits, '.', '_' and '-' (max 128),"
            " not starting with '.', '_' or '-'"
        )


class Started(NamedTuple):
    """The outcome of a start request."""

    instance: XProfInstance
    created: bool
    """False when an instance serving the runs was already starting or running."""


class OpenedSession(NamedTuple):
    """A session made ready to view: the instance serving it and the session's hosts."""

    instance: XProfInstance
    hosts: list[str]
    created: bool


def _utcnow() -> datetime:
    return datetime.now(UTC)


class XProfProvisioner:
    """Runs at most ``max_instances`` XProf servers, each serving some runs from its own copy."""

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
        self._instances: dict[str, InstanceRecord] = {}
        self._reserved_ports: set[int] = set()
        self._stop_listeners: list[Callable[[str], None]] = []

    @property
    def work_dir(self) -> Path:
        """Where instance copies (and pre-warm scratch directories) live."""
        return self._work_dir

    def on_stop(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(instance_id)`` whenever an instance has stopped or failed."""
        self._stop_listeners.append(listener)

    # -- requests -------------------------------------------------------------------------

    async def start(self, run_ids: Sequence[str]) -> Started:
        """Serve the sessions of ``run_ids``; reuse an instance (up or coming up) that serves
        all of them already, else start one."""
        for run_id in run_ids:
            check_run_id(run_id)
        wanted = tuple(sorted(set(run_ids)))
        if not wanted:
            raise InvalidRunId("name at least one run to serve")
        existing = self._active_serving(wanted)
        if existing is not None:
            await self._refresh(existing)  # a crashed XProf must not be handed out again
            existing = self._active_serving(wanted)
        # From here to create_task nothing awaits: two requests for one run cannot both admit.
        if existing is None:
            record = self._admit(wanted)
            record.startup = _watched(asyncio.create_task(self._bring_up(record)))
            created = True
        else:
            record = existing
            record.last_access_time = self._clock()
            created = False
        await self._settled(record)
        if record.state is XProfInstanceState.FAILED:
            raise XProfStartFailed(
                f"XProf for runs {', '.join(wanted)} did not start: {record.error}",
                details=[{"instance": record.name}],
            )
        return Started(record.snapshot(), created)

    async def open_session(self, run_id: str, session_id: str) -> OpenedSession:
        """Make a session viewable: find or start an instance serving its run, and make sure
        the session is in that instance's copy (it may have landed after the copy was made).

        Raises :class:`RunNotFound` / :class:`SessionNotFound` when the store has no xplane.
        """
        check_run_id(run_id)
        check_session_id(session_id)
        prefix = session_prefix(run_id, session_id)
        hosts = copies.session_hosts(await self._store.list(prefix), prefix)
        if not hosts:
            if not await self._store.list(copies.profile_prefix(run_id)):
                raise RunNotFound(f"run {run_id!r} has no profile sessions in storage")
            raise SessionNotFound(
                f"run {run_id!r} has no session {session_id!r} with a host's xplane"
            )
        started = await self.start([run_id])
        record = self._instances[started.instance.instance_id]
        if record.state is XProfInstanceState.RUNNING:
            await copies.copy_session(self._store, record, run_id, session_id)
        return OpenedSession(record.snapshot(), hosts, started.created)

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

    async def acquire(self, instance_id: str) -> Lease:
        """Hold a RUNNING instance for one proxied request (waiting out a start or a
        recycle); raise :class:`InstanceNotRunning` for one that stopped or failed."""
        record = self._record(instance_id)
        await self._refresh(record)
        if record.state is XProfInstanceState.STARTING:
            await self._settled(record)
        if record.state is not XProfInstanceState.RUNNING or record.stopping is not None:
            raise InstanceNotRunning(
                f"XProf instance {instance_id!r} is {record.state.value}: open the session"
                " again (/xprof/open) for a running one",
                details=[{"instance": record.name, "state": record.state.value}],
            )
        return Lease(record, self._clock)

    async def sync_session(
        self, run_id: str, session_id: str, replace: Callable[[str], bool] | None = None
    ) -> int:
        """Copy a session's new files (a host's xplane, pre-warmed caches) into every active
        instance serving its run; returns how many files were copied in all.

        XProf rescans its logdir on every ``runs`` call, so a copied session shows up on the
        next one. Files an instance has already are left alone: XProf may have written its
        own caches there, and a copy is never fresher than what it computed from the same
        xplanes. Except the files ``replace`` names (caches made from fewer hosts, say),
        which are deleted and copied anew.
        """
        check_run_id(run_id)
        check_session_id(session_id)
        records = [
            record
            for record in self._instances.values()
            if run_id in record.run_ids and record.state in ACTIVE_STATES
        ]
        copied = 0
        for record in records:
            # A starting instance may have listed the store before this session landed.
            await self._settled(record)
            if record.state is XProfInstanceState.RUNNING and record.stopping is None:
                copied += await copies.copy_session(
                    self._store, record, run_id, session_id, replace
                )
        return copied

    # -- lifecycle ------------------------------------------------------------------------

    async def remove_stale_copies(self) -> None:
        """Delete instance and pre-warm directories left by provisioners that are gone."""
        stale = await asyncio.to_thread(
            copies.stale_copies, self._work_dir, self._launcher.is_alive
        )
        for directory in stale:
            await asyncio.to_thread(shutil.rmtree, directory, ignore_errors=True)
            log.info("xprof.copy.stale_removed", directory=str(directory))

    async def reap(self) -> None:
        """Measure memory and recycle instances past their cap; stop instances idle for
        longer than the idle timeout; notice crashed ones; forget stopped ones after as long
        again."""
        now = self._clock()
        idle_after = self._settings.idle_timeout_seconds
        idle: list[InstanceRecord] = []
        for record in list(self._instances.values()):
            await self._refresh(record)
            if record.state is XProfInstanceState.RUNNING and record.stopping is None:
                self._measure(record)
                if record.in_flight:
                    continue  # in use: neither idle nor to be restarted under a request
                if (now - record.last_access_time).total_seconds() > idle_after:
                    idle.append(record)
                elif self._over_cap(record):
                    self._recycle(record)
            elif (
                record.end_time is not None and (now - record.end_time).total_seconds() > idle_after
            ):
                del self._instances[record.instance_id]
        await asyncio.gather(*(self._stop(record, reason="idle") for record in idle))

    async def run_reaper(self) -> None:
        """Reap forever (until cancelled), a few times per idle timeout and at least every
        ``memory_check_seconds``."""
        interval = min(
            self._settings.idle_timeout_seconds / 4, self._settings.memory_check_seconds, 30.0
        )
        interval = max(interval, 0.05)
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

    def _record(self, instance_id: str) -> InstanceRecord:
        record = self._instances.get(instance_id)
        if record is None:
            raise InstanceNotFound(f"no XProf instance {instance_id!r}")
        return record

    def _active_serving(self, run_ids: tuple[str, ...]) -> InstanceRecord | None:
        candidates = [
            record
            for record in self._instances.values()
            if record.serves(run_ids) and record.state in ACTIVE_STATES and record.stopping is None
        ]
        # The tightest fit: an instance of exactly these runs before a bigger one.
        return min(candidates, key=lambda r: (len(r.run_ids), r.create_time), default=None)

    def _active_count(self) -> int:
        # An instance being stopped still holds its process and port until it is STOPPED.
        return sum(1 for record in self._instances.values() if record.state in ACTIVE_STATES)

    def _admit(self, run_ids: tuple[str, ...]) -> InstanceRecord:
        limit = self._settings.max_instances
        if self._active_count() >= limit:
            raise TooManyInstances(
                f"the limit of {limit} XProf instances are running or starting: stop one, or "
                f"wait until an idle one is stopped (after "
                f"{self._settings.idle_timeout_seconds:g} s unused)"
            )
        port = self._allocate_port()
        instance_id = str(uuid.uuid4())
        now = self._clock()
        record = InstanceRecord(
            instance_id=instance_id,
            run_ids=run_ids,
            port=port,
            directory=self._work_dir / instance_id,
            create_time=now,
            last_access_time=now,
            memory_limit_bytes=self._settings.memory_limit_bytes,
            log=log.bind(instance_id=instance_id, run_ids=list(run_ids)),
        )
        self._instances[instance_id] = record
        self._reserved_ports.add(port)
        INSTANCES_ACTIVE.set(self._active_count())
        return record

    def _allocate_port(self) -> int:
        for port in self._settings.instance_ports:
            if port not in self._reserved_ports and self._launcher.port_is_free(port):
                return port
        ports = self._settings.instance_ports
        raise NoFreePorts(f"no free port left in {ports.start}-{ports.stop - 1} for another XProf")

    def _url(self, record: InstanceRecord) -> str:
        return f"{self._settings.base_url}{PROXY_PREFIX}/{record.instance_id}/{UI_PATH}"

    async def _bring_up(self, record: InstanceRecord) -> None:
        started = time.perf_counter()
        await self._announce(record)
        try:
            files, size = await copies.copy_runs(self._store, record)
            await self._launch(record)
        except Exception as exc:  # noqa: BLE001  # whatever went wrong is the instance's FAILED reason
            await self._fail(record, exc)
            return
        record.state = XProfInstanceState.RUNNING
        record.url = self._url(record)
        elapsed = time.perf_counter() - started
        INSTANCE_START_SECONDS.observe(elapsed)
        record.log.info(
            "xprof.instance.running",
            port=record.port,
            pid=record.process.pid if record.process else None,
            files=files,
            bytes=size,
            duration_ms=round(elapsed * 1000, 1),
        )
        await self._announce(record)

    async def _launch(self, record: InstanceRecord) -> None:
        spec = LaunchSpec(
            logdir=record.logdir, port=record.port, log_path=record.directory / LOG_FILE
        )
        record.process = await self._launcher.launch(spec)
        await self._wait_ready(record, record.process)
        record.memory_bytes = record.process.memory_bytes()

    async def _fail(self, record: InstanceRecord, exc: Exception) -> None:
        reason = exc.message if isinstance(exc, MldiagError) else f"{type(exc).__name__}: {exc}"
        record.log.warning("xprof.instance.start_failed", error=reason)
        await self._teardown(record, XProfInstanceState.FAILED, reason)

    async def _wait_ready(self, record: InstanceRecord, process: XProfProcess) -> None:
        limit = self._settings.startup_timeout_seconds
        try:
            async with asyncio.timeout(limit):
                await process.wait_ready()
        except TimeoutError:
            raise XProfStartFailed(
                f"XProf did not answer on port {record.port} within {limit:g} s. "
                f"Log tail:\n{process.log_tail()}"
            ) from None

    def _measure(self, record: InstanceRecord) -> None:
        if record.process is not None:
            record.memory_bytes = record.process.memory_bytes()

    def _over_cap(self, record: InstanceRecord) -> bool:
        limit = record.memory_limit_bytes
        return limit > 0 and record.memory_bytes > limit

    def _recycle(self, record: InstanceRecord) -> None:
        """Restart a RUNNING instance's XProf on the same logdir and port, keeping its id.

        XProf never returns the memory a large trace took, so the only way back under the
        cap is a fresh process; the caches it wrote stay in the logdir, so nothing already
        converted is converted again. It is called only while no request is in flight: a
        restart under a request would cut its answer, and the request itself is what grows
        the memory, so right after it is the moment to recycle.
        """
        record.log.info(
            "xprof.instance.recycling",
            memory_bytes=record.memory_bytes,
            memory_limit_bytes=record.memory_limit_bytes,
        )
        record.state = XProfInstanceState.STARTING
        record.startup = _watched(asyncio.create_task(self._restart(record)))

    async def _restart(self, record: InstanceRecord) -> None:
        started = time.perf_counter()
        await self._announce(record)
        try:
            if record.process is not None:
                await record.process.stop(self._settings.stop_grace_seconds)
            await self._launch(record)
        except Exception as exc:  # noqa: BLE001  # whatever went wrong is the instance's FAILED reason
            await self._fail(record, exc)
            return
        record.recycles += 1
        INSTANCE_RECYCLES.inc()
        record.state = XProfInstanceState.RUNNING
        record.log.info(
            "xprof.instance.recycled",
            recycles=record.recycles,
            memory_bytes=record.memory_bytes,
            duration_ms=round((time.perf_counter() - started) * 1000, 1),
        )
        await self._announce(record)

    async def _refresh(self, record: InstanceRecord) -> None:
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

    async def _stop(self, record: InstanceRecord, reason: str) -> None:
        if record.stopping is None:
            if record.state not in ACTIVE_STATES:
                return
            record.stopping = _watched(asyncio.create_task(self._shut_down(record, reason)))
        await asyncio.wait({record.stopping})

    async def _shut_down(self, record: InstanceRecord, reason: str) -> None:
        startup = record.startup
        if startup is not None and not startup.done():
            startup.cancel()
            await asyncio.wait({startup})
        if record.state in ACTIVE_STATES:
            record.log.info("xprof.instance.stopping", reason=reason)
            await self._teardown(record, XProfInstanceState.STOPPED, "")

    async def _settled(self, record: InstanceRecord) -> None:
        """Wait for a pending start (or recycle), then for a stop that may have begun."""
        if record.startup is not None:
            await asyncio.wait({record.startup})
        if record.stopping is not None:
            await asyncio.wait({record.stopping})

    async def _teardown(
        self, record: InstanceRecord, state: XProfInstanceState, error: str
    ) -> None:
        """Stop the process, delete the copy, free the port, record and announce ``state``.

        Every step tolerates its work having been half done by an interrupted teardown.
        """
        status = None
        if record.process is not None:
            status = await record.process.stop(self._settings.stop_grace_seconds)
        # No copy's write may land after the delete: none starts from now, and the ones in
        # threads (a cancelled start's, a sync's) finish first.
        record.closing = True
        if record.writes:
            await asyncio.wait(set(record.writes))
        await asyncio.to_thread(shutil.rmtree, record.directory, ignore_errors=True)
        self._reserved_ports.discard(record.port)
        record.state = state
        record.error = error
        record.url = ""
        record.memory_bytes = 0
        record.end_time = self._clock()
        INSTANCES_ACTIVE.set(self._active_count())
        for listener in self._stop_listeners:
            listener(record.instance_id)
        record.log.info("xprof.instance.stopped", state=state.value, exit_status=status)
        await self._announce(record)

    async def _announce(self, record: InstanceRecord) -> None:
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
