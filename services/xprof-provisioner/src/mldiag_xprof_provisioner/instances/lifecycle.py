"""One XProf instance's transitions: bringing it up (copying its runs, launching XProf,
waiting for it to answer), restarting it to recycle its memory, noticing that it crashed,
stopping it and tearing it down, and announcing each change.

``service.py`` decides which instances there are and when each starts, is recycled or
stops; ``InstanceLifecycle`` carries that out on one ``InstanceRecord`` at a time and tells
the provisioner (``on_ended``) when an instance has let go of its process and port. A start,
a recycle and a stop each run as a task kept on the record (``startup``, ``stopping``), which
any number of callers wait on (``settled``) without owning it.
"""

import asyncio
import shutil
import time
from collections.abc import Callable
from datetime import datetime

import structlog
from prometheus_client import Counter, Histogram

from mldiag_platform.bus import MessagePublisher
from mldiag_platform.errors import MldiagError
from mldiag_platform.storage import ObjectStore
from mldiag_schemas.profiling import XProfInstanceChanged, XProfInstanceState
from mldiag_xprof_provisioner.errors import XProfStartFailed
from mldiag_xprof_provisioner.instances import copies
from mldiag_xprof_provisioner.instances.backend import LaunchSpec, XProfLauncher, XProfProcess
from mldiag_xprof_provisioner.instances.records import InstanceRecord
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings

log = structlog.get_logger(__name__)

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
"""The states in which an instance holds its process and port (until its teardown ends)."""
LOG_FILE = "xprof.log"
"""Inside each instance directory: XProf's stdout and stderr."""


class InstanceLifecycle:
    """Moves instances from state to state; the provisioner owns the set of them."""

    def __init__(
        self,
        settings: XProfProvisionerSettings,
        store: ObjectStore,
        publisher: MessagePublisher,
        launcher: XProfLauncher,
        clock: Callable[[], datetime],
        on_ended: Callable[[InstanceRecord], None],
    ) -> None:
        self._settings = settings
        self._store = store
        self._publisher = publisher
        self._launcher = launcher
        self._clock = clock
        self._on_ended = on_ended

    def start(self, record: InstanceRecord, url: str) -> None:
        """Begin bringing a newly admitted instance up, to be served at ``url`` once RUNNING.

        It awaits nothing: the caller's check-then-admit stays one step.
        """
        record.startup = _watched(asyncio.create_task(self._bring_up(record, url)))

    def recycle(self, record: InstanceRecord) -> None:
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

    async def refresh(self, record: InstanceRecord) -> None:
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

    async def stop(self, record: InstanceRecord, reason: str) -> None:
        """Stop an active instance (or wait for the stop already under way); a stopped or
        failed one is left as it is."""
        if record.stopping is None:
            if record.state not in ACTIVE_STATES:
                return
            record.stopping = _watched(asyncio.create_task(self._shut_down(record, reason)))
        await asyncio.wait({record.stopping})

    async def settled(self, record: InstanceRecord) -> None:
        """Wait for a pending start (or recycle), then for a stop that may have begun."""
        if record.startup is not None:
            await asyncio.wait({record.startup})
        if record.stopping is not None:
            await asyncio.wait({record.stopping})

    async def _bring_up(self, record: InstanceRecord, url: str) -> None:
        started = time.perf_counter()
        await self._announce(record)
        try:
            files, size = await copies.copy_runs(self._store, record)
            await self._launch(record)
        except Exception as exc:  # noqa: BLE001  # whatever went wrong is the instance's FAILED reason
            await self._fail(record, exc)
            return
        record.state = XProfInstanceState.RUNNING
        record.url = url
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
            logdir=record.logdir,
            port=record.port,
            log_path=record.directory / LOG_FILE,
            secret=record.secret,
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

    async def _shut_down(self, record: InstanceRecord, reason: str) -> None:
        startup = record.startup
        if startup is not None and not startup.done():
            startup.cancel()
            await asyncio.wait({startup})
        if record.state in ACTIVE_STATES:
            record.log.info("xprof.instance.stopping", reason=reason)
            await self._teardown(record, XProfInstanceState.STOPPED, "")

    async def _teardown(
        self, record: InstanceRecord, state: XProfInstanceState, error: str
    ) -> None:
        """Stop the process, delete the copy, record ``state``, hand the port back (through
        ``on_ended``) and announce.

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
        record.state = state
        record.error = error
        record.url = ""
        record.memory_bytes = 0
        record.end_time = self._clock()
        self._on_ended(record)
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
