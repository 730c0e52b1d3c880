"""Host and accelerator metrics sampled on a thread (``log_system_metrics=True``).

Each source is optional and imported lazily: psutil for host CPU and memory, NVML
(``nvidia-ml-py``) for GPUs. A missing one is skipped without a word; a failing one is
dropped with one warning. Metric names are the official SDK's: ``host_cpu_utilization``,
``host_memory_utilization``, ``gpu_utilization``, ``vram_utilization`` (GPU series carry a
``device`` label).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("mldiag")

Sample = dict[tuple[str, str], float]
"""(metric name, device label or "") → value."""

Record = Callable[[Sample], None]


def _host_source() -> Callable[[], Sample] | None:
    try:
        import psutil  # type: ignore[import-untyped,unused-ignore]  # noqa: PLC0415  # optional
    except ImportError:
        return None
    psutil.cpu_percent(interval=None)  # the first call only starts the measurement

    def sample() -> Sample:
        return {
            ("host_cpu_utilization", ""): float(psutil.cpu_percent(interval=None)),
            ("host_memory_utilization", ""): float(psutil.virtual_memory().percent),
        }

    return sample


def _gpu_source() -> Callable[[], Sample] | None:
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415  # optional

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001  # no library, no driver, no GPU: all mean "skip"
        return None

    def sample() -> Sample:
        values: Sample = {}
        for index, handle in enumerate(handles):
            rates: Any = pynvml.nvmlDeviceGetUtilizationRates(handle)
            memory: Any = pynvml.nvmlDeviceGetMemoryInfo(handle)
            values["gpu_utilization", str(index)] = float(rates.gpu)
            values["vram_utilization", str(index)] = 100.0 * memory.used / max(memory.total, 1)
        return values

    return sample


class SystemSampler:
    """Samples every ``interval`` seconds and hands the values to ``record``."""

    def __init__(self, record: Record, interval: float) -> None:
        self._record = record
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mldiag-system", daemon=True)
        self._sources: list[Callable[[], Sample]] = []

    def start(self) -> None:
        """Find the available sources (on the thread) and start sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (does not wait for a sample in progress)."""
        self._stop.set()

    def _loop(self) -> None:
        self._sources = [s for s in (_host_source(), _gpu_source()) if s is not None]
        while not self._stop.wait(self._interval):
            for source in list(self._sources):
                try:
                    self._record(source())
                except Exception:  # a broken source is dropped, never raised
                    logger.warning("mldiag.system.source_failed (dropped)", exc_info=True)
                    self._sources.remove(source)
