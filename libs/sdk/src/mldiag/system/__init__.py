"""Host and accelerator metrics sampled on a thread.

Two cadences: the contention source every second (``MLDIAG_CONTENTION_INTERVAL``), so
every slowdown window holds samples of the host's CPU modes, load, swap, disks, network,
the run's own processes and, while the host is busy, who else is; the others every 10 s
by default (``MLDIAG_SYSTEM_METRICS_INTERVAL``).

Each source is optional and imported lazily, on the sampler's thread: psutil for the host,
NVML (``nvidia-ml-py``) for NVIDIA GPUs, libtpu's monitoring SDK for TPUs. A missing one is
skipped without a word; a reading a device does not support is left out for that device; a
source that fails as a whole is dropped with one warning. Names follow the official SDK
(``host_cpu_utilization``, ``gpu_utilization``, ``vram_utilization``, ``tpu_duty_cycle``,
``tpu_tensorcore_utilization``, ``hbm_utilization``) plus what it leaves out (power,
temperature, clocks, bytes used, contention: :mod:`mldiag.system.names`). Per-device series
carry a ``device`` label, so values are kept per device, never averaged. docs/metrics.md
lists every metric with its unit, cadence and cost.
"""

from mldiag.system.base import (
    Finder,
    Labels,
    Record,
    Sample,
    Source,
    by_labels,
    point_labels,
    start_sources,
)
from mldiag.system.contention import ContentionMeter, ContentionThresholds, contention_source
from mldiag.system.gpu import gpu_source
from mldiag.system.host import host_source
from mldiag.system.sampler import DEFAULT_SOURCES, SystemSampler
from mldiag.system.tpu import tpu_source

__all__ = [
    "DEFAULT_SOURCES",
    "ContentionMeter",
    "ContentionThresholds",
    "Finder",
    "Labels",
    "Record",
    "Sample",
    "Source",
    "SystemSampler",
    "by_labels",
    "contention_source",
    "gpu_source",
    "host_source",
    "point_labels",
    "start_sources",
    "tpu_source",
]
