"""Pre-warming: converting a landed session for XProf once, storing the results next to its
xplanes, so every instance that copies the session later opens it without converting.

A 25 MB xplane takes XProf ~4 s per tool on first open and ~0.3 s once cached; the cache is
relocatable (plain files in the session directory), so one conversion serves every instance
and every user. The conversion runs in its own process (``child.py``) behind the
``WarmRunner`` protocol: locally a subprocess here, a Kubernetes Job in another backend.

Order of work for a session: delete the caches stored for it before (XProf trusts a
session's caches whenever ``cache_version.txt`` is there, so those from fewer hosts would
pass for current), download its SUCCEEDED hosts' xplanes to a scratch directory, convert,
upload the new files with ``cache_version.txt`` after them and our own marker
(``<run>/warm/<session>.json``: the hosts the caches were made from) last, copy them into
running instances serving the run, then report ``prewarmed`` to the run-registry.

The marker, not the session's ``prewarmed`` flag, says whether the caches are current: a host
that lands after the first warm changes the hosts, and the session is warmed again. It lives
outside ``plugins/profile`` because XProf takes any file in a session directory for a host's.
"""

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple, Protocol

import structlog
from prometheus_client import Counter, Histogram
from pydantic import BaseModel, ConfigDict, ValidationError

from mldiag_platform.bus import MessagePublisher
from mldiag_platform.errors import NotFound
from mldiag_platform.storage import ObjectStore
from mldiag_schemas.profiling import (
    XPLANE_SUFFIX,
    ProfilerSession,
    ProfilerSessionHost,
    ProfilerSessionPhase,
    ProfilerSessionReport,
    ProfilerSessionReported,
    session_prefix,
)
from mldiag_xprof_provisioner.errors import WarmFailed
from mldiag_xprof_provisioner.files import (
    CACHE_MARKERS,
    CACHE_VERSION_FILE,
    log_tail,
    owned_directory,
)
from mldiag_xprof_provisioner.instances.service import XProfProvisioner
from mldiag_xprof_provisioner.locks import KeyedLocks
from mldiag_xprof_provisioner.orphans import child_environment
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from mldiag_xprof_provisioner.warm import child as warm_child

log = structlog.get_logger(__name__)

WARMS = Counter("mldiag_xprof_warms_total", "Pre-warm attempts by outcome.", ["outcome"])
WARM_SECONDS = Histogram(
    "mldiag_xprof_warm_seconds",
    "Pre-warming one session: download, conversion, upload.",
    buckets=(1, 2, 5, 10, 30, 60, 120, 300, 900),
)

TERMINAL_PHASES = frozenset({ProfilerSessionPhase.SUCCEEDED, ProfilerSessionPhase.FAILED})
_WARM_EVENTS = uuid.UUID("6f1d3c57-5d0e-4d87-9a43-2f5c0b1e7a11")
"""Namespace of the prewarmed reports' event ids: one per session, so redeliveries dedupe."""
MARKERS_FOLDER = "warm"
"""``<run>/warm/<session>.json``: what a session's stored caches were made from."""
_CACHE_SUFFIXES = (".SSTABLE",)
_ALL_HOSTS_PREFIX = "ALL_HOSTS."


class WarmedHost(BaseModel):
    """One host's xplane as the caches were made from it."""

    model_config = ConfigDict(frozen=True)

    file_uri: str
    size_bytes: int


class WarmMarker(BaseModel):
    """What a session's stored caches were made from, and which files they are."""

    model_config = ConfigDict(frozen=True)

    xprof: str
    hosts: dict[str, WarmedHost]
    files: list[str]
    """The cache files uploaded, ``cache_version.txt`` last."""


def marker_key(run_id: str, session_id: str) -> str:
    """Where the warm marker of a session is stored."""
    return f"{run_id}/{MARKERS_FOLDER}/{session_id}.json"


def warmed_hosts(session: ProfilerSession) -> dict[str, WarmedHost]:
    """The hosts a warm of ``session`` now would be made from."""
    return {
        host.host: WarmedHost(file_uri=host.file_uri, size_bytes=host.size_bytes)
        for host in succeeded_hosts(session)
    }


def is_cache_file(name: str, marker: WarmMarker | None = None) -> bool:
    """Whether a file of a session directory is one of the caches a warm makes (and a new
    warm replaces): XProf's markers, the trace viewer's tables, the all-hosts results."""
    return (
        name in CACHE_MARKERS
        or name.endswith(_CACHE_SUFFIXES)
        or name.startswith(_ALL_HOSTS_PREFIX)
        or (marker is not None and name in marker.files)
    )


def xprof_version() -> str:
    """The installed XProf's version, which its cache marker must carry."""
    from xprof import version  # type: ignore[import-untyped]  # noqa: PLC0415  # untyped

    return str(version.__version__)


def prewarmed_event_id(run_id: str, session_id: str) -> uuid.UUID:
    """The event id of a session's prewarmed report (the same for every attempt)."""
    return uuid.uuid5(_WARM_EVENTS, f"{run_id}/{session_id}")


