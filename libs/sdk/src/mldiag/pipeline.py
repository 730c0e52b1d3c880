"""The path of a point from ``log`` to ingestion: buffer → batches → spool → HTTP.

- The **buffer** is a deque the training thread appends to (no lock, no I/O, no conversion),
  or any number of threads at once: an append is atomic under the GIL, and the one counter
  the callers update is written so that no increment is lost. It is bounded by
  ``max_buffered_points``: a caller that finds it full spills one batch to the spool itself,
  paying the conversion and one disk write rather than losing points.
- The **collector** thread drains the buffer every ``flush_interval`` seconds, or as soon as
  ``batch_points`` are waiting, converts values to floats and appends each encoded batch to
  the spool (a write-ahead log, see :mod:`mldiag.spool`).
- The **sender** thread posts spooled batches in order, oldest first (orphaned spools of
  earlier processes before this one's), acknowledging each once ingestion has stored it. A
  batch keeps its id across retries, so ingestion stores it once. An unreachable platform
  means exponential backoff while the spool grows on disk; a 4xx means a bad batch, written
  to the dead-letter file and skipped. A spool that cannot write (a full disk) leaves its
  batches waiting in memory, retried at each collect, up to 64 MiB.
"""

from __future__ import annotations

import collections
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from mldiag.config import Settings
from mldiag.encoding import Encoder, Entry, decode_body
from mldiag.spool import BatchQueue, Record, Spool
from mldiag.transport import MetricsWriter, Outcome, Result

logger = logging.getLogger("mldiag")

_MAX_UNSPOOLED_BYTES = 64 * 1024 * 1024
"""Bytes of encoded batches kept in memory while the spool cannot write (the bound of
:class:`mldiag.spool.MemoryQueue`, the spool of last resort)."""


