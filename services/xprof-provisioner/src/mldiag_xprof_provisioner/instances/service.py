"""XProf instances as a set: admitting them (the instance limit, ports), finding the one that
serves some runs, the requests on them (start, open a session, get, list, stop, a proxied
request's lease), syncing sessions that land later into them, and the housekeeping that
recycles, stops and forgets them (the reaper).

Each instance's own transitions (bringing it up, a recycle's restart, a crash, a stop and its
teardown, the announcements) are carried out by ``lifecycle.py``; this module decides when.

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
import secrets
import shutil
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import structlog
from prometheus_client import Gauge

from mldiag_platform.bus import MessagePublisher
from mldiag_platform.storage import ObjectStore
from mldiag_schemas.ids import is_run_id
from mldiag_schemas.profiling import (
    SESSION_ID_PATTERN,
    XProfInstance,
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
from mldiag_xprof_provisioner.instances.backend import XProfLauncher
from mldiag_xprof_provisioner.instances.lifecycle import ACTIVE_STATES, InstanceLifecycle
from mldiag_xprof_provisioner.instances.records import InstanceRecord, Lease
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings

log = structlog.get_logger(__name__)

INSTANCES_ACTIVE = Gauge(
    "mldiag_xprof_instances_active", "XProf instances starting or running (holding ports)."
)
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
        self._launcher = launcher
        self._clock = clock
        self._work_dir = settings.work_dir.resolve()
        self._instances: dict[str, InstanceRecord] = {}
        self._reserved_ports: set[int] = set()
        self._stop_listeners: list[Callable[[str], None]] = []
        self._lifecycle = InstanceLifecycle(
            settings, store, publisher, launcher, clock, on_ended=self._ended
        )

    @property
    def work_dir(self) -> Path:
        """Where instance copies (and pre-warm scratch directories) live."""
        return self._work_dir

    def on_stop(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(instance_id)`` whenever an instance has stopped or failed."""
        self._stop_listeners.append(listener)

    # -- requests -------------------------------------------------------------------------

    async def start(self, run_ids: Sequence[str], caller: str) -> Started:
        """Serve the sessions of ``run_ids`` for ``caller`` (a token id); reuse an instance (up
        or coming up) that serves all of them already, else start one.

        Raises :class:`RunNotFound` for a run with no host's xplane in storage: an instance
        that would serve nothing is never started (nor a slot taken for it).
        """
        for run_id in run_ids:
            check_run_id(run_id)
        wanted = tuple(sorted(set(run_ids)))
        if not wanted:
            raise InvalidRunId("name at least one run to serve")
        found = await asyncio.gather(*(self._has_profiles(run_id) for run_id in wanted))
        if missing := [run_id for run_id, has in zip(wanted, found, strict=True) if not has]:
            raise RunNotFound(
                f"no profile session in storage for run {', '.join(missing)}: there is nothing"
                " for XProf to serve",
                details=[{"runId": run_id} for run_id in missing],
            )
        return await self._start(wanted, caller)

    async def open_session(self, run_id: str, session_id: str, caller: str) -> OpenedSession:
        """Make a session viewable for ``caller``: find or start an instance serving its run,
        and make sure the session is in that instance's copy (it may have landed after the
        copy was made).

        Raises :class:`RunNotFound` / :class:`SessionNotFound` when the store has no xplane.
        """
        check_run_id(run_id)
        check_session_id(session_id)
        prefix = session_prefix(run_id, session_id)
        hosts = copies.session_hosts(await self._store.list(prefix), prefix)
        if not hosts:
            if not await self._has_profiles(run_id):
                raise RunNotFound(f"run {run_id!r} has no profile sessions in storage")
            raise SessionNotFound(
                f"run {run_id!r} has no session {session_id!r} with a host's xplane"
            )
        started = await self._start((run_id,), caller)
        record = self._instances[started.instance.instance_id]
        if record.state is XProfInstanceState.RUNNING:
            await copies.copy_session(self._store, record, run_id, session_id)
        return OpenedSession(record.snapshot(), hosts, started.created)

    async def get(self, instance_id: str) -> XProfInstance:
        """One instance; reading it counts as use, so it postpones the idle stop."""
        record = self._record(instance_id)
        await self._lifecycle.refresh(record)
        record.last_access_time = self._clock()
        return record.snapshot()

    async def list_instances(self) -> list[XProfInstance]:
        """Every instance still remembered, oldest first (listing is not use)."""
        records = list(self._instances.values())
        await asyncio.gather(*(self._lifecycle.refresh(record) for record in records))
        return [record.snapshot() for record in sorted(records, key=lambda r: r.create_time)]

    async def stop(self, instance_id: str) -> XProfInstance:
        """Stop an instance and delete its copy; stopping a stopped one changes nothing."""
        record = self._record(instance_id)
        await self._lifecycle.stop(record, reason="requested")
        return record.snapshot()

    async def acquire(self, instance_id: str) -> Lease:
        """Hold a RUNNING instance for one proxied request (waiting out a start or a
        recycle); raise :class:`InstanceNotRunning` for one that stopped or failed."""
        record = self._record(instance_id)
        await self._lifecycle.refresh(record)
        if record.state is XProfInstanceState.STARTING:
            await self._lifecycle.settled(record)
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
            await self._lifecycle.settled(record)
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
            await self._lifecycle.refresh(record)
            if record.state is XProfInstanceState.RUNNING and record.stopping is None:
                self._measure(record)
                if record.in_flight:
                    continue  # in use: neither idle nor to be restarted under a request
                if (now - record.last_access_time).total_seconds() > idle_after:
                    idle.append(record)
                elif self._over_cap(record):
                    self._lifecycle.recycle(record)
            elif (
                record.end_time is not None and (now - record.end_time).total_seconds() > idle_after
            ):
                del self._instances[record.instance_id]
        await asyncio.gather(*(self._lifecycle.stop(record, reason="idle") for record in idle))

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
        await asyncio.gather(
            *(self._lifecycle.stop(record, reason="shutdown") for record in records)
        )

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

    async def _has_profiles(self, run_id: str) -> bool:
        return copies.has_xplane(await self._store.list(copies.profile_prefix(run_id)), run_id)

    async def _start(self, wanted: tuple[str, ...], caller: str) -> Started:
        existing = self._active_serving(wanted)
        if existing is not None:
            await self._lifecycle.refresh(existing)  # a crashed XProf must not be handed out again
        # Each pass reuses, admits, or stops one instance to make room and looks again. From
        # the check until the lifecycle has the start under way nothing awaits: two requests
        # for one run cannot both admit. Passes are bounded: others may take the room made.
        for _ in range(self._settings.max_instances + 1):
            record = self._active_serving(wanted)
            if record is not None:
                record.last_access_time = self._clock()
                created = False
                break
            victim = self._make_room(caller)
            if victim is None:
                record = self._admit(wanted, caller)
                self._lifecycle.start(record, self._url(record))
                created = True
                break
            await self._lifecycle.stop(victim, reason="evicted")
        else:
            raise self._too_many("instances are being started and stopped by others right now")
        await self._lifecycle.settled(record)
        if record.state is XProfInstanceState.FAILED:
            raise XProfStartFailed(
                f"XProf for runs {', '.join(wanted)} did not start: {record.error}",
                details=[{"instance": record.name}],
            )
        return Started(record.snapshot(), created)

    def _make_room(self, caller: str) -> InstanceRecord | None:
        """The instance to stop before ``caller`` may start one (``None``: there is room), or
        raise :class:`TooManyInstances`.

        A caller at its own limit recycles its least recently used idle instance; when every
        slot is taken, the caller's own idle instances go first, then another caller's that
        has been unused for ``eviction_idle_seconds``. So one caller's flood takes at most
        its share, and nobody waits for the idle timeout behind instances nobody reads.
        """
        active = [r for r in self._instances.values() if r.state in ACTIVE_STATES]
        mine = [r for r in active if r.owner == caller]
        per_caller = self._settings.max_instances_per_caller
        if len(mine) >= per_caller:
            victim = _stopping(mine) or _least_recently_used(mine, self._clock(), 0.0)
            if victim is None:
                raise self._too_many(
                    f"you have {per_caller} instances starting or answering requests, the"
                    " most one caller may have: stop one, or try again once a request ends",
                    scope="caller",
                )
            return victim
        if len(active) < self._settings.max_instances:
            return None
        idle_after = self._settings.eviction_idle_seconds
        victim = (
            _stopping(active)
            or _least_recently_used(mine, self._clock(), 0.0)
            or _least_recently_used(active, self._clock(), idle_after)
        )
        if victim is None:
            raise self._too_many(
                f"every one is starting or was used in the last {idle_after:g} s; try again"
                " shortly (an instance unused for that long makes room)"
            )
        return victim

    def _too_many(self, why: str, scope: str = "service") -> TooManyInstances:
        limit = (
            self._settings.max_instances_per_caller
            if scope == "caller"
            else self._settings.max_instances
        )
        return TooManyInstances(
            f"no room for another XProf instance: {why}",
            details=[{"scope": scope, "limit": limit}],
        )

    def _active_count(self) -> int:
        # An instance being stopped still holds its process and port until it is STOPPED.
        return sum(1 for record in self._instances.values() if record.state in ACTIVE_STATES)

    def _admit(self, run_ids: tuple[str, ...], caller: str) -> InstanceRecord:
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
            owner=caller,
            secret=secrets.token_urlsafe(32),
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

    def _measure(self, record: InstanceRecord) -> None:
        if record.process is not None:
            record.memory_bytes = record.process.memory_bytes()

    def _over_cap(self, record: InstanceRecord) -> bool:
        limit = record.memory_limit_bytes
        return limit > 0 and record.memory_bytes > limit

    def _ended(self, record: InstanceRecord) -> None:
        # The lifecycle's teardown is done with the process: the port and the slot are free.
        self._reserved_ports.discard(record.port)
        INSTANCES_ACTIVE.set(self._active_count())
        for listener in self._stop_listeners:
            listener(record.instance_id)


def _stopping(records: Sequence[InstanceRecord]) -> InstanceRecord | None:
    """One being stopped already: waiting for it makes room sooner than stopping another."""
    return next((record for record in records if record.stopping is not None), None)


def _least_recently_used(
    records: Sequence[InstanceRecord], now: datetime, idle_seconds: float
) -> InstanceRecord | None:
    """The RUNNING instance answering no request and unused longest, if that is at least
    ``idle_seconds``; ``None`` when there is none."""
    idle = [
        record
        for record in records
        if record.state is XProfInstanceState.RUNNING
        and record.stopping is None
        and record.in_flight == 0
        and (now - record.last_access_time).total_seconds() >= idle_seconds
    ]
    return min(idle, key=lambda record: record.last_access_time, default=None)
