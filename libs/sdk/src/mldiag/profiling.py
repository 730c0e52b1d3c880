"""A run's profiles in this process: uploading finished traces, reporting sessions and the
profiler target to the run-registry, off the training thread.

The only module that knows the registry's profiler routes:

- ``POST /v1/machineLearningRuns/{run}/profilerSessions:report`` (``ProfilerSessionReport``)
  for each host's news about a session (ACTIVE, then SUCCEEDED or FAILED). Every report
  carries its ``updateTime`` (when it became true), and the registry keeps the newest per
  host, so a late or repeated report never undoes a newer one;
- ``POST /v1/machineLearningRuns/{run}/profilerTargets`` (``RegisterProfilerTargetRequest``)
  for this process's profiler server;
- ``GET /v1/machineLearningRuns/{run}`` for the run's ``artifacts.gcsPath``.

Two daemon threads per run, started on demand: one uploads (large files, slow), one talks to
the registry (small, but retried while process 0 has not created the run yet), so that
neither waits for the other. Nothing here raises into the caller: failures are logged, and a
failed upload becomes a FAILED report.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from mldiag.artifacts import ArtifactsError, ArtifactStore, open_artifacts
from mldiag.config import Settings
from mldiag.transport import client

logger = logging.getLogger("mldiag")

ARTIFACTS_ROOT_ENV = "MLDIAG_ARTIFACTS_ROOT"
"""Where profiles go when neither the run (``gcs_path``) nor the registry names a root."""

XPLANE_SUFFIX = ".xplane.pb"
"""The file each host contributes to a session (``mldiag_schemas.profiling.XPLANE_SUFFIX``)."""

REPORT_BUDGET_SECONDS = 15.0
"""How long one report is retried: long enough for process 0 to create the run it is about
(404 until then), short enough not to hold the queue behind it."""

LOOKUP_BUDGET_SECONDS = 3.0
"""How long reading the run's artifacts root is retried: an upload waits on it, and a run
the registry does not know falls back to ``MLDIAG_ARTIFACTS_ROOT``."""

_MAX_ERROR = 4000  # ProfilerSessionHost.error's bound: longer texts are cut, never refused
_RETRY_PAUSES = (0.2, 0.5, 1.0, 2.0)
_HOST_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def file_host(host: str) -> str:
    """``host`` as the contract's ``HostName`` (``<host>.xplane.pb``): other characters
    become ``-``, it starts with a letter or digit, at most 253 characters."""
    cleaned = _HOST_UNSAFE.sub("-", host).lstrip("._-")[:253]
    return cleaned or "host"


def session_key(run_id: str, session_id: str, host: str | None = None) -> str:
    """``<run>/plugins/profile/<session>`` (the session's folder), or the host's file in it."""
    folder = f"{run_id}/plugins/profile/{session_id}"
    return folder if host is None else f"{folder}/{host}{XPLANE_SUFFIX}"


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class TracerLevels:
    """``jax.profiler.ProfileOptions`` tracer levels (the contract's ``TracerLevels``)."""

    host: int = 2
    """0 off, 1 user events, 2 + high-level, 3 verbose."""
    device: int = 1
    """0 off, 1 on."""
    python: int = 0
    """0 off, 1 on (large traces)."""

    def body(self) -> dict[str, int]:
        """The JSON object (camelCase)."""
        return {
            "hostTracerLevel": self.host,
            "deviceTracerLevel": self.device,
            "pythonTracerLevel": self.python,
        }


@dataclass(frozen=True, slots=True)
class SessionReport:
    """One host's news about a session (the contract's ``ProfilerSessionReport``)."""

    session_id: str
    host: str
    phase: str
    """ACTIVE, SUCCEEDED or FAILED."""
    update_time: datetime
    """When this became true: the registry keeps the newest report per host."""
    start_time: datetime | None = None
    end_time: datetime | None = None
    duration_seconds: float | None = None
    tracer_levels: TracerLevels = field(default_factory=TracerLevels)
    file_uri: str = ""
    size_bytes: int = 0
    storage_folder_uri: str = ""
    error: str = ""
    kind: str = "PROGRAMMATIC"

    def body(self) -> dict[str, Any]:
        """The JSON body: unset fields left out, the error cut to the contract's bound."""
        body: dict[str, Any] = {
            "sessionId": self.session_id,
            "kind": self.kind,
            "host": self.host,
            "phase": self.phase,
            "tracerLevels": self.tracer_levels.body(),
            "updateTime": _time(self.update_time),
        }
        optional: dict[str, Any] = {
            "startTime": _time(self.start_time),
            "endTime": _time(self.end_time),
            "durationSeconds": self.duration_seconds,
            "fileUri": self.file_uri,
            "sizeBytes": self.size_bytes,
            "storageFolderUri": self.storage_folder_uri,
            "error": self.error[:_MAX_ERROR],
        }
        body.update({key: value for key, value in optional.items() if value not in (None, "", 0)})
        return body


class ProfilerRegistry:
    """The run-registry's profiler routes for one run; every call retries, then logs."""

    def __init__(
        self,
        http: httpx.Client,
        api_url: str,
        run_id: str,
        *,
        budget: float = REPORT_BUDGET_SECONDS,
        lookup_budget: float = LOOKUP_BUDGET_SECONDS,
        request_timeout: float = 5.0,
    ) -> None:
        self._http = http
        self._run_url = f"{api_url}/v1/machineLearningRuns/{run_id}"
        self._run_id = run_id
        self._budget = budget
        self._lookup_budget = lookup_budget
        self._request_timeout = request_timeout

    def report_session(self, report: SessionReport) -> bool:
        """Send ``report``; True once the registry took it."""
        answer, failure = self._call("POST", "/profilerSessions:report", report.body())
        if answer is None:
            logger.warning(
                "mldiag.xprof.report_failed run=%s session=%s host=%s phase=%s error=%s",
                self._run_id,
                report.session_id,
                report.host,
                report.phase,
                failure,
            )
        return answer is not None

    def register_target(self, host: str, process_index: int, address: str, pid: int) -> bool:
        """Register this process's profiler server; True once the registry took it."""
        body = {"host": host, "processIndex": process_index, "address": address, "pid": pid}
        answer, failure = self._call("POST", "/profilerTargets", body)
        if answer is None:
            logger.warning(
                "mldiag.profiler.target_not_registered run=%s host=%s address=%s error=%s",
                self._run_id,
                host,
                address,
                failure,
            )
            return False
        logger.info("mldiag.profiler.target_registered run=%s address=%s", self._run_id, address)
        return True

    def artifacts_root(self) -> str:
        """The run's ``artifacts.gcsPath``; empty when it has none or cannot be read."""
        run, failure = self._call("GET", "", None, budget=self._lookup_budget)
        if run is None:
            logger.info("mldiag.xprof.run_unreadable run=%s error=%s", self._run_id, failure)
            return ""
        artifacts = run.get("artifacts")
        root = artifacts.get("gcsPath") if isinstance(artifacts, dict) else None
        return root if isinstance(root, str) else ""

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        budget: float | None = None,
    ) -> tuple[dict[str, Any] | None, str]:
        """The answer's JSON object, or None and why (refused, or out of time).

        Retried for ``budget`` seconds: no answer, 5xx, 429, and 404 (the run is created by
        process 0 on its own thread, and may not exist yet). Anything else is refused for
        good.
        """
        deadline = time.monotonic() + (self._budget if budget is None else budget)
        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            try:
                response = self._http.request(
                    method,
                    self._run_url + path,
                    json=body,
                    timeout=max(min(remaining, self._request_timeout), 0.1),
                )
            except httpx.HTTPError as error:
                failure = f"{type(error).__name__}: {error}"
            else:
                if response.status_code < 300:
                    return _json_object(response), ""
                failure = f"{response.status_code}: {' '.join(response.text.split())[:500]}"
                if response.status_code not in (404, 429) and response.status_code < 500:
                    return None, failure
            pause = _RETRY_PAUSES[min(attempt, len(_RETRY_PAUSES) - 1)]
            attempt += 1
            if time.monotonic() + pause >= deadline:
                return None, failure
            time.sleep(pause)


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        answer = response.json()
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


class SerialWorker:
    """Runs jobs one after another on a daemon thread that lives while there is work."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: collections.deque[Callable[[], None]] = collections.deque()
        self._condition = threading.Condition()
        self._running = False

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job`` (it must not raise; if it does, the error is logged)."""
        with self._condition:
            self._jobs.append(job)
            if not self._running:
                self._running = True
                threading.Thread(target=self._loop, name=self._name, daemon=True).start()

    def wait(self, timeout: float) -> bool:
        """Wait until every job queued so far is done, at most ``timeout`` seconds."""
        with self._condition:
            return self._condition.wait_for(lambda: not self._running, max(timeout, 0.0))

    def _loop(self) -> None:
        while True:
            with self._condition:
                if not self._jobs:
                    self._running = False
                    self._condition.notify_all()
                    return
                job = self._jobs.popleft()
            try:
                job()
            except Exception:  # a job's bug must not stop the jobs behind it
                logger.exception("mldiag.profiler.job_failed worker=%s", self._name)


@dataclass(frozen=True, slots=True)
class FinishedTrace:
    """A trace JAX has written, waiting to be uploaded and reported."""

    session_id: str
    log_dir: Path
    """The temporary directory JAX traced into (``<dir>/plugins/profile/<session>/``)."""
    start_time: datetime
    end_time: datetime
    tracer_levels: TracerLevels
    error: str = ""
    """Set when the trace itself failed (nothing to upload)."""


class RunProfiles:
    """This process's profiling of one run: uploads, session reports, its profiler target.

    Created by the run on first use (:meth:`mldiag.Run` ``finish`` waits for it).
    """

    def __init__(
        self,
        settings: Settings,
        run_id: str,
        host: str,
        *,
        gcs_path: str = "",
        registry: ProfilerRegistry | None = None,
    ) -> None:
        self.run_id = run_id
        self.host = file_host(host)
        """The host as it names files and reports (``<host>.xplane.pb``)."""
        self._gcs_path = gcs_path
        self._registry = registry or ProfilerRegistry(
            client(settings.token, settings.request_timeout),
            settings.api_url,
            run_id,
            request_timeout=settings.request_timeout,
        )
        self._uploads = SerialWorker(f"mldiag-xprof-upload-{run_id}")
        self._reports = SerialWorker(f"mldiag-xprof-report-{run_id}")
        self._store: ArtifactStore | None = None
        self._stop_active: Callable[[], None] | None = None

    # -- what the tracer calls -------------------------------------------------------

    def trace_started(self, session_id: str, start_time: datetime, levels: TracerLevels) -> None:
        """Report this host ACTIVE in ``session_id`` (in the background)."""
        report = SessionReport(
            session_id=session_id,
            host=self.host,
            phase="ACTIVE",
            update_time=start_time,
            start_time=start_time,
            tracer_levels=levels,
        )
        self._reports.submit(lambda: self._report(report))

    def trace_finished(self, trace: FinishedTrace) -> None:
        """Upload the trace and report how it went (in the background)."""
        self._uploads.submit(lambda: self._upload(trace))

    def register_target(self, address: str, process_index: int) -> None:
        """Register this process's profiler server at ``address`` (in the background)."""
        pid = os.getpid()

        def register() -> None:
            self._registry.register_target(self.host, process_index, address, pid)

        self._reports.submit(register)

    def set_active_trace(self, stop: Callable[[], None] | None) -> None:
        """What stops the trace now running for this run (None once it stopped)."""
        self._stop_active = stop

    # -- what the run calls ------------------------------------------------------------

    def close(self, timeout: float) -> bool:
        """Stop a trace left running, then wait for pending uploads and reports (at most
        ``timeout`` seconds); True when nothing is left."""
        deadline = time.monotonic() + timeout
        stop = self._stop_active
        if stop is not None:
            logger.warning("mldiag.xprof.stopped_at_finish run=%s", self.run_id)
            try:
                stop()
            except Exception:  # finishing a run must go on whatever the tracer says
                logger.exception("mldiag.xprof.stop_at_finish_failed run=%s", self.run_id)
        uploaded = self._uploads.wait(deadline - time.monotonic())
        reported = self._reports.wait(deadline - time.monotonic())
        if not (uploaded and reported):
            logger.warning(
                "mldiag.xprof.pending_at_exit run=%s uploads_done=%s reports_done=%s",
                self.run_id,
                uploaded,
                reported,
            )
        return uploaded and reported

    # -- background jobs ---------------------------------------------------------------

    def _report(self, report: SessionReport) -> None:
        self._registry.report_session(report)

    def _artifacts(self) -> ArtifactStore:
        """The run's store: its ``gcs_path``, else the run's ``artifacts.gcsPath`` in the
        registry, else ``$MLDIAG_ARTIFACTS_ROOT``."""
        if self._store is not None:
            return self._store
        root = self._gcs_path or self._registry.artifacts_root()
        root = root or os.environ.get(ARTIFACTS_ROOT_ENV, "")
        if not root:
            raise ArtifactsError(
                "no artifacts root: pass gcs_path to mldiag.init, give the run "
                f"artifacts.gcsPath, or set {ARTIFACTS_ROOT_ENV}"
            )
        self._store = open_artifacts(root)
        return self._store

    def _upload(self, trace: FinishedTrace) -> None:
        if trace.error:  # JAX wrote nothing worth uploading
            self._finish(trace, "FAILED", error=trace.error)
            shutil.rmtree(trace.log_dir, ignore_errors=True)
            return
        folder = ""
        try:
            source = _written_xplane(trace.log_dir, trace.session_id)
            store = self._artifacts()
            folder = store.uri_of(session_key(self.run_id, trace.session_id))
            began = time.monotonic()
            file_uri = store.upload(source, session_key(self.run_id, trace.session_id, self.host))
            size = source.stat().st_size
        except Exception as error:  # noqa: BLE001  # any failure is a FAILED report, never a raise
            message = f"{type(error).__name__}: {error}"
            logger.error(  # noqa: TRY400  # the message says it all (a missing root needs no traceback)
                "mldiag.xprof.upload_failed run=%s session=%s error=%s kept=%s",
                self.run_id,
                trace.session_id,
                message,
                trace.log_dir,
            )
            self._finish(trace, "FAILED", folder=folder, error=message)
            return
        logger.info(
            "mldiag.xprof.uploaded run=%s session=%s uri=%s bytes=%d seconds=%.2f",
            self.run_id,
            trace.session_id,
            file_uri,
            size,
            time.monotonic() - began,
        )
        self._finish(trace, "SUCCEEDED", folder=folder, file_uri=file_uri, size=size)
        shutil.rmtree(trace.log_dir, ignore_errors=True)

    def _finish(
        self,
        trace: FinishedTrace,
        phase: str,
        *,
        folder: str = "",
        file_uri: str = "",
        size: int = 0,
        error: str = "",
    ) -> None:
        """Report this host's end of the session: SUCCEEDED with its file, or FAILED."""
        report = SessionReport(
            session_id=trace.session_id,
            host=self.host,
            phase=phase,
            update_time=datetime.now(UTC),
            start_time=trace.start_time,
            end_time=trace.end_time,
            duration_seconds=(trace.end_time - trace.start_time).total_seconds(),
            tracer_levels=trace.tracer_levels,
            file_uri=file_uri,
            size_bytes=size,
            storage_folder_uri=folder,
            error=error,
        )
        self._reports.submit(lambda: self._report(report))


def _written_xplane(log_dir: Path, session_id: str) -> Path:
    """The xplane JAX wrote for ``session_id`` (named after JAX's idea of the host)."""
    folder = log_dir / "plugins" / "profile" / session_id
    written = sorted(folder.glob(f"*{XPLANE_SUFFIX}")) if folder.is_dir() else []
    if not written:
        raise FileNotFoundError(
            f"JAX wrote no {XPLANE_SUFFIX} in {folder} (was another profiling session active?)"
        )
    return max(written, key=lambda path: path.stat().st_size)