class Pipeline:
    """Buffer, collector and sender of one run in one process."""

    def __init__(
        self,
        settings: Settings,
        queue: BatchQueue,
        writer: MetricsWriter,
        encoder: Encoder,
        *,
        orphans: list[Spool] | None = None,
        dead_letter_dir: Path | None = None,
        before_send: Callable[[float], bool] | None = None,
    ) -> None:
        self._settings = settings
        self._queue = queue
        self._writer = writer
        self._encoder = encoder
        self._orphans = list(orphans or [])
        self._dead_letter_dir = dead_letter_dir
        self._before_send = before_send
        self._hook_at = 0.0
        self._hook_backoff = 0.0
        self._buffer: collections.deque[Entry] = collections.deque()
        # Two counters, each written by one side only, so neither needs a lock.
        self.enqueued_points = 0
        self._drained_points = 0
        self._batch_points = settings.batch_points
        self._max_points = settings.max_buffered_points
        # Re-entrant: a SIGTERM handler may finish the run while this thread is collecting.
        self._collect_lock = threading.RLock()
        self._wake_collector = threading.Event()
        self._wake_sender = threading.Condition()
        self._stopping = threading.Event()
        self._retry_now = threading.Event()  # a flush: retry at once, whatever the backoff
        self._collected = threading.Event()  # set once the last collect after stopping is done
        self._deadline = float("inf")
        self._idle = threading.Event()
        self._outage_since: float | None = None
        self.sent_batches = 0
        self.dead_batches = 0
        self.spilled = 0
        self.lost_batches = 0
        """Batches dropped because neither the spool nor the memory bound could hold them."""
        self._unspooled: collections.deque[bytes] = collections.deque()
        self._unspooled_bytes = 0
        self._spool_error: int | None = None  # refusals in the current episode; None: none
        self._collector = threading.Thread(
            target=self._collect_loop, name="mldiag-collector", daemon=True
        )
        # Who closes the spool: ``close``, or the sender as it exits when ``close`` gave up
        # waiting for it (a slow request, the run's creation), so the lock is released
        # once nothing reads the spool any more, never while something does.
        self._release_lock = threading.Lock()
        self._release_requested = False
        self._sender_exited = False
        self._released = False
        self._sender = threading.Thread(
            target=self._send_then_release, name="mldiag-sender", daemon=True
        )

    def start(self) -> None:
        """Start both threads."""
        self._collector.start()
        self._sender.start()

    # -- the training thread ------------------------------------------------------------

    def put(self, step: int, values: Mapping[str, Any], labels: Mapping[str, str] | None) -> None:
        """Buffer one call: a tuple append and one integer update (no lock, no I/O).

        Safe from any number of threads at once: the append is one C call (atomic under
        the GIL), and the counter is only ever written here (see ``enqueued_points``).
        """
        points = len(values)
        self._buffer.append((step, time.time(), values, labels))
        # ``points`` is computed first on purpose: between reading and storing the counter
        # there is then no call, hence no point where the interpreter switches threads, so
        # concurrent callers never lose each other's increments.
        self.enqueued_points += points
        pending = self.enqueued_points - self._drained_points
        if pending >= self._batch_points:
            if pending > self._max_points:
                self._spill(pending)
            elif not self._wake_collector.is_set():
                self._wake_collector.set()

    def _spill(self, pending: int) -> None:
        """The buffer is over its bound: spill one batch to the spool from this thread.

        Back-pressure rather than loss. While the collector (or another caller) is busy
        draining, the caller does not wait for it unless the buffer has reached twice its
        bound (a stuck collector): that is the hard limit on memory. A caller that did wait
        spills only if the buffer is still over its bound: with many threads logging, the
        ones queued behind the lock would otherwise each spill a batch in turn, long after
        the first spill brought the buffer back under its bound.
        """
        waited = pending > 2 * self._max_points
        if not self._collect_lock.acquire(blocking=waited):
            return
        try:
            if waited and self.enqueued_points - self._drained_points <= self._max_points:
                return
            self.spilled += 1
            self.collect(max_batches=1)
        finally:
            self._collect_lock.release()

    # -- collector ---------------------------------------------------------------------

    def collect(self, max_batches: int | None = None) -> None:
        """Drain the buffer into encoded batches on the spool (any thread may call it).

        The lock is held for one batch at a time, so a caller spilling a full buffer waits
        for at most one batch of the collector's, and spills ``max_batches`` at most.
        """
        if self._unspooled:
            with self._collect_lock:
                self._spool(None)
        appended = 0
        # Only what is buffered now: chasing calls that arrive meanwhile would cut the
        # stream into tiny batches.
        left = len(self._buffer)
        while left > 0 and self._buffer and (max_batches is None or appended < max_batches):
            with self._collect_lock:
                entries: list[Entry] = []
                points = 0
                while left > 0 and self._buffer and points < self._batch_points:
                    left -= 1
                    entry = self._buffer.popleft()
                    entries.append(entry)
                    points += len(entry[2])
                # Counted before encoding: these points have left the buffer whatever
                # happens below, and a failure must not leave the bound believing otherwise
                # (every later call would spill).
                self._drained_points += points
                batch = self._encoder.encode(entries) if entries else None
                if batch is not None:
                    self._spool(batch.body)
            appended += 1
            with self._wake_sender:
                self._wake_sender.notify_all()

    def _spool(self, body: bytes | None) -> None:
        """Append ``body`` to the spool after any batch it refused before, in order.

        A spool that cannot write (a full disk, its directory gone) keeps nothing lost for
        as long as memory allows: refused batches wait here and are retried at each
        collect, up to ``_MAX_UNSPOOLED_BYTES``, past which the oldest is dropped (logged).
        Called with the collect lock held.
        """
        if body is not None:
            self._unspooled.append(body)
            self._unspooled_bytes += len(body)
        while self._unspooled:
            try:
                self._queue.append(self._unspooled[0])
            except OSError as error:
                self._refused(error)
                return
            self._unspooled_bytes -= len(self._unspooled.popleft())
        if self._spool_error is not None:
            logger.info("mldiag.spool.recovered after_batches=%d", self._spool_error)
            self._spool_error = None

    def _refused(self, error: OSError) -> None:
        """The spool refused a batch: warn once per episode, keep memory bounded."""
        if self._spool_error is None:
            self._spool_error = 0
            logger.error("mldiag.spool.append_failed error=%s (batches wait in memory)", error)
        self._spool_error += 1
        while self._unspooled_bytes > _MAX_UNSPOOLED_BYTES and len(self._unspooled) > 1:
            self._unspooled_bytes -= len(self._unspooled.popleft())
            self.lost_batches += 1
            logger.error("mldiag.spool.batch_dropped lost_batches=%d", self.lost_batches)

    def _collect_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake_collector.wait(self._settings.flush_interval)
            self._wake_collector.clear()
            self._guard(self.collect)

    # -- sender ------------------------------------------------------------------------

    def _send_then_release(self) -> None:
        try:
            self._send_loop()
        finally:
            with self._release_lock:
                self._sender_exited = True
                release = self._release_requested
            if release:
                self._guard(self._release)

    def _send_loop(self) -> None:
        backoff = 0.0
        while True:
            if self._past_deadline():
                return
            self._run_hook()
            if self._past_deadline():  # creating the run may have taken the time left
                return
            record, queue = self._next()
            if record is None:
                self._idle.set()
                if self._collected.is_set():
                    return
                with self._wake_sender:
                    self._wake_sender.wait(self._settings.flush_interval)
                continue
            self._idle.clear()
            timeout = min(self._settings.request_timeout, max(self._remaining(), 0.1))
            result = self._writer.write(queue.run_id, record.payload, timeout=timeout)
            if result.outcome is Outcome.UNAVAILABLE:
                backoff = min(max(backoff * 2, 0.25), self._settings.max_backoff)
                self._note_outage(result)
                self._sleep(backoff * random.uniform(0.5, 1.0))  # noqa: S311  # jitter only
                continue
            backoff = 0.0
            self._note_recovery()
            if result.outcome is Outcome.REJECTED:
                self.dead_batches += 1
                self._guard(partial(self._dead_letter, queue.run_id, record, result))
            else:
                self.sent_batches += 1
            queue.ack(record)

    def _run_hook(self) -> None:
        """Call ``before_send`` (creating the run) until it reports done, with backoff."""
        hook = self._before_send
        if hook is None or time.monotonic() < self._hook_at:
            return
        done = True
        try:
            done = hook(max(min(self._remaining(), self._settings.request_timeout), 0.1))
        except Exception:  # telemetry must not break the job
            logger.exception("mldiag.pipeline.error")
        if done:
            self._before_send = None
        else:
            self._hook_backoff = min(max(self._hook_backoff * 2, 0.5), self._settings.max_backoff)
            self._hook_at = time.monotonic() + self._hook_backoff

    def _next(self) -> tuple[Record | None, BatchQueue]:
        while self._orphans:
            orphan = self._orphans[0]
            record = orphan.peek()
            if record is not None:
                return record, orphan
            orphan.close()
            self._orphans.pop(0)
        return self._queue.peek(), self._queue

    def _past_deadline(self) -> bool:
        return self._stopping.is_set() and time.monotonic() >= self._deadline

    def _remaining(self) -> float:
        return self._deadline - time.monotonic()

    def _sleep(self, seconds: float) -> None:
        """Wait out a backoff. New batches do not cut it short: every collect wakes the
        sender, and during an outage that made a retry (and a re-read of the oldest record,
        ~0.7 ms of the GIL) per batch instead of per backoff. A flush or close does."""
        until = time.monotonic() + min(seconds, max(self._remaining(), 0.0))
        with self._wake_sender:
            while not (self._retry_now.is_set() or self._stopping.is_set()):
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._wake_sender.wait(left)
        self._retry_now.clear()

    def _note_outage(self, result: Result) -> None:
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            logger.warning(
                "mldiag.ingestion.unavailable status=%d detail=%s (batches stay spooled)",
                result.status,
                result.detail[:200],
            )

    def _note_recovery(self) -> None:
        if self._outage_since is not None:
            logger.info(
                "mldiag.ingestion.recovered after_s=%.1f", time.monotonic() - self._outage_since
            )
            self._outage_since = None

    def _dead_letter(self, run_id: str, record: Record, result: Result) -> None:
        logger.error(
            "mldiag.batch.rejected run=%s status=%d detail=%s (dead-lettered)",
            run_id,
            result.status,
            result.detail[:500],
        )
        if self._dead_letter_dir is None:
            return
        self._dead_letter_dir.mkdir(parents=True, exist_ok=True)
        line = {
            "time": datetime.now(UTC).isoformat(),
            "runId": run_id,
            "status": result.status,
            "detail": result.detail,
            "request": decode_body(record.payload),  # a frame or (older spools) gzipped JSON
        }
        with (self._dead_letter_dir / f"{run_id}.jsonl").open("a") as out:
            out.write(json.dumps(line) + "\n")

    # -- shutdown ----------------------------------------------------------------------

    def flush(self, timeout: float) -> bool:
        """Collect now and wait until everything is sent; False when ``timeout`` ran out."""
        deadline = time.monotonic() + timeout
        self._guard(self.collect)
        while time.monotonic() < deadline:
            if self._drained():
                return True
            self._retry_now.set()
            with self._wake_sender:
                self._wake_sender.notify_all()
            self._idle.wait(min(0.05, max(deadline - time.monotonic(), 0.0)))
            self._idle.clear()
        return self._drained()

    def _drained(self) -> bool:
        """Nothing buffered, nothing waiting for the spool, nothing spooled unsent."""
        return (
            not self._buffer
            and not self._unspooled
            and not self._orphans
            and self._queue.pending_bytes() == 0
        )

    def close(self, timeout: float) -> bool:
        """Send what can be sent within ``timeout``, stop the threads, close the spool.

        Returns whether everything was sent; what was not stays in the spool for the next
        process to replay.
        """
        self._deadline = time.monotonic() + timeout
        self._stopping.set()
        self._wake_collector.set()
        self._collector.join(timeout)
        self._guard(self.collect)  # anything logged while the collector stopped
        self._collected.set()
        with self._wake_sender:
            self._wake_sender.notify_all()
        self._sender.join(max(self._remaining(), 0.0) + 0.2)
        done = self._queue.pending_bytes() == 0 and not self._unspooled and not self._buffer
        if self._unspooled:
            logger.error(
                "mldiag.spool.unwritten batches=%d (lost at exit: the spool refused them)",
                len(self._unspooled),
            )
        with self._release_lock:
            self._release_requested = True
            # A sender still running (or never started) is left to release the spool itself.
            release = self._sender_exited or self._sender.ident is None
        if release:
            self._guard(self._release)
        return done

    def _release(self) -> None:
        """Close the spool and the orphans (their locks go with them); once."""
        if self._released:
            return
        self._released = True
        self._queue.close()
        for orphan in self._orphans:
            orphan.close()

    def _guard(self, action: Callable[[], object]) -> bool:
        """Run ``action``; a failure of the SDK is logged, never raised into training."""
        try:
            action()
        except Exception:  # whatever breaks in telemetry must not break the job
            logger.exception("mldiag.pipeline.error")
            return False
        return True
