"""TPU chips: duty cycle, tensor-core utilisation and HBM (libtpu's monitoring SDK)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mldiag.system.base import Sample, Source


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
