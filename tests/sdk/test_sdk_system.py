"""System metric sources: psutil for real; NVML and libtpu through stand-ins of their modules
(this machine has neither a GPU nor a TPU), shaped like the real APIs."""

import threading
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from mldiag.system import Sample, SystemSampler, gpu_source, host_source, tpu_source


class FakeNvml:
    """pynvml's calls for two GPUs; device 1 supports neither power nor tensor activity."""

    def __init__(self) -> None:
        self.initialised = False

    def nvmlInit(self) -> None:  # noqa: N802  # pynvml's names
        self.initialised = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=90 + handle, memory=40)

    def nvmlDeviceGetMemoryInfo(self, _handle: int) -> Any:  # noqa: N802
        return SimpleNamespace(used=20 * 2**30, total=80 * 2**30)

    def nvmlDeviceGetFieldValues(self, handle: int, fields: list[int]) -> list[Any]:  # noqa: N802
        assert fields == [156]  # the tensor-core activity field
        if handle == 1:
            raise RuntimeError("NVMLError_NotSupported")
        return [SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(dVal=55.5))]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:  # noqa: N802
        if handle == 1:
            raise RuntimeError("NVMLError_NotSupported")
        return 312_000  # milliwatts

    def nvmlDeviceGetTemperature(self, _handle: int, sensor: int) -> int:  # noqa: N802
        assert sensor == 0  # NVML_TEMPERATURE_GPU
        return 71

    def nvmlDeviceGetClockInfo(self, _handle: int, clock: int) -> int:  # noqa: N802
        return {1: 1980, 2: 2619}[clock]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:  # noqa: N802
        return 0x20 if handle == 1 else 0x1  # device 1: SW thermal slowdown; 0: idle only


def test_every_gpu_is_sampled_per_device_and_unsupported_readings_are_left_out() -> None:
    nvml = FakeNvml()
    sample = gpu_source(nvml)
    assert sample is not None and nvml.initialised
    values = sample()
    assert values["gpu_utilization", "0"] == 90 and values["gpu_utilization", "1"] == 91
    assert values["vram_utilization", "0"] == 25.0
    assert values["vram_used_bytes", "1"] == 20 * 2**30
    assert values["gpu_tensorcore_utilization", "0"] == 55.5
    assert values["gpu_power_watts", "0"] == 312.0
    assert ("gpu_power_watts", "1") not in values
    assert ("gpu_tensorcore_utilization", "1") not in values
    assert values["gpu_temperature_celsius", "1"] == 71
    assert (values["gpu_sm_clock_mhz", "0"], values["gpu_memory_clock_mhz", "0"]) == (1980, 2619)
    assert (values["gpu_throttled", "0"], values["gpu_throttled", "1"]) == (0.0, 1.0)


def test_no_nvml_or_no_gpu_means_no_source() -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:  # noqa: N802
            raise RuntimeError("NVMLError_LibraryNotFound")

    class NoGpu(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:  # noqa: N802
            return 0

    assert gpu_source(NoDriver()) is None
    assert gpu_source(NoGpu()) is None


class FakeTpuMonitoring:
    """libtpu.sdk.tpumonitoring for four chips: metrics whose ``data()`` are strings."""

    METRICS: ClassVar[dict[str, list[str]]] = {
        "duty_cycle_pct": ["99.0", "98.5", "97.0", "12.0"],
        "tensorcore_util": ["60", "61", "59", "5"],
        "hbm_capacity_usage": ["8589934592"] * 4,
        "hbm_capacity_total": ["17179869184"] * 3 + ["0"],
    }

    def get_metric(self, name: str) -> Any:
        return SimpleNamespace(data=lambda: self.METRICS[name])


def test_every_tpu_chip_is_sampled() -> None:
    sample = tpu_source(FakeTpuMonitoring())
    assert sample is not None
    values = sample()
    assert [values["tpu_duty_cycle", str(i)] for i in range(4)] == [99.0, 98.5, 97.0, 12.0]
    assert values["tpu_tensorcore_utilization", "3"] == 5.0
    assert values["hbm_utilization", "0"] == 50.0
    assert values["hbm_utilization", "3"] == 0.0  # a total of 0 is no division
    assert values["hbm_used_bytes", "2"] == 8589934592.0


def test_a_process_without_tpus_gets_no_tpu_source() -> None:
    class Detached:
        def get_metric(self, name: str) -> Any:
            raise RuntimeError(f"{name}: no TPU chips found")

    assert tpu_source(Detached()) is None
    assert tpu_source() is None  # this machine has no libtpu at all


def test_the_host_is_sampled_with_psutil() -> None:
    sample = host_source()
    assert sample is not None
    values = sample()
    assert 0 <= values["host_memory_utilization", ""] <= 100
    assert values["process_memory_rss_bytes", ""] > 0


def test_a_failing_source_is_dropped_and_the_others_go_on() -> None:
    samples: list[Sample] = []
    done = threading.Event()

    def broken() -> Sample:
        raise RuntimeError("sensor gone")

    def steady() -> Sample:
        if len(samples) >= 3:
            done.set()
        return {("steady", ""): 1.0}

    def cannot_start() -> None:
        raise RuntimeError("library crashed while loading")

    sampler = SystemSampler(
        samples.append, 0.01, sources=(lambda: broken, lambda: steady, cannot_start)
    )
    sampler.start()
    assert done.wait(5)
    sampler.stop()
    assert all(sample == {("steady", ""): 1.0} for sample in samples)


@pytest.mark.parametrize(("value", "expected"), [("", 10.0), ("0", None), ("2.5", 2.5)])
def test_system_metrics_interval_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: float | None
) -> None:
    from mldiag.run import _system_interval  # noqa: PLC0415  # the private rule under test

    monkeypatch.setenv("MLDIAG_SYSTEM_METRICS_INTERVAL", value)
    assert _system_interval(True, None) == expected
    assert _system_interval(False, None) is None
    assert _system_interval(True, 3.0) == 3.0
