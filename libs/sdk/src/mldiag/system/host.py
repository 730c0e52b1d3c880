"""Host CPU and memory, and this process's resident memory (psutil, every 10 s by default)."""

from __future__ import annotations

import os

from mldiag.system.base import Sample, Source
from mldiag.system.names import HOST_CPU, HOST_MEMORY, HOST_MEMORY_USED, PROCESS_RSS


def host_source() -> Source | None:
    """Host CPU and memory, and this process's resident memory (psutil)."""
    try:
        import psutil  # type: ignore[import-untyped,unused-ignore]  # noqa: PLC0415  # optional
    except ImportError:
        return None
    psutil.cpu_percent(interval=None)  # the first call only starts the measurement
    process = psutil.Process(os.getpid())

    def sample() -> Sample:
        memory = psutil.virtual_memory()
        return {
            (HOST_CPU, ""): float(psutil.cpu_percent(interval=None)),
            (HOST_MEMORY, ""): float(memory.percent),
            (HOST_MEMORY_USED, ""): float(memory.total - memory.available),
            (PROCESS_RSS, ""): float(process.memory_info().rss),
        }

    return sample
