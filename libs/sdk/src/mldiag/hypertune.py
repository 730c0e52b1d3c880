"""Hyperparameter tuning metrics: ``cloudml-hypertune``'s file, read and written.

A tuning job's trial reports its objective the way Vertex's trials do, with Google's
``cloudml-hypertune`` unchanged::

    hypertune.HyperTune().report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag="accuracy", metric_value=0.93, global_step=1000)

The library rewrites the whole file at ``$CLOUD_ML_HP_METRIC_FILE`` on every report: JSON
Lines with sorted keys, its last 100 reports, every value a string except ``timestamp``::

    {"accuracy": "0.93", "checkpoint_path": "", "global_step": "1000",
     "timestamp": 1638422847.28, "trial": "0"}      (one line in the file)

The replica launcher points that variable at a file of the attempt and, on the chief
(``workerpool0-0``, the replica whose reports Vertex reads), forwards every new report as a
run metric ``<tag>`` at ``step = global_step`` (:class:`MetricFileForwarder`, over the pure
:func:`parse` and the stateful :class:`MetricFileReader`).

:func:`report_hyperparameter_tuning_metric` is the SDK's own call: it records on the current
run, or writes the same file when the program has no run (the launcher then forwards it).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mldiag.run import current_run

logger = logging.getLogger("mldiag")

METRIC_FILE_ENV = "CLOUD_ML_HP_METRIC_FILE"
"""Where ``cloudml-hypertune`` writes its reports (the launcher sets it per attempt)."""
TRIAL_ID_ENV = "CLOUD_ML_TRIAL_ID"
"""The trial a replica belongs to (written into each report as ``trial``)."""
REPLICA_ENV = "MLDIAG_REPLICA"
"""A job's replica, ``workerpool<pool>-<index>`` (set by the training service)."""
CHIEF_REPLICA = "workerpool0-0"
"""The only replica whose reports count, as on Vertex."""
DEFAULT_METRIC_TAG = "training/hptuning/metric"
"""The tag ``cloudml-hypertune`` uses when the caller gives none."""
DEFAULT_METRIC_FILE = "/tmp/hypertune/output.metrics"  # noqa: S108  # the library's own default
"""Where ``cloudml-hypertune`` writes without :data:`METRIC_FILE_ENV`."""
MAX_ENTRIES = 100
"""Reports the library keeps in the file (older ones are dropped at each rewrite)."""
POLL_SECONDS = 0.5
"""How often the launcher looks at the file while the program runs."""

MAX_READ_BYTES = 1 << 20
"""Of a file larger than this (not the library's: it keeps 100 lines), only its end is read."""

_RESERVED = frozenset({"timestamp", "trial", "global_step", "checkpoint_path"})
"""Keys of a report that are not metrics."""


# --- the file's format (pure) -----------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One report: a line of the file."""

    timestamp: float
    metrics: dict[str, float]
    """Tag → value; the library writes one tag per line, a hand-written line may hold more."""
    global_step: int | None
    """None when the line has no ``global_step`` (the library always writes one)."""


@dataclass(frozen=True)
class Parsed:
    """What one read of the file holds."""

    entries: list[Entry]
    bad_lines: list[str]
    """Lines that are not reports (skipped)."""
    complete: bool
    """False when the last line is cut short (the writer is rewriting the file): read again."""


class BadLineError(ValueError):
    """A line that is not a ``cloudml-hypertune`` report."""


def parse_line(line: str) -> Entry:
    """One line of the file as a report; :class:`BadLineError` when it is not one.

    Values are numbers or numeric strings (the library writes strings); keys whose value is
    not a number are not metrics and are left out.
    """
    try:
        record = json.loads(line)
    except ValueError as error:
        raise BadLineError(f"not JSON: {error}") from None
    if not isinstance(record, dict):
        raise BadLineError("not a JSON object")
    timestamp = _number(record.get("timestamp"))
    if timestamp is None or not math.isfinite(timestamp):
        raise BadLineError("no timestamp")
    step: int | None = None
    if "global_step" in record:
        raw_step = _number(record["global_step"])
        if raw_step is None or raw_step < 0 or raw_step != int(raw_step):
            raise BadLineError(f"global_step {record['global_step']!r} is not a step")
        step = int(raw_step)
    metrics = {
        str(tag): value
        for tag, raw in record.items()
        if tag not in _RESERVED and (value := _number(raw)) is not None
    }
    if not metrics:
        raise BadLineError("no metric in the line")
    return Entry(timestamp, metrics, step)


def parse(text: str, *, final: bool = False) -> Parsed:
    """Every report in the file's ``text``.

    A last line without its newline that does not parse is the writer's unfinished rewrite:
    it is left for the next read (``complete`` False), unless ``final`` (the program has
    ended: nothing more will come, so it is a bad line).
    """
    lines = text.split("\n")
    last = lines.pop()  # "" when the text ends with a newline
    entries: list[Entry] = []
    bad: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            entries.append(parse_line(line))
        except BadLineError:
            bad.append(line)
    complete = True
    if last.strip():
        try:
            entries.append(parse_line(last))
        except BadLineError:
            if final:
                bad.append(last)
            else:
                complete = False
    return Parsed(entries, bad, complete)


