"""NVIDIA GPUs through NVML (``nvidia-ml-py``), every 10 s by default."""

from __future__ import annotations

import importlib
from collections import deque
from collections.abc import Callable
from typing import Any

from mldiag.system.base import Sample, Source
from mldiag.system.names import (
    GPU_ECC_ERRORS,
    GPU_PCIE_RX,
    GPU_PCIE_TX,
    GPU_THROTTLE_REASONS,
    GPU_THROTTLED,
    GPU_XID,
)

# NVML constants (pynvml names them too; numbers keep the fakes in tests small).
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_FI_DEV_GPU_UTIL_TENSOR = 156  # the tensor-core activity field the official SDK reads
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0  # since the last driver load (the aggregate one survives reboots)
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x8
_THROTTLE_THERMAL_OR_POWER = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # SW/HW power, SW/HW thermal, HW brake
_XIDS_PER_SAMPLE = 64
"""Most XID events read per sample: a storm must not hold the sampler."""


def gpu_source(module: Any = None) -> Source | None:
    """Utilisation, tensor-core activity, memory, power, temperature, clocks, throttling
    (the flag and NVML's reason mask), uncorrected ECC errors, PCIe throughput and XID errors
    of every NVIDIA GPU (NVML); ``module`` replaces the ``pynvml`` module (tests)."""
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

    def pcie(counter: int) -> Callable[[Any], float]:
        # NVML answers in KB/s, measured over 20 ms inside the call.
        return lambda handle: 1024.0 * nvml.nvmlDeviceGetPcieThroughput(handle, counter)

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
        (
            GPU_THROTTLE_REASONS,
            lambda handle: int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)),
        ),
        (
            GPU_ECC_ERRORS,
            lambda handle: nvml.nvmlDeviceGetTotalEccErrors(
                handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC
            ),
        ),
        (GPU_PCIE_RX, pcie(NVML_PCIE_UTIL_RX_BYTES)),
        (GPU_PCIE_TX, pcie(NVML_PCIE_UTIL_TX_BYTES)),
    )
    unsupported: set[tuple[int, str]] = set()
    xids = _XidEvents(nvml, handles)

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
            reasons = values.get((GPU_THROTTLE_REASONS, device))
            if reasons is not None:
                throttled = int(reasons) & _THROTTLE_THERMAL_OR_POWER
                values[GPU_THROTTLED, device] = 1.0 if throttled else 0.0
        values.update(xids.sample())
        return values

    return sample


class _XidEvents:
    """XID critical errors of the GPUs, from an NVML event set polled without waiting.

    A sample holds one value per series, so one point per device per sample: further XIDs
    of the same device wait for the next samples, in order, and none is lost.
    """

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._devices: dict[Any, str] = {}
        self._pending: dict[str, deque[int]] = {}
        try:
            self._events: Any = nvml.nvmlEventSetCreate()
        except Exception:  # noqa: BLE001  # no events on this driver: no XIDs to read
            self._events = None
            return
        for index, handle in enumerate(handles):
            try:
                nvml.nvmlDeviceRegisterEvents(
                    handle, NVML_EVENT_TYPE_XID_CRITICAL_ERROR, self._events
                )
            except Exception:  # noqa: BLE001, S112  # NotSupported (a VM, MIG): left out
                continue
            self._devices[_key(handle)] = str(index)

    def sample(self) -> Sample:
        if self._events is None or not self._devices:
            return {}
        for _ in range(_XIDS_PER_SAMPLE):
            try:
                event: Any = self._nvml.nvmlEventSetWait_v2(self._events, 0)
            except Exception:  # noqa: BLE001  # NVML_ERROR_TIMEOUT: nothing (more) happened
                break
            device = self._devices.get(_key(event.device))
            if device is not None:
                self._pending.setdefault(device, deque()).append(int(event.eventData))
        values: Sample = {}
        for device, codes in self._pending.items():
            if codes:
                values[GPU_XID, device] = float(codes.popleft())
        return values


def _key(handle: Any) -> Any:
    """A hashable identity of a device handle (pynvml's are ctypes pointers)."""
    value = getattr(handle, "contents", None)
    if value is not None:
        import ctypes  # noqa: PLC0415  # only real pynvml handles get here

        return ctypes.addressof(value)
    return handle
