"""Shipping a run's log lines to ingestion (``POST …/machineLearningRuns/{run}/logs:write``).

:class:`LogShipper` takes lines from any thread (``write`` only appends to a bounded buffer)
and sends them from a thread of its own in batches: every ``flush_interval`` seconds, or
as soon as ``batch_lines`` lines wait. A batch keeps its id through every retry (backoff
doubling up to ``max_backoff``), so a retry that follows a lost answer is stored once. A
line longer than the platform takes is cut, marked with a trailing ``…`` (and NUL, which it
cannot store, becomes U+FFFD). A full buffer
drops its oldest lines, counting them and warning once: a program that writes faster than
the platform takes is never slowed. Lines are kept in memory only (no disk spool): what a
dead platform never received by ``close`` is lost, and counted.

``mldiag run`` ships every line its program writes (and the replica launcher every line
of a job's replica); :class:`LogHandler` ships a Python program's ``logging`` records.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from mldiag.config import Mode
from mldiag.transport import Outcome, client, post_batch

logger = logging.getLogger("mldiag")

MAX_LINE_CHARS = 16_384
"""Characters of one line the platform takes (``mldiag_schemas.logs.MAX_LOG_LINE_CHARS``)."""
MAX_BATCH_LINES = 10_000
"""Lines of one request the platform takes (``MAX_LOG_LINES_PER_REQUEST``)."""
CUT_MARK = "…"
"""Ends a line that was cut to ``MAX_LINE_CHARS``."""

STDOUT, STDERR, SYSTEM = "STDOUT", "STDERR", "SYSTEM"
"""Streams (``LogStream``) a line can come from; ``SYSTEM`` lines are mldiag's own."""

DEFAULT_CAPACITY = 100_000
"""Lines the buffer holds before it drops its oldest."""
DEFAULT_BATCH_BYTES = 256 * 1024
"""Bytes of text in one request: well inside the platform's 4 MiB, and (with each line's
other fields) within one bus message."""
BACKLOG_FACTOR = 5
"""A batch takes up to this many times ``batch_lines`` when more wait (a backlog drains in
fewer requests; the platform's cost per request is mostly fixed)."""
_FIRST_BACKOFF = 0.5
_JOIN_SECONDS = 0.5

_Line = tuple[float, str, str, str, int | None]
"""(time.time(), stream, severity, text, pid) of one buffered line."""


