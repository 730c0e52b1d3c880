"""Offline runs: recorded to disk with nothing sent, uploaded later by ``mldiag sync``.

``MLDIAG_MODE=offline`` (or ``init(mode="offline")``) keeps everything a run would send to the
platform under ``<spool root>/offline/<run id>/``:

- ``run.json``, the manifest (written by process 0): what creating the run needs (id, name,
  run set, labels, configs with the software and hardware sections, artifacts path,
  monitoring overrides, project and location), how the run ended (``phase``,
  ``errorDetails``) once it did, and ``syncedTime`` once ``mldiag sync`` uploaded it.
- ``<writer>/``, one per process: metric batches in the spool's segment format
  (:mod:`mldiag.spool`), each the exact ``metrics:write`` body the online SDK would have
  posted, batch id included (a columnar frame; older SDKs spooled gzipped JSON, which sync
  still sends as such: each body's first bytes say which it is).

``sync_run`` replays one such directory the way the online SDK would have sent it: create
the run with its id (a 409 means it exists: attach), post the batches in order,
acknowledging each in the spool as ingestion stores it, then set the final phase and stamp
the manifest. A sync that stops half-way leaves the acknowledged batches acknowledged, and
ingestion stores a batch id once, so running it again sends the rest and duplicates
nothing. Heartbeats and lifecycle signals are not spooled: they describe a live process,
and replayed later they would describe nothing.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from mldiag.config import Settings
from mldiag.control import ControlStatus, HttpRunControl, RunPhase, RunSpec
from mldiag.encoding import Encoder, Entry, decode_body, points_in
from mldiag.spool import Spool, SpoolError
from mldiag.transport import MetricsWriter, Outcome, client

logger = logging.getLogger("mldiag")

OFFLINE_DIR = "offline"
"""The folder of the spool root that holds offline runs (one folder per run id)."""
MANIFEST = "run.json"
"""The manifest file of an offline run."""
MANIFEST_VERSION = 1


def offline_root(spool_root: Path) -> Path:
    """Where offline runs live under a spool root."""
    return spool_root / OFFLINE_DIR


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of the offline run in ``directory``, or None when it has none."""
    try:
        loaded: dict[str, Any] = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    return loaded


def _write_manifest(directory: Path, manifest: Mapping[str, Any]) -> None:
    """Replace the manifest atomically (a crash leaves the old one or the new one)."""
    tmp = directory / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    tmp.replace(directory / MANIFEST)


class OfflineRecord:
    """One process's record of an offline run: its manifest (process 0) and its spool.

    Args:
        spool_root: The spool root (``Settings.spool_dir``).
        spec: The run as it would be created.
        writer: This process's spool folder name (:func:`mldiag.spool.writer_name`).
        primary: Whether this process (index 0) writes the manifest.
        create_run: False for a metric-only run (the run is managed elsewhere).
        project: Project to create the run in at sync time (None: the default).
        location: Location to create it in (None: the default).
    """

    def __init__(
        self,
        spool_root: Path,
        spec: RunSpec,
        writer: str,
        *,
        primary: bool,
        create_run: bool,
        project: str | None,
        location: str | None,
    ) -> None:
        self.directory = offline_root(spool_root) / spec.run_id
        self._lock = threading.Lock()
        self._primary = primary
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self.spool = Spool(self.directory / writer, spec.run_id)
        except SpoolError:  # the same host and index live twice: a folder of its own
            self.spool = Spool(self.directory / f"{writer}-{os.getpid()}", spec.run_id)
        self._manifest: dict[str, Any] = {
            "version": MANIFEST_VERSION,
            "runId": spec.run_id,
            "displayName": spec.display_name,
            "runSet": spec.run_set,
            "labels": spec.labels,
            "configs": spec.configs,
            "gcsPath": spec.gcs_path,
            "monitoring": spec.monitoring,
            "project": project,
            "location": location,
            "createRun": create_run,
            "startTime": _now(),
            "phase": None,
            "errorDetails": None,
            "syncedTime": None,
        }
        if primary:
            earlier = read_manifest(self.directory)
            if earlier is not None and earlier.get("startTime"):  # a restart: same run
                self._manifest["startTime"] = earlier["startTime"]
            _write_manifest(self.directory, self._manifest)

    def describe(self, configs: Mapping[str, Any]) -> None:
        """Store the configs with the environment's sections (collected off the training
        thread, as the online SDK does before creating the run)."""
        if not self._primary:
            return
        with self._lock:
            self._manifest["configs"] = dict(configs)
            _write_manifest(self.directory, self._manifest)

    def finish(self, phase: RunPhase, error: str | None, code: str | None) -> None:
        """Store how the run ended; ``mldiag sync`` sets that phase on the platform."""
        if not self._primary:
            return
        details: dict[str, Any] | None = None
        if error or code:
            details = {"message": error or ""}
            if code:
                details["code"] = code
        with self._lock:
            self._manifest["phase"] = phase.value
            self._manifest["errorDetails"] = details
            _write_manifest(self.directory, self._manifest)


