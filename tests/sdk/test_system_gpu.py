"""NVML's contention readings through a stand-in of pynvml (no GPU here): ECC errors, the
throttle-reason mask, PCIe throughput and XID errors, each left out where NotSupported."""

from collections import deque
from types import SimpleNamespace
from typing import Any

from mldiag.system import gpu_source
from mldiag.system import names as n


class NotSupportedError(Exception):
    """pynvml's NVMLError_NotSupported."""


class TimeoutError_(Exception):  # noqa: N801  # pynvml's NVMLError_Timeout, not the builtin
    """pynvml's NVMLError_Timeout: no event within the wait."""


class FakeNvml:
    """Two GPUs; device 1 (a VM's, say) has no ECC, no PCIe counters and no events."""

    def __init__(self) -> None:
        self.events: deque[Any] = deque()
        self.registered: list[tuple[int, int]] = []
        self.waits: list[int] = []

    def nvmlInit(self) -> None:  # noqa: N802  # pynvml's names
        pass

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetUtilizationRates(self, _handle: int) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=90, memory=40)

    def nvmlDeviceGetMemoryInfo(self, _handle: int) -> Any:  # noqa: N802
        return SimpleNamespace(used=1, total=2)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:  # noqa: N802
        return 0x1 | 0x4 if handle == 0 else 0x100  # idle + SW power cap; display clocks

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error: int, counter: int) -> int:  # noqa: N802
        assert (error, counter) == (1, 0)  # uncorrected, volatile
        if handle == 1:
            raise NotSupportedError
        return 2

    def nvmlDeviceGetPcieThroughput(self, handle: int, counter: int) -> int:  # noqa: N802
        if handle == 1:
            raise NotSupportedError
        return {0: 1000, 1: 250}[counter]  # KB/s: TX, RX

    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        return "event set"

    def nvmlDeviceRegisterEvents(self, handle: int, types: int, events: str) -> None:  # noqa: N802
        assert events == "event set"
        if handle == 1:
            raise NotSupportedError
        self.registered.append((handle, types))

    def nvmlEventSetWait_v2(self, _events: str, timeout_ms: int) -> Any:  # noqa: N802
        self.waits.append(timeout_ms)
        if not self.events:
            raise TimeoutError_
        return self.events.popleft()

    def xid(self, device: int, code: int) -> None:
        self.events.append(SimpleNamespace(device=device, eventType=0x8, eventData=code))


def test_ecc_throttle_reasons_and_pcie_are_read_per_device_and_left_out_where_unsupported() -> None:
    nvml = FakeNvml()
    source = gpu_source(nvml)
    assert source is not None
    values = source()
    assert values[n.GPU_ECC_ERRORS, "0"] == 2.0
    assert (
        values[n.GPU_THROTTLE_REASONS, "0"] == 0x5 and values[n.GPU_THROTTLE_REASONS, "1"] == 0x100
    )
    assert values[n.GPU_THROTTLED, "0"] == 1.0 and values[n.GPU_THROTTLED, "1"] == 0.0
    assert values[n.GPU_PCIE_TX, "0"] == 1000 * 1024.0  # KB/s → bytes/s
    assert values[n.GPU_PCIE_RX, "0"] == 250 * 1024.0
    for name in (n.GPU_ECC_ERRORS, n.GPU_PCIE_RX, n.GPU_PCIE_TX, n.GPU_XID):
        assert (name, "1") not in values
    assert values["gpu_utilization", "1"] == 90.0  # the device's other readings stay


def test_each_xid_is_one_point_with_its_code_none_lost_none_repeated() -> None:
    nvml = FakeNvml()
    source = gpu_source(nvml)
    assert source is not None
    assert nvml.registered == [(0, 0x8)]  # XID critical errors, on the device that has events
    assert (n.GPU_XID, "0") not in source()
    nvml.xid(0, 79)  # fallen off the bus...
    nvml.xid(0, 48)  # ...and a double-bit ECC error, in the same interval
    first, second, third = source(), source(), source()
    assert first[n.GPU_XID, "0"] == 79.0
    assert second[n.GPU_XID, "0"] == 48.0
    assert (n.GPU_XID, "0") not in third
    assert set(nvml.waits) == {0}  # polled, never waited on


def test_a_driver_without_events_still_gives_the_other_readings() -> None:
    class NoEvents(FakeNvml):
        def nvmlEventSetCreate(self) -> str:  # noqa: N802
            raise NotSupportedError

    source = gpu_source(NoEvents())
    assert source is not None
    values = source()
    assert values[n.GPU_ECC_ERRORS, "0"] == 2.0
    assert not [key for key in values if key[0] == n.GPU_XID]
