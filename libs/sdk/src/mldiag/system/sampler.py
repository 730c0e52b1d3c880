"""The sampler thread: every source at its cadence, each sample handed to a callback."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from mldiag.system.base import Finder, Record, Sample, Source, start_sources
from mldiag.system.gpu import gpu_source
from mldiag.system.host import host_source
from mldiag.system.tpu import tpu_source

logger = logging.getLogger("mldiag")

DEFAULT_SOURCES: tuple[Finder, ...] = (host_source, gpu_source, tpu_source)
"""The slow sources of the SDK's sampler (every 10 s by default)."""


class SystemSampler:
    """Samples ``sources`` every ``interval`` seconds and ``fast_sources`` every
    ``fast_interval`` seconds (0: none), handing each sample to ``record``.

    A series the fast sources record is left out of the slow ones' samples, so each series
    has one cadence (the contention source's ``host_cpu_utilization`` every second replaces
    the host source's every ten).
    """

    def __init__(
        self,
        record: Record,
        interval: float,
        sources: tuple[Finder, ...] = DEFAULT_SOURCES,
        *,
        fast_sources: tuple[Finder, ...] = (),
        fast_interval: float = 0.0,
    ) -> None:
        self._record = record
        self._groups: list[_Group] = [_Group(interval, sources)]
        if fast_interval > 0 and fast_sources:
            self._groups.append(_Group(fast_interval, fast_sources))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mldiag-system", daemon=True)
        self._fast_names: set[str] = set()

    def start(self) -> None:
        """Find the available sources (on the thread) and start sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (does not wait for a sample in progress)."""
        self._stop.set()

    def _loop(self) -> None:
        now = time.monotonic()
        for group in self._groups:
            group.begin(now)
        slow, *fast = self._groups
        while True:
            due = min(group.due for group in self._groups)
            if self._stop.wait(max(due - time.monotonic(), 0.0)):
                return
            now = time.monotonic()
            for group in fast:
                if group.due <= now:
                    for sample in group.sample(now):
                        self._fast_names.update(name for name, _ in sample)
                        self._record(sample)
            if slow.due <= now:
                for sample in slow.sample(now):
                    kept = {key: v for key, v in sample.items() if key[0] not in self._fast_names}
                    if kept:
                        self._record(kept)


class _Group:
    """Sources sharing one cadence."""

    def __init__(self, interval: float, finders: Iterable[Finder]) -> None:
        self.interval = interval
        self.due = 0.0
        self._finders = tuple(finders)
        self._sources: list[Source] = []

    def begin(self, now: float) -> None:
        self._sources = start_sources(self._finders)
        self.due = now + self.interval

    def sample(self, now: float) -> list[Sample]:
        # The next time is counted from the schedule, not from now: no drift, and a slow
        # sample (a host under load) skips ticks rather than bunching them up.
        self.due += self.interval * (int((now - self.due) // self.interval) + 1)
        samples: list[Sample] = []
        for source in list(self._sources):
            try:
                samples.append(source())
            except Exception:  # a broken source is dropped, never raised
                logger.warning("mldiag.system.source_failed (dropped)", exc_info=True)
                self._sources.remove(source)
        return samples