def format_entry(
    tag: str, value: float, global_step: int | None, *, timestamp: float, trial: str
) -> str:
    """One line as ``cloudml-hypertune`` writes it (no ``global_step`` when None)."""
    record: dict[str, Any] = {
        "checkpoint_path": "",
        "timestamp": timestamp,
        "trial": trial,
        tag: str(float(value)),
    }
    if global_step is not None:
        record["global_step"] = str(global_step)
    return json.dumps(record, sort_keys=True)


def _number(raw: object) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw)
        except ValueError:
            return None
    return None


# --- reading the file as it is rewritten ------------------------------------------------


@dataclass(frozen=True)
class Report:
    """A metric point to forward: ``tag`` = ``value`` at ``step``."""

    tag: str
    value: float
    step: int


@dataclass
class MetricFileReader:
    """Reads the file again when it changed and returns each report once.

    The library rewrites the whole file at each report and keeps its last
    :data:`MAX_ENTRIES`, so a report is known by ``(timestamp, tag, global_step)`` across
    rewrites; keys older than the oldest report still in the file can never come back and
    are forgotten, which keeps the memory bounded. A report without ``global_step`` gets
    the next of a running count per tag (0, 1, ...). Reports timestamped before ``since``
    (an earlier attempt's, in a file the user chose) are skipped.
    """

    path: Path
    since: float = 0.0
    bad_lines: int = 0
    """Bad lines seen so far (a line rewritten N times counts once per read)."""
    _signature: tuple[int, int, int, int] | None = field(default=None, repr=False)
    _seen: set[tuple[float, str, int | None]] = field(default_factory=set, repr=False)
    _counts: dict[str, int] = field(default_factory=dict, repr=False)

    def read(self, *, final: bool = False) -> list[Report]:
        """The reports that are new since the last read ([] when the file did not change,
        is missing, or cannot be read now). ``final``: the writer is gone; read whatever is
        there, an unfinished last line included."""
        try:
            stat = self.path.stat()
        except OSError:
            return []
        signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        if signature == self._signature and not final:
            # Cheap when nothing changed. A rewrite of the same size in the same clock tick
            # goes unseen until the next change, or the final read.
            return []
        try:
            text = _tail(self.path, stat.st_size)
        except OSError:
            return []
        parsed = parse(text, final=final)
        self.bad_lines += len(parsed.bad_lines)
        # An unfinished rewrite is read again at the next poll, whatever its signature.
        self._signature = signature if parsed.complete else None
        reports: list[Report] = []
        for entry in parsed.entries:
            for tag, value in entry.metrics.items():
                key = (entry.timestamp, tag, entry.global_step)
                if key in self._seen:
                    continue
                self._seen.add(key)
                if entry.timestamp < self.since:
                    continue
                reports.append(Report(tag, value, self._step(tag, entry.global_step)))
        if parsed.complete and parsed.entries:
            # The file is written oldest first, so even a read cut at a line's end holds the
            # oldest report still kept: anything older has left the window for good.
            oldest = min(entry.timestamp for entry in parsed.entries)
            self._seen = {key for key in self._seen if key[0] >= oldest}
        return reports

    def _step(self, tag: str, global_step: int | None) -> int:
        if global_step is not None:
            return global_step
        step = self._counts.get(tag, 0)
        self._counts[tag] = step + 1
        return step


def _tail(path: Path, size: int) -> str:
    """The file's text; of a file over :data:`MAX_READ_BYTES`, its whole lines in the last
    ones (something appending for ever must not make each look cost more)."""
    with path.open("rb") as handle:
        if size <= MAX_READ_BYTES:
            return handle.read().decode("utf-8", "replace")
        handle.seek(size - MAX_READ_BYTES)
        data = handle.read()
    return data[data.find(b"\n") + 1 :].decode("utf-8", "replace")