class OfflinePipeline:
    """The offline stand-in of :class:`mldiag.pipeline.Pipeline`: buffer → batches → spool.

    ``put`` only appends to a deque; one collector thread encodes batches (the same encoder,
    so the same bodies and batch ids) and appends them to the spool. Nothing is sent.
    """

    def __init__(
        self,
        settings: Settings,
        record: OfflineRecord,
        encoder: Encoder,
        *,
        on_start: Callable[[], None] | None = None,
    ) -> None:
        self._settings = settings
        self._spool = record.spool
        self._encoder = encoder
        self._on_start = on_start
        self._buffer: collections.deque[Entry] = collections.deque()
        # Two counters, each written by one side only (as in Pipeline), so neither needs a
        # lock: callers only add to ``enqueued_points``, ``collect`` (under ``_lock``) only
        # to ``_drained_points``; one shared counter written by both lost updates.
        self.enqueued_points = 0
        self._drained_points = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._collector = threading.Thread(
            target=self._loop, name="mldiag-offline-collector", daemon=True
        )

    def start(self) -> None:
        """Start the collector thread."""
        self._collector.start()

    def put(self, step: int, values: Mapping[str, Any], labels: Mapping[str, str] | None) -> None:
        """Buffer one call (no I/O); wake the collector once a batch is waiting.

        Safe from any number of threads at once: the append is one C call, and between
        reading and storing ``enqueued_points`` there is no call, hence no thread switch.
        """
        points = len(values)  # outside the read-modify-write below (a possible switch)
        self._buffer.append((step, time.time(), values, labels))
        self.enqueued_points += points
        if self.enqueued_points - self._drained_points >= self._settings.batch_points:
            self._wake.set()

    def collect(self) -> None:
        """Encode what is buffered into batches of ``batch_points`` and spool them."""
        with self._lock:
            while self._buffer:
                entries: list[Entry] = []
                points = 0
                while self._buffer and points < self._settings.batch_points:
                    entry = self._buffer.popleft()
                    entries.append(entry)
                    points += len(entry[2])
                self._drained_points += points
                batch = self._encoder.encode(entries)
                if batch is not None:
                    self._spool.append(batch.body)

    def flush(self, timeout: float) -> bool:  # noqa: ARG002  # the online pipeline's signature
        """Spool everything buffered; True (on disk is as far as offline goes)."""
        self._guard(self.collect)
        return True

    def close(self, timeout: float) -> bool:
        """Stop the collector, spool what is left and close the spool."""
        self._stopping.set()
        self._wake.set()
        if self._collector.is_alive():
            self._collector.join(timeout)
        self._guard(self.collect)
        self._spool.close()
        return True

    def _loop(self) -> None:
        if self._on_start is not None:
            self._guard(self._on_start)
        while not self._stopping.is_set():
            self._wake.wait(self._settings.flush_interval)
            self._wake.clear()
            self._guard(self.collect)

    def _guard(self, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception:  # whatever breaks in telemetry must not break the job
            logger.exception("mldiag.offline.error")


# -- sync ------------------------------------------------------------------------------


class SyncError(Exception):
    """An offline run could not be synced; ``code`` is stable, ``unreachable`` says whether
    the platform did not answer (try again later) rather than refused."""

    def __init__(self, code: str, message: str, *, unreachable: bool = False) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.unreachable = unreachable


@dataclass(slots=True)
class SyncResult:
    """What one sync (or dry run) of one offline run did."""

    run_id: str
    directory: Path
    project: str | None = None
    location: str | None = None
    run: str = "not created (metric-only)"
    """``created``, ``attached`` (it existed), or why the run was not created."""
    batches: int = 0
    points: int = 0
    rejected: int = 0
    phase: str | None = None
    """The phase set on the platform (None: the process never finished)."""
    synced_before: bool = False


def is_offline_run(directory: Path) -> bool:
    """Whether ``directory`` holds an offline run (a manifest, or writer spools of a process
    that never wrote one), so that a stray folder is never taken for one."""
    if (directory / MANIFEST).is_file():
        return True
    return directory.is_dir() and bool(_writers(directory))


def offline_runs(root: Path, *, include_synced: bool = False) -> list[Path]:
    """The offline runs under ``root`` (an offline folder), oldest id first."""
    if not root.is_dir():
        return []
    found = []
    for directory in sorted(path for path in root.iterdir() if path.is_dir()):
        manifest = read_manifest(directory)
        if manifest is not None and manifest.get("syncedTime") and not include_synced:
            continue
        if is_offline_run(directory):
            found.append(directory)
    return found


def _writers(directory: Path) -> list[Path]:
    """The writer folders of an offline run: those with a spool's lock or segments."""
    return sorted(
        path
        for path in directory.iterdir()
        if path.is_dir() and ((path / "lock").exists() or any(path.glob("*.seg")))
    )


def _points(payload: bytes) -> int:
    # A frame (this SDK) or gzipped JSON (an older one's spool): the body says which.
    return points_in(payload)


def _open(writer: Path, run_id: str) -> Spool:
    try:
        return Spool(writer, run_id)
    except SpoolError:
        raise SyncError(
            "run_in_use", f"{writer} is still being written by a live process"
        ) from None


def _spec(manifest: Mapping[str, Any]) -> RunSpec:
    return RunSpec(
        run_id=str(manifest["runId"]),
        display_name=str(manifest.get("displayName") or manifest["runId"]),
        run_set=str(manifest.get("runSet") or "default"),
        labels=dict(manifest.get("labels") or {}),
        configs=dict(manifest.get("configs") or {}),
        gcs_path=str(manifest.get("gcsPath") or ""),
        monitoring=dict(manifest.get("monitoring") or {}),
    )


def sync_run(
    directory: Path,
    settings: Settings,
    *,
    project: str | None = None,
    location: str | None = None,
    dry_run: bool = False,
    http: httpx.Client | None = None,
) -> SyncResult:
    """Upload the offline run in ``directory`` (see the module's docstring).

    ``project``/``location`` apply when the run recorded none. ``dry_run`` only counts what
    would be sent. ``http`` replaces the HTTP client (its transport is the tests' edge).
    Raises :class:`SyncError`; whatever was sent before stays acknowledged.
    """
    manifest = read_manifest(directory)
    run_id = str(manifest["runId"]) if manifest else directory.name
    result = SyncResult(run_id=run_id, directory=directory)
    if manifest is not None:
        result.project = manifest.get("project") or project
        result.location = manifest.get("location") or location
        result.phase = manifest.get("phase")
        result.synced_before = bool(manifest.get("syncedTime"))
    if dry_run:
        result.run = "would be created" if manifest and manifest.get("createRun") else result.run
        for writer in _writers(directory):
            spool = _open(writer, run_id)
            try:
                for record in spool.records():
                    result.batches += 1
                    result.points += _points(record.payload)
            finally:
                spool.close()
        return result
    own_http = http is None
    http = http or client(settings.token, settings.request_timeout)
    spools: list[Spool] = []
    try:
        # Every writer's lock first: a run still being written is refused before anything
        # is sent, and no other sync can send the same batches meanwhile.
        for writer in _writers(directory):
            spools.append(_open(writer, run_id))  # noqa: PERF401  # one by one: closed if one fails
        control = HttpRunControl(
            http, settings.api_url, project=result.project, location=result.location
        )
        if manifest is not None and manifest.get("createRun"):
            result.run = _create(control, _spec(manifest), settings.request_timeout)
        for spool in spools:
            _send_metrics(spool, directory, settings, http, result)
        if manifest is not None and result.phase is not None:
            _set_phase(control, http, run_id, manifest, settings.request_timeout)
    finally:
        for spool in spools:
            spool.close()
        if own_http:
            http.close()
    stamped = dict(manifest or {"version": MANIFEST_VERSION, "runId": run_id})
    stamped["syncedTime"] = _now()
    _write_manifest(directory, stamped)
    return result


def _create(control: HttpRunControl, spec: RunSpec, timeout: float) -> str:
    status = control.ensure_run(spec, timeout)
    if status is ControlStatus.RETRY:
        raise SyncError(
            "registry_unavailable", f"cannot create run {spec.run_id}", unreachable=True
        )
    if status is ControlStatus.GIVE_UP:
        raise SyncError("run_create_refused", f"the run-registry refused run {spec.run_id}")
    return "attached" if status is ControlStatus.ATTACHED else "created"


def _send_metrics(
    spool: Spool, directory: Path, settings: Settings, http: httpx.Client, result: SyncResult
) -> None:
    """Post one writer's batches in order, acknowledging each once stored."""
    writer = MetricsWriter(http, settings.ingestion_url)
    while (record := spool.peek()) is not None:
        sent = writer.write(spool.run_id, record.payload, timeout=settings.request_timeout)
        if sent.outcome is Outcome.UNAVAILABLE:
            raise SyncError(
                "ingestion_unavailable",
                f"{sent.status or 'no answer'} {sent.detail[:200]}".strip(),
                unreachable=True,
            )
        if sent.outcome is Outcome.REJECTED:
            # The platform will never take it: kept beside the run, then skipped.
            result.rejected += 1
            _dead_letter(directory, record.payload, sent.status, sent.detail)
        else:
            result.batches += 1
            result.points += _points(record.payload)
        spool.ack(record)


def _set_phase(
    control: HttpRunControl,
    http: httpx.Client,
    run_id: str,
    manifest: Mapping[str, Any],
    timeout: float,
) -> None:
    # An earlier sync may have set it already (a run that ended cannot be ended again).
    with contextlib.suppress(httpx.HTTPError, ValueError):
        current = http.get(control.run_url(run_id), timeout=timeout)
        if current.status_code == 200 and current.json().get("runPhase") == manifest["phase"]:
            return
    details = manifest.get("errorDetails") or {}
    status = control.set_phase(
        run_id,
        RunPhase(manifest["phase"]),
        details.get("message") or None,
        timeout,
        code=details.get("code"),
    )
    if status is ControlStatus.RETRY:
        raise SyncError(
            "registry_unavailable", f"cannot set run {run_id}'s phase", unreachable=True
        )


def _dead_letter(directory: Path, payload: bytes, status: int, detail: str) -> None:
    line = {
        "time": _now(),
        "status": status,
        "detail": detail,
        "request": decode_body(payload),
    }
    with (directory / "dead-letter.jsonl").open("a") as out:
        out.write(json.dumps(line) + "\n")


def resolve_target(target: str, spool_root: Path) -> list[Path]:
    """The offline runs ``target`` names: a run's folder, a folder of runs, or a run id
    (short or full name) under the spool root; empty when it names nothing."""
    path = Path(target).expanduser()
    if path.is_dir():
        if (path / MANIFEST).is_file():
            return [path]
        nested = path / OFFLINE_DIR
        runs = offline_runs(nested if nested.is_dir() else path)
        if runs:
            return runs
        return [path] if is_offline_run(path) else []
    run_id = target.rsplit("/machineLearningRuns/", 1)[-1].strip("/")
    candidate = offline_root(spool_root) / run_id
    return [candidate] if candidate.is_dir() and is_offline_run(candidate) else []
