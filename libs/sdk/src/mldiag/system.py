"""Host and accelerator metrics sampled on a thread (every 10 s by default).

Each source is optional and imported lazily, on the sampler's thread: psutil for the host,
NVML (``nvidia-ml-py``) for NVIDIA GPUs, libtpu's monitoring SDK for TPUs. A missing one is
skipped without a word; a reading a device does not support is left out for that device; a
source that fails as a whole is dropped with one warning. Names follow the official SDK
(``host_cpu_utilization``, ``gpu_utilization``, ``vram_utilization``, ``tpu_duty_cycle``,
``tpu_tensorcore_utilization``, ``hbm_utilization``) plus what it leaves out (power,
temperature, clocks, bytes used). Per-device series carry a ``device`` label, so values are
kept per device, never averaged.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger("mldiag")

Sample = dict[tuple[str, str], float]
"""(metric name, device label or "") → value."""

Record = Callable[[Sample], None]
Source = Callable[[], Sample]

# NVML constants (pynvml names them too; numbers keep the fakes in tests small).
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_FI_DEV_GPU_UTIL_TENSOR = 156  # the tensor-core activity field the official SDK reads
_THROTTLE_THERMAL_OR_POWER = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # SW/HW power, SW/HW thermal, HW brake


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
            ("host_cpu_utilization", ""): float(psutil.cpu_percent(interval=None)),
            ("host_memory_utilization", ""): float(memory.percent),
            ("host_memory_used_bytes", ""): float(memory.total - memory.available),
            ("process_memory_rss_bytes", ""): float(process.memory_info().rss),
        }

    return sample


def gpu_source(module: Any = None) -> Source | None:
    """Utilisation, tensor-core activity, memory, power, temperature, clocks and throttling of
    every NVIDIA GPU (NVML); ``module`` replaces the ``pynvml`` module (tests)."""
    try:
        nvml: Any = module if module is not None else importlib.import_module("pynvml")
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001  # no library, no driver, no GPU: all mean "skip"
        return None
    if not handles:
        return None

    def tensor_activity(handle: Any) -> float:
        [field] = nvml.nvmlDeviceGetFieldValues(handle, [NVML_FI_DEV_GPU_UTIL_TENSOR])
        if getattr(field, "nvmlReturn", 0) != 0:
            raise RuntimeError("tensor-core activity is not supported")
        value = field.value
        return float(getattr(value, "dVal", getattr(value, "ullVal", value)))

    def throttled(handle: Any) -> float:
        reasons = int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
        return 1.0 if reasons & _THROTTLE_THERMAL_OR_POWER else 0.0

    optional: tuple[tuple[str, Callable[[Any], float]], ...] = (
        ("gpu_tensorcore_utilization", tensor_activity),
        ("gpu_power_watts", lambda handle: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
        (
            "gpu_temperature_celsius",
            lambda handle: nvml.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU),
        ),
        ("gpu_sm_clock_mhz", lambda handle: nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM)),
        (
            "gpu_memory_clock_mhz",
            lambda handle: nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_MEM),
        ),
        ("gpu_throttled", throttled),
    )
    unsupported: set[tuple[int, str]] = set()

    def sample() -> Sample:
        values: Sample = {}
        for index, handle in enumerate(handles):
            device = str(index)
            rates: Any = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory: Any = nvml.nvmlDeviceGetMemoryInfo(handle)
            values["gpu_utilization", device] = float(rates.gpu)
            values["gpu_duty_cycle", device] = float(rates.gpu)
            values["vram_utilization", device] = 100.0 * memory.used / max(memory.total, 1)
            values["vram_used_bytes", device] = float(memory.used)
            for name, read in optional:
                if (index, name) in unsupported:
                    continue
                try:
                    values[name, device] = float(read(handle))
                except Exception:  # noqa: BLE001  # NotSupported and friends: leave it out
                    unsupported.add((index, name))
        return values

    return sample


def tpu_source(monitoring: Any = None) -> Source | None:
    """Duty cycle, tensor-core utilisation and HBM of every local TPU chip (libtpu's
    monitoring SDK); ``monitoring`` replaces ``libtpu.sdk.tpumonitoring`` (tests)."""
    if monitoring is None:
        monitoring = _libtpu_monitoring()
    if monitoring is None:
        return None

    def series(name: str) -> list[float]:
        return [float(value) for value in monitoring.get_metric(name).data()]

    try:
        series("duty_cycle_pct")
    except Exception:  # noqa: BLE001  # no TPU attached to this process: nothing to sample
        return None

    def sample() -> Sample:
        values: Sample = {}
        for index, value in enumerate(series("duty_cycle_pct")):
            values["tpu_duty_cycle", str(index)] = value
        for index, value in enumerate(series("tensorcore_util")):
            values["tpu_tensorcore_utilization", str(index)] = value
        used, total = series("hbm_capacity_usage"), series("hbm_capacity_total")
        for index, (chip_used, chip_total) in enumerate(zip(used, total, strict=False)):
            values["hbm_used_bytes", str(index)] = chip_used
            values["hbm_utilization", str(index)] = (
                100.0 * chip_used / chip_total if chip_total else 0.0
            )
        return values

    return sample


def _libtpu_monitoring() -> Any:
    """``libtpu.sdk``'s monitoring module, loaded the way libtpu needs (its own symbols)."""
    if "libtpu" not in sys.modules:
        try:
            if importlib.util.find_spec("libtpu") is None:
                return None
        except (ImportError, ValueError):
            return None
    with _deep_bind():
        try:
            from libtpu import sdk  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
        except Exception:  # noqa: BLE001  # an old or broken libtpu has no monitoring to read
            return None
    return getattr(sdk, "tpumonitoring", None) or getattr(sdk, "monitoring", None)


@contextmanager
def _deep_bind() -> Iterator[None]:
    # libtpu's shared object must not resolve symbols against jaxlib's already loaded ones.
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_LOCAL | getattr(os, "RTLD_DEEPBIND", 0))
    try:
        yield
    finally:
        sys.setdlopenflags(flags)


DEFAULT_SOURCES: tuple[Callable[[], Source | None], ...] = (host_source, gpu_source, tpu_source)


class SystemSampler:
    """Samples every ``interval`` seconds and hands the values to ``record``."""

    def __init__(
        self,
        record: Record,
        interval: float,
        sources: tuple[Callable[[], Source | None], ...] = DEFAULT_SOURCES,
    ) -> None:
        self._record = record
        self._interval = interval
        self._finders = sources
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mldiag-system", daemon=True)
        self._sources: list[Source] = []

    def start(self) -> None:
        """Find the available sources (on the thread) and start sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (does not wait for a sample in progress)."""
        self._stop.set()

    def _loop(self) -> None:
        for find in self._finders:
            try:
                source = find()
            except Exception:  # a source that cannot start is skipped, never raised
                logger.warning("mldiag.system.source_unavailable", exc_info=True)
                continue
            if source is not None:
                self._sources.append(source)
        while not self._stop.wait(self._interval):
            for source in list(self._sources):
                try:
                    self._record(source())
                except Exception:  # a broken source is dropped, never raised
                    logger.warning("mldiag.system.source_failed (dropped)", exc_info=True)
                    self._sources.remove(source)