class MetricFileForwarder:
    """The launcher's side: polls the file while the program runs (at most every
    :data:`POLL_SECONDS`) and once after it ended, and records each new report.

    Only the chief forwards; another replica's launcher says once that it ignores the file.
    """

    def __init__(
        self,
        path: Path,
        record: Callable[[str, float, int], None],
        *,
        replica: str,
        since: float = 0.0,
        interval: float = POLL_SECONDS,
    ) -> None:
        self._reader = MetricFileReader(path, since=since)
        self._record = record
        self._replica = replica
        self._chief = replica == CHIEF_REPLICA
        self._interval = interval
        self._next = 0.0
        self._warned_bad = False
        self._warned_ignored = False
        self.forwarded = 0
        """Reports recorded so far."""

    @property
    def path(self) -> Path:
        """The file read."""
        return self._reader.path

    def poll(self, *, final: bool = False) -> int:
        """Forward what is new (when the interval has passed, or ``final``); how many."""
        now = time.monotonic()
        if not final and now < self._next:
            return 0
        self._next = now + self._interval
        if not self._chief:
            self._say_ignored()
            return 0
        reports = self._reader.read(final=final)
        for report in reports:
            self._record(report.tag, report.value, report.step)
        self.forwarded += len(reports)
        if self._reader.bad_lines and not self._warned_bad:
            self._warned_bad = True
            logger.warning(
                "mldiag.hypertune.bad_lines path=%s (lines that are not reports are skipped)",
                self._reader.path,
            )
        if final and self.forwarded:
            logger.info(
                "mldiag.hypertune.forwarded path=%s reports=%d", self._reader.path, self.forwarded
            )
        return len(reports)

    def _say_ignored(self) -> None:
        if self._warned_ignored or not self._reader.path.exists():
            return
        self._warned_ignored = True
        logger.warning(
            "mldiag.hypertune.ignored replica=%s path=%s (only %s's reports count)",
            self._replica,
            self._reader.path,
            CHIEF_REPLICA,
        )


def attempt_metric_file(exit_file: Path | None) -> Path:
    """Where a replica's reports go when the user chose no file: beside the attempt's exit
    file (one directory per replica and attempt), else a directory of this process."""
    if exit_file is not None:
        return exit_file.absolute().parent / "hypertune" / "output.metrics"
    return Path(f"/tmp/mldiag-hypertune-{os.getpid()}/output.metrics")  # noqa: S108


# --- the SDK's call -----------------------------------------------------------------------

_file_lock = threading.Lock()
_warned_replica = False


def report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag: str,
    metric_value: float,
    global_step: int | None = None,
) -> None:
    """Report a tuning job's metric, as ``cloudml-hypertune``'s call of the same name does.

    With a current run (:func:`mldiag.init`), the value is recorded on it as the metric
    ``hyperparameter_metric_tag`` at ``global_step`` (at the run's current step when None),
    where the tuning controller reads it. Without one, it is appended to
    ``$CLOUD_ML_HP_METRIC_FILE`` in the library's format (its last 100 reports, rewritten
    atomically; without ``global_step`` the line has none and the launcher numbers such
    reports 0, 1, ...), and the replica launcher forwards it to the trial's run.

    As on Vertex, only the chief replica's reports count: on another replica of a job
    (``$MLDIAG_REPLICA``), a run records nothing (said once). An empty tag is the library's
    default, ``training/hptuning/metric``. Like the rest of the SDK this never raises for
    telemetry reasons: a value that is not a number, or a negative step, is dropped with a
    warning (NaN and infinities are kept, as everywhere in the SDK).
    """
    tag = hyperparameter_metric_tag or DEFAULT_METRIC_TAG
    try:
        value = float(metric_value)
        step = None if global_step is None else int(global_step)
    except (TypeError, ValueError):
        logger.warning(
            "mldiag.hypertune.bad_report tag=%s value=%r step=%r (dropped)",
            tag,
            metric_value,
            global_step,
        )
        return
    if step is not None and step < 0:
        logger.warning("mldiag.hypertune.bad_report tag=%s step=%d (dropped)", tag, step)
        return
    run = current_run()
    if run is None:
        _append_to_file(tag, value, step)
        return
    replica = os.environ.get(REPLICA_ENV)
    if replica and replica != CHIEF_REPLICA:
        _say_not_chief(replica)
        return
    run.record(tag, value, step)


def _say_not_chief(replica: str) -> None:
    global _warned_replica  # noqa: PLW0603  # once per process
    if not _warned_replica:
        _warned_replica = True
        logger.warning(
            "mldiag.hypertune.ignored replica=%s (only %s's reports count)", replica, CHIEF_REPLICA
        )


def _append_to_file(tag: str, value: float, step: int | None) -> None:
    """Add one line to the file, keeping its last :data:`MAX_ENTRIES`, written through a
    temporary name so that the launcher never reads half of it."""
    path = Path(os.environ.get(METRIC_FILE_ENV) or DEFAULT_METRIC_FILE)
    line = format_entry(
        tag, value, step, timestamp=time.time(), trial=os.environ.get(TRIAL_ID_ENV, "0")
    )
    with _file_lock:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                kept = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except FileNotFoundError:
                kept = []
            lines: deque[str] = deque((k for k in kept if k.strip()), maxlen=MAX_ENTRIES)
            lines.append(line)
            temporary = path.with_name(f".tmp-{path.name}-{os.getpid()}")
            temporary.write_text("".join(f"{k}\n" for k in lines), encoding="utf-8")
            temporary.replace(path)
        except OSError as error:
            logger.warning("mldiag.hypertune.write_failed path=%s error=%r", path, error)