def cut(text: str) -> str:
    """``text`` as the platform takes it: within ``MAX_LINE_CHARS`` (marked with ``…`` when
    it was longer), NUL replaced by U+FFFD (no text column stores NUL, and one would cost
    the whole batch its place)."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if len(text) <= MAX_LINE_CHARS:
        return text
    return text[: MAX_LINE_CHARS - len(CUT_MARK)] + CUT_MARK


class LogShipper:
    """Sends one run's lines, written by one host and process, in the background.

    Args:
        ingestion_url: Where ingestion listens (the SDK's ``Settings.ingestion_url``).
        run_id: The run the lines belong to.
        token: API token (``Authorization: Bearer``); may be empty for a local stack.
        host: The host every line names (``MLDIAG_HOST`` for a job's replica).
        process_index: The process (rank) on the host, when several write.
        request_timeout: Timeout of one request, in seconds.
        max_backoff: Longest wait between two attempts at one batch.
        capacity: Lines buffered at most; beyond it the oldest are dropped.
        flush_interval: Most seconds a line waits before its batch is sent.
        batch_lines: Lines that make a batch worth sending at once (a batch takes up to
            ``BACKLOG_FACTOR`` times as many when more wait).
        batch_bytes: Most bytes of text in one batch.
    """

    def __init__(
        self,
        ingestion_url: str,
        run_id: str,
        token: str = "",
        *,
        host: str = "",
        process_index: int | None = None,
        request_timeout: float = 5.0,
        max_backoff: float = 10.0,
        capacity: int = DEFAULT_CAPACITY,
        flush_interval: float = 0.5,
        batch_lines: int = 1000,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> None:
        self._url = f"{ingestion_url.rstrip('/')}/v1/machineLearningRuns/{run_id}/logs:write"
        self._http = client(token, request_timeout)
        self._host = host[:253]
        self._process_index = process_index
        self._max_backoff = max_backoff
        self._capacity = max(capacity, 1)
        self._flush_interval = flush_interval
        self._batch_lines = max(batch_lines, 1)
        self._take_lines = min(self._batch_lines * BACKLOG_FACTOR, MAX_BATCH_LINES)
        self._batch_bytes = batch_bytes
        self._buffer: deque[_Line] = deque()
        self._sending = 0
        """Lines taken from the buffer whose batch is not settled yet."""
        self._first_at: float | None = None
        """When the oldest line now buffered was written (monotonic), for the interval."""
        self._wake = threading.Condition()
        self._stopping = False
        self._stopped = threading.Event()
        """Set by ``close``: a batch waiting out its backoff gives up."""
        self._closed = False
        self.dropped = 0
        """Lines lost: dropped from a full buffer, refused by the platform, or unsent at
        ``close``."""
        self.sent = 0
        """Lines the platform accepted."""
        self.reachable = True
        """False from an attempt that found the platform unavailable until one succeeds:
        a caller with somewhere to be need not wait on a flush then."""
        self._thread = threading.Thread(target=self._loop, name="mldiag-logs", daemon=True)
        self._thread.start()

    # -- writers' side --------------------------------------------------------------------

    def write(
        self,
        text: str,
        stream: str = STDOUT,
        *,
        severity: str = "DEFAULT",
        pid: int | None = None,
        at: float | None = None,
    ) -> None:
        """Buffer one line (without its line break); ``at`` is ``time.time()`` of writing."""
        line = (time.time() if at is None else at, stream, severity, cut(text), pid)
        with self._wake:
            if self._closed:
                return
            self._append(line)

    def write_many(
        self, texts: list[str], stream: str = STDOUT, *, pid: int | None = None, at: float
    ) -> None:
        """Buffer several lines written at one time (one lock for all of them)."""
        with self._wake:
            if self._closed:
                return
            for text in texts:
                self._append((at, stream, "DEFAULT", cut(text), pid))

    def _append(self, line: _Line) -> None:
        if len(self._buffer) >= self._capacity:
            self._buffer.popleft()
            self.dropped += 1
            if self.dropped == 1:
                logger.warning(
                    "mldiag.logs.dropping url=%s capacity=%d (lines come faster than they"
                    " are sent; the oldest are dropped and counted)",
                    self._url,
                    self._capacity,
                )
        self._buffer.append(line)
        if self._first_at is None:  # the sender sleeps until told when the first line is due
            self._first_at = time.monotonic()
            self._wake.notify()
        elif len(self._buffer) >= self._batch_lines:
            self._wake.notify()

    def flush(self, timeout: float) -> bool:
        """Send what is buffered now and wait at most ``timeout`` seconds; True once
        everything written so far has been sent (or refused)."""
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._wake:
            self._first_at = 0.0 if self._buffer else self._first_at  # due at once
            self._wake.notify_all()
            while self._buffer or self._sending:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._wake.wait(min(remaining, 0.05))
            return True

    def close(self, timeout: float) -> bool:
        """Flush for at most ``timeout`` seconds, then stop; later writes are ignored.
        Lines still unsent are counted in ``dropped``. True when nothing was left."""
        flushed = self.flush(timeout)
        with self._wake:
            self._closed = True
            self._stopping = True
            self._stopped.set()
            self.dropped += len(self._buffer)
            self._buffer.clear()
            self._wake.notify_all()
        # A batch waiting out its backoff gives up at once (and is counted); one in flight
        # ends within the request timeout, on a daemon thread that exit does not wait for.
        self._thread.join(_JOIN_SECONDS)
        if not self._thread.is_alive():
            self._http.close()
        if self.dropped:
            logger.warning("mldiag.logs.lost url=%s lines=%d", self._url, self.dropped)
        return flushed

    # -- the sender's thread --------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._due():
                    if self._stopping:
                        return
                    self._wake.wait(self._wait_time())
                if self._stopping:
                    return
                batch = self._take()
            try:
                self._send(batch)
            except Exception:  # a bug here must not stop shipping for the rest of the run
                logger.exception("mldiag.logs.send_failed url=%s", self._url)
                with self._wake:
                    self.dropped += len(batch)
            finally:
                with self._wake:
                    self._sending = 0
                    self._wake.notify_all()

    def _due(self) -> bool:
        if not self._buffer:
            return False
        if len(self._buffer) >= self._batch_lines or self._first_at is None:
            return True
        return time.monotonic() - self._first_at >= self._flush_interval

    def _wait_time(self) -> float | None:
        if self._first_at is None:
            return None
        return max(self._flush_interval - (time.monotonic() - self._first_at), 0.0) + 0.001

    def _take(self) -> list[_Line]:
        """The oldest lines, a batch's worth (the lock is held)."""
        batch: list[_Line] = []
        size = 0
        while self._buffer and len(batch) < self._take_lines:
            length = len(self._buffer[0][3])
            if batch and size + length > self._batch_bytes:
                break
            batch.append(self._buffer.popleft())
            size += length
        self._sending = len(batch)
        self._first_at = time.monotonic() if self._buffer else None
        return batch

    def _send(self, batch: list[_Line]) -> None:
        """Post ``batch`` until it is stored or refused; retries keep its id."""
        body = gzip.compress(self._encode(uuid.uuid4(), batch), compresslevel=1)
        backoff = _FIRST_BACKOFF
        while True:
            result = post_batch(self._http, self._url, body)
            self.reachable = result.outcome is not Outcome.UNAVAILABLE
            if result.outcome is Outcome.SENT:
                self.sent += len(batch)
                return
            if result.outcome is Outcome.REJECTED:
                logger.warning(
                    "mldiag.logs.rejected url=%s lines=%d status=%d detail=%s",
                    self._url,
                    len(batch),
                    result.status,
                    result.detail[:500],
                )
                with self._wake:
                    self.dropped += len(batch)
                return
            # Its own event, not the buffer's condition: writers notify that one often.
            if self._stopped.wait(backoff):
                with self._wake:
                    self.dropped += len(batch)
                return
            backoff = min(backoff * 2, self._max_backoff)

    def _encode(self, batch_id: uuid.UUID, batch: list[_Line]) -> bytes:
        lines: list[dict[str, Any]] = []
        last_at, last_time = -1.0, ""
        for at, stream, severity, text, pid in batch:
            if at != last_at:  # lines of one read share a time: format it once
                last_at, last_time = at, datetime.fromtimestamp(at, UTC).isoformat()
            line: dict[str, Any] = {"time": last_time, "stream": stream, "text": text}
            if self._host:
                line["host"] = self._host
            if severity != "DEFAULT":
                line["severity"] = severity
            if pid is not None:
                line["pid"] = pid
            if self._process_index is not None:
                line["processIndex"] = self._process_index
            lines.append(line)
        return json.dumps(
            {"batchId": str(batch_id), "lines": lines}, ensure_ascii=False, separators=(",", ":")
        ).encode("utf-8", "replace")


_LEVELS = ((logging.CRITICAL, "CRITICAL"), (logging.ERROR, "ERROR"), (logging.WARNING, "WARNING"))


def severity_of(level: int) -> str:
    """A ``logging`` level as a severity (``LogSeverity``): NOTSET is DEFAULT."""
    for floor, name in _LEVELS:
        if level >= floor:
            return name
    if level >= logging.INFO:
        return "INFO"
    return "DEBUG" if level > logging.NOTSET else "DEFAULT"


class LogHandler(logging.Handler):
    """A ``logging`` handler that ships records to the current run, each formatted record
    one line per line of its text, with its level as the severity::

        logging.getLogger().addHandler(mldiag.LogHandler())

    Records logged while no run is current (before ``mldiag.init``, after ``finish``) are
    skipped. The SDK's own ``mldiag`` logger is never shipped (its warnings may be about
    shipping itself). Under ``mldiag run``, which ships the program's output already, a
    handler that also writes to stderr would ship each record twice.
    """

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self._shippers: dict[str, LogShipper] = {}
        self._lock_shippers = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        """Ship ``record`` (never raises: ``handleError`` reports a failure)."""
        if record.name == "mldiag" or record.name.startswith("mldiag."):
            return
        try:
            shipper = self._shipper()
            if shipper is None:
                return
            severity = severity_of(record.levelno)
            for text in self.format(record).splitlines() or [""]:
                shipper.write(
                    text, "STDERR", severity=severity, pid=record.process, at=record.created
                )
        except Exception:  # noqa: BLE001  # logging's contract: a handler reports, never raises
            self.handleError(record)

    def flush(self) -> None:
        """Send what is buffered (at most the run's request timeout)."""
        with self._lock_shippers:
            shippers = list(self._shippers.values())
        for shipper in shippers:
            shipper.flush(5.0)

    def close(self) -> None:
        """Flush and stop every shipper this handler started."""
        with self._lock_shippers:
            shippers = list(self._shippers.values())
            self._shippers.clear()
        for shipper in shippers:
            shipper.close(5.0)
        super().close()

    def _shipper(self) -> LogShipper | None:
        from mldiag.run import current_run  # noqa: PLC0415  # run imports much; only when used

        run = current_run()
        if run is None or run.mode is not Mode.ONLINE:
            return None  # a disabled run sends nothing; an offline one keeps no log lines
        with self._lock_shippers:
            shipper = self._shippers.get(run.run_id)
            if shipper is None:
                settings = run.settings
                shipper = LogShipper(
                    settings.ingestion_url,
                    run.run_id,
                    settings.token,
                    host=run.host,
                    process_index=run.process_index,
                    request_timeout=settings.request_timeout,
                )
                self._shippers[run.run_id] = shipper
            return shipper


def ship_enabled(environ: Mapping[str, str]) -> bool:
    """Whether ``MLDIAG_LOGS`` leaves shipping on (anything but ``0``/``false``/``no``)."""
    value = str(environ.get("MLDIAG_LOGS", "1")).strip().lower()
    return value not in ("0", "false", "no", "off")
