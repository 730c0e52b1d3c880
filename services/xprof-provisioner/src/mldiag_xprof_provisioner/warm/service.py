"""Pre-warming: converting a landed session for XProf once, storing the results next to its
xplanes, so every instance that copies the session later opens it without converting.

A 25 MB xplane takes XProf ~4 s per tool on first open and ~0.3 s once cached; the cache is
relocatable (plain files in the session directory), so one conversion serves every instance
and every user. The conversion runs in its own process (``child.py``) behind the
``WarmRunner`` protocol: locally a subprocess here, a Kubernetes Job in another backend.

Order of work for a session: download its SUCCEEDED hosts' xplanes to a scratch directory,
convert, upload the new files with ``cache_version.txt`` last (its presence in the store
means "warmed", which makes a redelivered message cheap), copy them into running instances
serving the run, then report ``prewarmed`` to the run-registry.
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
from mldiag_xprof_provisioner.instances.copies import OWNER_FILE, write_atomically
from mldiag_xprof_provisioner.instances.service import XProfProvisioner
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

CACHE_VERSION_FILE = warm_child.CACHE_VERSION_FILE
TERMINAL_PHASES = frozenset({ProfilerSessionPhase.SUCCEEDED, ProfilerSessionPhase.FAILED})
_WARM_EVENTS = uuid.UUID("6f1d3c57-5d0e-4d87-9a43-2f5c0b1e7a11")
"""Namespace of the prewarmed reports' event ids: one per session, so redeliveries dedupe."""
_LOG_TAIL_BYTES = 4096


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
    """A session is warmed once: when it has ended, some host succeeded, and nobody has."""
    return (
        session.phase in TERMINAL_PHASES
        and bool(succeeded_hosts(session))
        and not session.prewarmed
    )


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
                f"Log tail:\n{_tail(log_path)}"
            )
        try:
            summary = json.loads(stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {}
        return summary if isinstance(summary, dict) else {}


class WarmOutcome(NamedTuple):
    """What became of one session."""

    outcome: str
    """``warmed``, ``already_warmed`` (the store had the marker) or ``skipped``."""
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

    async def warm(self, session: ProfilerSession) -> WarmOutcome:
        """Warm ``session`` if it wants it; report it prewarmed once its caches are stored.

        Raises :class:`WarmFailed` (or the store's error) when it could not; the caller
        logs and moves on, since the session still opens, only slower.
        """
        if not wants_warming(session):
            return WarmOutcome("skipped")
        async with self._gate:
            started = time.perf_counter()
            bound = log.bind(run_id=session.run_id, session_id=session.session_id)
            prefix = session_prefix(session.run_id, session.session_id)
            if await self._marker_is_current(prefix):
                outcome = WarmOutcome("already_warmed")
            else:
                outcome = await self._convert_and_upload(session, prefix)
            await self._provisioner.sync_session(session.run_id, session.session_id)
            await self._publisher.publish_many([self._report(session)])
            elapsed = time.perf_counter() - started
            WARMS.labels(outcome.outcome).inc()
            WARM_SECONDS.observe(elapsed)
            bound.info(
                "xprof.warm.done",
                outcome=outcome.outcome,
                uploaded=outcome.uploaded,
                duration_ms=round(elapsed * 1000, 1),
            )
            return outcome

    async def _marker_is_current(self, prefix: str) -> bool:
        try:
            marker = await self._store.get(prefix + CACHE_VERSION_FILE)
        except NotFound:
            return False
        current = await asyncio.to_thread(xprof_version)
        return marker.decode(errors="replace").strip() == current

    async def _convert_and_upload(self, session: ProfilerSession, prefix: str) -> WarmOutcome:
        scratch = self._provisioner.work_dir / f"warm-{uuid.uuid4()}"
        directory = scratch / session.session_id
        try:
            downloaded = await self._download(session, prefix, scratch, directory)
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
            uploaded = await self._upload(prefix, directory, downloaded)
            return WarmOutcome("warmed", uploaded)
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, ignore_errors=True)

    async def _download(
        self, session: ProfilerSession, prefix: str, scratch: Path, directory: Path
    ) -> set[str]:
        def prepare() -> None:
            directory.mkdir(parents=True)
            # A provisioner killed mid-warm leaves this behind; its successor removes it.
            (scratch / OWNER_FILE).write_text(str(os.getpid()))

        await asyncio.to_thread(prepare)
        names: set[str] = set()
        for host in succeeded_hosts(session):
            name = host.host + XPLANE_SUFFIX
            try:
                data = await self._store.get(prefix + name)
            except NotFound:
                log.warning(
                    "xprof.warm.xplane_missing",
                    run_id=session.run_id,
                    session_id=session.session_id,
                    host=host.host,
                )
                continue
            await asyncio.to_thread(write_atomically, directory / name, data)
            names.add(name)
        return names

    async def _upload(self, prefix: str, directory: Path, downloaded: set[str]) -> int:
        def produced() -> list[Path]:
            return sorted(
                path
                for path in directory.iterdir()
                if path.is_file()
                and path.name not in downloaded
                and path.name != CACHE_VERSION_FILE
                and not path.name.startswith(".")
            )

        files = await asyncio.to_thread(produced)
        marker = directory / CACHE_VERSION_FILE
        if not marker.is_file():
            raise WarmFailed("the conversion wrote no cache_version.txt")
        # The marker last: a store that has it has every file it stands for.
        for path in [*files, marker]:
            data = await asyncio.to_thread(path.read_bytes)
            await self._store.put(prefix + path.name, data)
        return len(files) + 1

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


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - _LOG_TAIL_BYTES))
            text = file.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    # XProf's C++ logs every conversion step at INFO; the error is among the last lines.
    return "\n".join(text.splitlines()[-20:]) or "(empty log)"
