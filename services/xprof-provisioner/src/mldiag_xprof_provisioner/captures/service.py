"""Profile captures: from a :class:`CaptureProfile` command to per-host xplanes in the object
store, one :class:`ProfilerSessionReported` per requested host and a
:class:`ProfileCaptureFinished`.

No bus client and no process handling here: the runner publishes through the
``MessagePublisher`` protocol and reaches workloads through a :class:`TraceClient`
(``process.SubprocessTraceClient`` runs XProf's capture client in a child process).

What the capture client does, and what the runner does about it (xprof 2.24.2):

- a target that is down fails in milliseconds with the same vague ``UNAVAILABLE: No trace
  event was collected`` as a busy one, and in a multi-host capture it is silently missing:
  the runner probes every target's port first, captures only those that answer, and compares
  the written files with the requested hosts;
- a target already tracing (a second capture, or the workload's own ``start_trace``) answers
  ``Another profiling session active``; the client retries at once, so its attempts do not
  outlast a programmatic trace. Our own captures never collide (one per target at a time);
  the programmatic ones become ``target_busy``, not retried blindly;
- multi-host captures start ~3 s late whatever ``delay_ms`` says;
- each host's file is ``<address with ':' as '_'>.xplane.pb`` (one host or several).
"""

import asyncio
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import structlog
from prometheus_client import Counter, Histogram
from pydantic import BaseModel, ConfigDict

from mldiag_platform.bus import MessagePublisher
from mldiag_platform.errors import NotFound
from mldiag_platform.storage import ObjectStore
from mldiag_schemas.profiling import (
    XPLANE_SUFFIX,
    CaptureProfile,
    CaptureTarget,
    ProfileCaptureFinished,
    ProfilerSessionPhase,
    ProfilerSessionReport,
    ProfilerSessionReported,
    TracerLevels,
    session_prefix,
)
from mldiag_xprof_provisioner.captures.settings import CaptureSettings
from mldiag_xprof_provisioner.files import owned_directory
from mldiag_xprof_provisioner.locks import KeyedLocks

log = structlog.get_logger(__name__)

CAPTURES = Counter(
    "mldiag_xprof_captures_total", "Capture commands handled, by outcome.", ["outcome"]
)
CAPTURE_SECONDS = Histogram(
    "mldiag_xprof_capture_seconds",
    "From a capture command to its outcome: waiting for the targets, tracing, uploading.",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600),
)

CAPTURE_FAILED = "capture_failed"
TARGET_BUSY = "target_busy"
TARGETS_MISSING = "targets_missing"
UPLOAD_FAILED = "upload_failed"

MULTI_HOST_DELAY_SECONDS = 3.0
"""How late the client starts a trace of several hosts (it turns ``delay_ms=0`` into 3000)."""
RECORDS_FOLDER = "captures"
"""``<run>/captures/<command event id>.json``: what a command published, for redeliveries.
Outside ``plugins/profile`` so that XProf never sees it."""

_ADDRESS = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.\-]*):[0-9]{1,5}$")
_BUSY_SIGN = "another profiling session"
_MESSAGE_LIMIT = 4000


@dataclass(frozen=True)
class TraceRequest:
    """One run of the capture client over the targets that answered their probe."""

    addresses: tuple[str, ...]
    session_id: str
    duration_ms: int
    attempts: int
    tracer_levels: TracerLevels
    timeout_seconds: float
    work_dir: Path
    """An empty directory of the capture's own: the client's logdir, log and result."""


@dataclass(frozen=True)
class TraceResult:
    """What the capture client did."""

    files: dict[str, Path]
    """The xplane written for each address that produced one."""
    error: str = ""
    """The client's own error (or why it did not finish); empty when it returned."""
    timed_out: bool = False
    host_errors: dict[str, str] = field(default_factory=dict)
    """What an address answered when it produced nothing (e.g. another session active)."""
    started_at: datetime | None = None
    """When the trace that produced the files began."""


class TraceClient(Protocol):
    """Reaches workloads' profiler servers."""

    async def probe(self, address: str) -> str | None:
        """``None`` when ``address`` accepts a TCP connection, else why not."""
        ...

    async def trace(self, request: TraceRequest) -> TraceResult:
        """Trace ``request.addresses`` into ``request.work_dir`` and say what came of it."""
        ...


class _Record(BaseModel):
    """What a command published, kept in the store so a redelivery republishes the same."""

    model_config = ConfigDict(frozen=True)

    reports: list[ProfilerSessionReported]
    finished: ProfileCaptureFinished


