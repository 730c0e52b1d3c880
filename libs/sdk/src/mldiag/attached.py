"""Metrics for a run that some other process owns: neither created nor ended here.

:class:`AttachedWriter` is the SDK's own path (:class:`~mldiag.pipeline.Pipeline`: buffer,
batches, disk spool, retries, dead letters) without the rest of a :class:`~mldiag.run.Run`:
no run creation, no phase, no heartbeats, no exit hooks. One process may hold one per run,
which is what ``mldiag agent`` does for every run it finds on its host. Its series carry the
host but no process index: they describe the host's share of the run, not one of its ranks,
so they never mix with the series of an SDK process on the same host.
"""

from __future__ import annotations

import logging
import os
import re
import time

from mldiag.config import Settings
from mldiag.encoding import Encoder
from mldiag.pipeline import Pipeline
from mldiag.spool import BatchQueue, MemoryQueue, Spool, SpoolError
from mldiag.system import Sample, by_labels
from mldiag.transport import MetricsWriter, client

logger = logging.getLogger("mldiag")

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class AttachedWriter:
    """Records system samples into run ``run_id`` from this host, until :meth:`close`.

    ``writer`` names this kind of writer in the spool (``{spool}/{run}/{host}-{writer}``).
    """

    def __init__(self, run_id: str, settings: Settings, host: str, writer: str = "agent") -> None:
        self.run_id = run_id
        self._http = client(settings.token, settings.request_timeout)
        dead_letters = settings.spool_dir / "dead-letter" if settings.spool_dir else None
        self._pipeline = Pipeline(
            settings,
            _open_queue(settings, run_id, f"{_UNSAFE.sub('_', host) or 'host'}-{writer}"),
            MetricsWriter(self._http, settings.ingestion_url),
            Encoder(host, None),
            dead_letter_dir=dead_letters,
        )
        self._pipeline.start()
        self._closed = False

    def record(self, sample: Sample, step: int = 0) -> None:
        """Buffer one sample at ``step`` (each value with its labels: a device, a process)."""
        if self._closed:
            return
        for labels, values in by_labels(sample):
            self._pipeline.put(step, values, labels)

    def close(self, timeout: float) -> bool:
        """Send what is buffered within ``timeout`` seconds and stop; True when all was sent.

        What could not be sent stays spooled for the next writer (or SDK process) to replay.
        """
        if self._closed:
            return True
        self._closed = True
        began = time.monotonic()
        sent = self._pipeline.close(timeout)
        if sent:
            self._http.close()
        else:
            logger.warning(
                "mldiag.attached.unsent run=%s after_s=%.1f (left in the spool)",
                self.run_id,
                time.monotonic() - began,
            )
        return sent


def _open_queue(settings: Settings, run_id: str, name: str) -> BatchQueue:
    """This writer's spool, the way :class:`~mldiag.run.Run` opens its own."""
    root = settings.spool_dir
    if root is None:
        return MemoryQueue(run_id)
    try:
        try:
            return Spool(root / run_id / name, run_id)
        except SpoolError:  # another writer of the same name lives: a directory of its own
            return Spool(root / run_id / f"{name}-{os.getpid()}", run_id)
    except OSError as error:
        logger.warning(
            "mldiag.spool.unavailable dir=%s error=%s (batches wait in memory)", root, error
        )
        return MemoryQueue(run_id)