def succeeded_hosts(session: ProfilerSession) -> list[ProfilerSessionHost]:
    """The hosts whose part of the session landed."""
    return [host for host in session.hosts if host.phase is ProfilerSessionPhase.SUCCEEDED]


def wants_warming(session: ProfilerSession) -> bool:
    """A session may want warming once it has ended with some host succeeded; whether it
    does is for its marker to say (a host may land after the first warm)."""
    return session.phase in TERMINAL_PHASES and bool(succeeded_hosts(session))


class WarmRunner(Protocol):
    """Runs the conversion of one session directory, somewhere its memory can be returned."""

    async def convert(self, directory: Path) -> dict[str, object]:
        """Write XProf's caches next to the xplanes in ``directory``; raise
        :class:`WarmFailed` when that fails. Cancelling it ends the conversion."""
        ...


class SubprocessWarmRunner:
    """``python -P -m mldiag_xprof_provisioner.warm.child DIR`` as a child process."""

    def __init__(self, python: str = sys.executable) -> None:
        self._python = python

    async def convert(self, directory: Path) -> dict[str, object]:
        """Run the child; a cancellation (the caller's timeout) kills its process group."""
        log_path = directory.parent / "warm.log"
        with log_path.open("wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                self._python,
                "-P",  # never import modules from the child's working directory
                "-m",
                warm_child.__name__,
                str(directory),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log_file,
                cwd=directory.parent,
                env=child_environment(),
                start_new_session=True,
            )
            try:
                stdout, _ = await process.communicate()
            except BaseException:
                # Timed out or shutting down: the child must not outlive the request for it.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
                raise
        if process.returncode != 0:
            raise WarmFailed(
                f"the conversion exited with status {process.returncode}. "
                f"Log tail:\n{log_tail(log_path)}"
            )
        try:
            summary = json.loads(stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {}
        return summary if isinstance(summary, dict) else {}


class WarmOutcome(NamedTuple):
    """What became of one session."""

    outcome: str
    """``warmed`` (``rewarmed`` when it replaced caches of other hosts), ``already_warmed``
    (the store had a current marker) or ``skipped``."""
    uploaded: int = 0
    """Cache files written to the store."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


class SessionWarmer:
    """Pre-warms sessions, ``warm_concurrency`` at a time."""

    def __init__(
        self,
        settings: XProfProvisionerSettings,
        store: ObjectStore,
        publisher: MessagePublisher,
        runner: WarmRunner,
        provisioner: XProfProvisioner,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._settings = settings
        self._store = store
        self._publisher = publisher
        self._runner = runner
        self._provisioner = provisioner
        self._clock = clock
        self._gate = asyncio.Semaphore(settings.warm_concurrency)
        self._sessions = KeyedLocks()

    async def warm(self, session: ProfilerSession) -> WarmOutcome:
        """Warm ``session`` unless its stored caches are current; report it prewarmed once
        they are stored.

        Raises :class:`WarmFailed` (or the store's error) when it could not; the caller
        logs and moves on, since the session still opens, only slower.
        """
        if not wants_warming(session):
            return WarmOutcome("skipped")
        # Two changes of one session in different batches must not convert side by side.
        async with self._sessions.hold([f"{session.run_id}/{session.session_id}"]):
            marker = await self._marker(session)
            current = marker is not None and _is_current(marker, session, await _version())
            if current and session.prewarmed:
                return WarmOutcome("skipped")  # the registry's echo of our own report
            async with self._gate:
                return await self._warm(session, marker, current=current)

    async def _warm(
        self, session: ProfilerSession, marker: WarmMarker | None, *, current: bool
    ) -> WarmOutcome:
        started = time.perf_counter()
        bound = log.bind(run_id=session.run_id, session_id=session.session_id)
        prefix = session_prefix(session.run_id, session.session_id)
        stale: set[str] = set()
        if current:
            outcome = WarmOutcome("already_warmed")
        else:
            stale = await self._delete_stale(session, prefix, marker)
            outcome = await self._convert_and_upload(session, prefix)
            if stale and outcome.outcome == "warmed":
                outcome = WarmOutcome("rewarmed", outcome.uploaded)
        # Instances that copied the old caches (or made their own from fewer hosts) get the
        # new ones in their place.
        await self._provisioner.sync_session(
            session.run_id,
            session.session_id,
            replace=(lambda name: is_cache_file(name, marker)) if stale else None,
        )
        if outcome.outcome != "skipped":
            await self._publisher.publish_many([self._report(session)])
        elapsed = time.perf_counter() - started
        WARMS.labels(outcome.outcome).inc()
        WARM_SECONDS.observe(elapsed)
        bound.info(
            "xprof.warm.done",
            outcome=outcome.outcome,
            uploaded=outcome.uploaded,
            deleted=len(stale),
            hosts=sorted(warmed_hosts(session)),
            duration_ms=round(elapsed * 1000, 1),
        )
        return outcome

    async def _marker(self, session: ProfilerSession) -> WarmMarker | None:
        try:
            raw = await self._store.get(marker_key(session.run_id, session.session_id))
        except NotFound:
            return None
        try:
            return WarmMarker.model_validate_json(raw)
        except ValidationError:
            return None  # unreadable: warm again, which rewrites it

    async def _delete_stale(
        self, session: ProfilerSession, prefix: str, marker: WarmMarker | None
    ) -> set[str]:
        """Delete the caches stored for the session before; returns their names.

        Our marker first and XProf's next: from then on nothing vouches for a half-deleted
        (or half-rewritten) set, so an instance copying meanwhile converts for itself.
        """
        await self._store.delete(marker_key(session.run_id, session.session_id))
        names = {
            key[len(prefix) :]
            for key in await self._store.list(prefix)
            if "/" not in key[len(prefix) :]
        }
        stale = {name for name in names if is_cache_file(name, marker)}
        ordered = sorted(stale, key=lambda name: (name not in CACHE_MARKERS, name))
        for name in ordered:
            await self._store.delete(prefix + name)
        return stale

    async def _convert_and_upload(self, session: ProfilerSession, prefix: str) -> WarmOutcome:
        # A provisioner killed mid-warm leaves this behind; its successor removes it.
        scratch = await asyncio.to_thread(owned_directory, self._provisioner.work_dir, "warm-")
        directory = scratch / session.session_id
        try:
            downloaded = await self._download(session, prefix, directory)
            if not downloaded:
                return WarmOutcome("skipped")
            limit = self._settings.warm_timeout_seconds
            try:
                async with asyncio.timeout(limit):
                    summary = await self._runner.convert(directory)
            except TimeoutError:
                raise WarmFailed(
                    f"the conversion took longer than {limit:g} s and was killed"
                ) from None
            log.debug("xprof.warm.converted", session_id=session.session_id, summary=summary)
            uploaded = await self._upload(session, prefix, directory, downloaded)
            return WarmOutcome("warmed", uploaded)
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, ignore_errors=True)

    async def _download(self, session: ProfilerSession, prefix: str, directory: Path) -> set[str]:
        await asyncio.to_thread(directory.mkdir)
        names: set[str] = set()
        for host in succeeded_hosts(session):
            name = host.host + XPLANE_SUFFIX
            try:
                await self._store.download_to(prefix + name, directory / name)
            except NotFound:
                log.warning(
                    "xprof.warm.xplane_missing",
                    run_id=session.run_id,
                    session_id=session.session_id,
                    host=host.host,
                )
                continue
            names.add(name)
        return names

    async def _upload(
        self, session: ProfilerSession, prefix: str, directory: Path, downloaded: set[str]
    ) -> int:
        def produced() -> list[Path]:
            return sorted(
                path
                for path in directory.iterdir()
                if path.is_file()
                and path.name not in downloaded
                and path.name not in CACHE_MARKERS
                and not path.name.startswith(".")
            )

        files = await asyncio.to_thread(produced)
        version_file = directory / CACHE_VERSION_FILE
        if not version_file.is_file():
            raise WarmFailed(f"the conversion wrote no {CACHE_VERSION_FILE}")
        # XProf's marker after the files it vouches for, ours after everything: a store
        # that has ours has every file it lists.
        uploaded = [*files, version_file]
        for path in uploaded:
            await self._store.upload_from(path, prefix + path.name)
        marker = WarmMarker(
            xprof=version_file.read_text().strip(),
            hosts=warmed_hosts(session),
            files=[path.name for path in uploaded],
        )
        key = marker_key(session.run_id, session.session_id)
        await self._store.put(key, marker.model_dump_json().encode())
        return len(uploaded)

    def _report(self, session: ProfilerSession) -> ProfilerSessionReported:
        """One SUCCEEDED host's part exactly as the registry has it, plus ``prewarmed``.

        The registry merges per host, newest ``update_time`` first: repeating the host's own
        fields at the session's ``update_time`` (no older than any host's) changes nothing
        but the flag, whatever order reports arrive in.
        """
        host = succeeded_hosts(session)[0]
        report = ProfilerSessionReport(
            session_id=session.session_id,
            kind=session.kind,
            host=host.host,
            phase=host.phase,
            start_time=host.start_time,
            end_time=host.end_time,
            duration_seconds=session.duration_seconds,
            tracer_levels=session.tracer_levels,
            file_uri=host.file_uri,
            size_bytes=host.size_bytes,
            storage_folder_uri=session.storage_folder_uri,
            error=host.error,
            operation=session.operation,
            prewarmed=True,
            update_time=session.update_time,
        )
        return ProfilerSessionReported(
            event_id=prewarmed_event_id(session.run_id, session.session_id),
            run_id=session.run_id,
            report=report,
            occurred_at=self._clock(),
        )


def _is_current(marker: WarmMarker, session: ProfilerSession, version: str) -> bool:
    return marker.xprof == version and marker.hosts == warmed_hosts(session)


async def _version() -> str:
    return await asyncio.to_thread(xprof_version)