@dataclass
class _Host:
    """One requested host's part of a capture, as it goes."""

    target: CaptureTarget
    error_code: str = ""
    error: str = ""
    data_file: Path | None = None
    key: str = ""
    size_bytes: int = 0

    @property
    def label(self) -> str:
        return f"{self.target.host} ({self.target.address})"

    def fail(self, code: str, error: str) -> None:
        self.error_code, self.error = code, error[:_MESSAGE_LIMIT]


@dataclass(frozen=True)
class _Outcome:
    hosts: list[_Host]
    started_at: datetime | None = None


class CaptureRunner:
    """Runs capture commands: one capture per target at a time, a few at once overall.

    Idempotent per command: its reports and outcome carry event ids derived from the
    command's, and what it published is recorded in the store, so a redelivered command
    republishes the same messages (JetStream drops the repeats) instead of capturing again.
    """

    def __init__(
        self,
        settings: CaptureSettings,
        store: ObjectStore,
        publisher: MessagePublisher,
        client: TraceClient,
        work_dir: Path | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._publisher = publisher
        self._client = client
        # The provisioner's work dir, where a successor removes what a crash left behind.
        self._scratch = settings.scratch_dir or work_dir or Path(tempfile.gettempdir())
        self._targets = KeyedLocks()
        self._commands = KeyedLocks()
        self._slots = asyncio.Semaphore(settings.max_concurrent)

    async def run(self, command: CaptureProfile) -> ProfileCaptureFinished:
        """Capture, upload, publish each host's report and then the outcome; return it.

        Capture problems are outcomes (``error_code`` set), not exceptions, even unexpected
        ones: a command that raised would be redelivered, dead-lettered at last, and its
        operation never finish. It raises only when publishing fails, so that the command is
        retried.
        """
        bound = log.bind(
            run=command.run_id,
            session=command.session_id,
            operation=command.operation,
            command=str(command.event_id),
        )
        # A duplicate of a command in hand waits for it, then finds its record.
        async with self._commands.hold([str(command.event_id)]):
            record = await self._recorded(command, bound)
            if record is not None:
                bound.info("capture.replayed", hosts=len(record.reports))
            else:
                started = time.monotonic()
                outcome = await self._outcome(command, bound)
                record = self._record(command, outcome)
                await self._keep(command, record, bound)
                self._log_outcome(bound, outcome, record.finished, time.monotonic() - started)
            await self._publisher.publish_many(record.reports)
            await self._publisher.publish_many([record.finished])
            return record.finished

    async def _outcome(
        self, command: CaptureProfile, bound: structlog.stdlib.BoundLogger
    ) -> _Outcome:
        hosts = [_Host(target) for target in command.targets]
        if problem := _invalid_targets(command.targets):
            for host in hosts:
                host.fail(CAPTURE_FAILED, problem)
            return _Outcome(hosts)
        try:
            return await self._capture(command, hosts, bound)
        except Exception as exc:  # noqa: BLE001  # any surprise is this command's outcome
            bound.exception("capture.crashed")
            reason = f"{type(exc).__name__}: {exc}"
            for host in hosts:
                if not host.error_code:
                    host.fail(CAPTURE_FAILED, f"the capture of {host.label} failed: {reason}")
            return _Outcome(hosts)

    async def _capture(
        self, command: CaptureProfile, hosts: list[_Host], bound: structlog.stdlib.BoundLogger
    ) -> _Outcome:
        if await self._already_stored(command, hosts):
            return _Outcome(hosts)
        work_dir = await asyncio.to_thread(owned_directory, self._scratch, "capture-")
        try:
            started_at = await self._trace(command, hosts, work_dir, bound)
            await self._upload(command, hosts)
        finally:
            await asyncio.to_thread(shutil.rmtree, work_dir, True)
        return _Outcome(hosts, started_at)

    async def _trace(
        self,
        command: CaptureProfile,
        hosts: list[_Host],
        work_dir: Path,
        bound: structlog.stdlib.BoundLogger,
    ) -> datetime | None:
        queued = time.monotonic()
        # Held for the whole trace, probe included: two sessions on one target make the
        # second fail, and a probe between someone else's trace's end and ours could lie.
        async with self._targets.hold(host.target.address for host in hosts), self._slots:
            bound.info(
                "capture.started",
                hosts=[host.target.host for host in hosts],
                addresses=[host.target.address for host in hosts],
                duration_ms=round(command.duration_seconds * 1000),
                waited_ms=round((time.monotonic() - queued) * 1000, 1),
            )
            reasons = await asyncio.gather(
                *(self._client.probe(host.target.address) for host in hosts)
            )
            live: list[_Host] = []
            for host, reason in zip(hosts, reasons, strict=True):
                if reason is None:
                    live.append(host)
                else:
                    host.fail(
                        CAPTURE_FAILED,
                        f"the profiler server of {host.label} does not answer ({reason}): is "
                        "the workload running with its profiler server on port "
                        f"{_port(host.target.address)}?",
                    )
            if not live:
                return None
            delay = MULTI_HOST_DELAY_SECONDS if len(live) > 1 else 0.0
            timeout = command.duration_seconds + delay + self._settings.timeout_margin_seconds
            result = await self._client.trace(
                TraceRequest(
                    addresses=tuple(host.target.address for host in live),
                    session_id=command.session_id,
                    duration_ms=max(1, round(command.duration_seconds * 1000)),
                    attempts=self._settings.num_tracing_attempts,
                    tracer_levels=command.tracer_levels,
                    timeout_seconds=timeout,
                    work_dir=work_dir,
                )
            )
        for host in live:
            _judge(host, result, timeout)
        return result.started_at

    async def _upload(self, command: CaptureProfile, hosts: list[_Host]) -> None:
        # Streamed from disk, one at a time: a long trace with the python tracer on is large.
        for host in hosts:
            if host.data_file is None:
                continue
            key = session_prefix(command.run_id, command.session_id) + host.target.host
            key += XPLANE_SUFFIX
            try:
                size = await self._store.upload_from(host.data_file, key)
            except Exception as exc:  # noqa: BLE001  # any storage failure is this outcome
                host.fail(UPLOAD_FAILED, f"uploading the profile of {host.label} failed: {exc}")
            else:
                host.key, host.size_bytes = key, size

    async def _already_stored(self, command: CaptureProfile, hosts: list[_Host]) -> bool:
        """Whether every host's file is in the store already (a redelivery after a crash
        between upload and record): then those files are the capture."""
        prefix = session_prefix(command.run_id, command.session_id)
        stored = set(await self._store.list(prefix))
        keys = [prefix + host.target.host + XPLANE_SUFFIX for host in hosts]
        if not all(key in stored for key in keys):
            return False
        for host, key in zip(hosts, keys, strict=True):
            host.key, host.size_bytes = key, await self._store.size(key)
        return True

    async def _recorded(
        self, command: CaptureProfile, bound: structlog.stdlib.BoundLogger
    ) -> _Record | None:
        try:
            raw = await self._store.get(_record_key(command))
            return _Record.model_validate_json(raw)
        except NotFound:
            return None
        except Exception as exc:  # noqa: BLE001  # unreadable: capture as if first delivered
            bound.warning("capture.record_unreadable", error=repr(exc))
            return None

    async def _keep(
        self, command: CaptureProfile, record: _Record, bound: structlog.stdlib.BoundLogger
    ) -> None:
        # Best effort: with the store down (upload_failed, say) the outcome must still be
        # published, or the operation would never finish.
        try:
            await self._store.put(_record_key(command), record.model_dump_json().encode())
        except Exception as exc:  # noqa: BLE001
            bound.warning("capture.record_failed", error=repr(exc))

    def _record(self, command: CaptureProfile, outcome: _Outcome) -> _Record:
        now = datetime.now(UTC)
        duration = timedelta(seconds=command.duration_seconds)
        folder = f"{self._store.url}/{session_prefix(command.run_id, command.session_id)}"
        reports = []
        for host in outcome.hosts:
            succeeded = not host.error_code
            start = outcome.started_at if succeeded else None
            # A failed host ended now, as far as anyone can tell (the registry says the same).
            end = now if not succeeded else None if start is None else start + duration
            report = ProfilerSessionReport(
                session_id=command.session_id,
                kind=command.kind,
                host=host.target.host,
                phase=ProfilerSessionPhase.SUCCEEDED if succeeded else ProfilerSessionPhase.FAILED,
                start_time=start,
                end_time=end,
                duration_seconds=command.duration_seconds,
                tracer_levels=command.tracer_levels,
                file_uri=f"{self._store.url}/{host.key}" if succeeded else "",
                size_bytes=host.size_bytes if succeeded else 0,
                storage_folder_uri=folder.rstrip("/"),
                error=host.error,
                workload_event_id=command.workload_event_id,
                operation=command.operation,
                update_time=now,
            )
            reports.append(
                ProfilerSessionReported(
                    event_id=_derived_id(command, f"report:{host.target.host}"),
                    occurred_at=now,
                    run_id=command.run_id,
                    report=report,
                )
            )
        code, message, missing = _verdict(outcome.hosts)
        finished = ProfileCaptureFinished(
            event_id=_derived_id(command, "finished"),
            occurred_at=now,
            run_id=command.run_id,
            session_id=command.session_id,
            operation=command.operation,
            error_code=code,
            error_message=message,
            missing_hosts=missing,
        )
        return _Record(reports=reports, finished=finished)

    @staticmethod
    def _log_outcome(
        bound: structlog.stdlib.BoundLogger,
        outcome: _Outcome,
        finished: ProfileCaptureFinished,
        elapsed: float,
    ) -> None:
        CAPTURES.labels(finished.error_code or "ok").inc()
        CAPTURE_SECONDS.observe(elapsed)
        fields = {
            "duration_ms": round(elapsed * 1000, 1),
            "hosts": [host.target.host for host in outcome.hosts if not host.error_code],
            "bytes": sum(host.size_bytes for host in outcome.hosts if not host.error_code),
        }
        if finished.error_code:
            bound.warning(
                "capture.failed",
                code=finished.error_code,
                missing_hosts=finished.missing_hosts,
                error=finished.error_message,
                **fields,
            )
        else:
            bound.info("capture.finished", **fields)


def _judge(host: _Host, result: TraceResult, timeout: float) -> None:
    """Set what a probed, traced host came to."""
    address = host.target.address
    if (data_file := result.files.get(address)) is not None:
        host.data_file = data_file
        return
    said = result.host_errors.get(address, "")
    nothing_collected = not result.error or "No trace event" in result.error
    if result.timed_out:
        host.fail(CAPTURE_FAILED, f"the capture of {host.label} did not end within {timeout:g} s")
    elif _BUSY_SIGN in said.lower() or (not said and nothing_collected):
        # It answered the probe, then gave nothing: while our own captures of it take turns,
        # that is the workload tracing itself.
        host.fail(
            TARGET_BUSY,
            f"another profiling session is active on {host.label}: wait for the "
            "programmatic trace to end, then capture again",
        )
    elif said:
        host.fail(
            CAPTURE_FAILED,
            f"{host.label} answered but gave no profile ({said}): is "
            f"{_port(address)} the port of the workload's profiler server?",
        )
    else:
        host.fail(CAPTURE_FAILED, f"the capture of {host.label} failed: {result.error}")


def _verdict(hosts: Sequence[_Host]) -> tuple[str, str, list[str]]:
    """The outcome's error code, message and missing hosts."""
    failed = [host for host in hosts if host.error_code]
    if not failed:
        return "", "", []
    missing = sorted(host.target.host for host in failed if host.error_code != UPLOAD_FAILED)
    codes = {host.error_code for host in failed}
    if UPLOAD_FAILED in codes:
        code = UPLOAD_FAILED
    elif len(failed) < len(hosts):
        code = TARGETS_MISSING
    elif codes == {TARGET_BUSY}:
        code = TARGET_BUSY
    else:
        code = CAPTURE_FAILED
    details = list(dict.fromkeys(host.error for host in failed))  # one line per distinct error
    message = "; ".join(details)
    if code == TARGETS_MISSING:
        message = f"{len(missing)} of {len(hosts)} hosts gave no profile: {message}"
    return code, message[:_MESSAGE_LIMIT], missing


def _invalid_targets(targets: Sequence[CaptureTarget]) -> str:
    """Why the targets cannot be captured as asked, or ``""``."""
    seen_hosts: dict[str, str] = {}
    seen_addresses: dict[str, str] = {}
    for target in targets:
        if not _ADDRESS.match(target.address) or not 0 < _port(target.address) <= 65535:
            return f"the address {target.address!r} of {target.host} is not host:port"
        if (other := seen_hosts.setdefault(target.host, target.address)) != target.address:
            return (
                f"the targets {other} and {target.address} share the host name {target.host}: "
                f"each host needs its own (its file is <host>{XPLANE_SUFFIX})"
            )
        if (owner := seen_addresses.setdefault(target.address, target.host)) != target.host:
            return f"the hosts {owner} and {target.host} share the address {target.address}"
    return ""


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _derived_id(command: CaptureProfile, what: str) -> uuid.UUID:
    return uuid.uuid5(command.event_id, what)


def _record_key(command: CaptureProfile) -> str:
    return f"{command.run_id}/{RECORDS_FOLDER}/{command.event_id}.json"
