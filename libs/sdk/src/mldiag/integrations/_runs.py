"""What every integration shares: which run to record on, and which values are numbers."""

from __future__ import annotations

import logging
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

from mldiag.run import Run, current_run, init

logger = logging.getLogger("mldiag")

STEP_TIME = "step_time"
"""Seconds of wall time one training step took (as each integration measures it)."""
LEARNING_RATE = "learning_rate"
"""The optimizer's learning rate at the step."""
GRAD_NORM = "grad_norm"
"""The global L2 norm of the step's gradients."""


def resolve_run(
    run: Run | None,
    *,
    name: str,
    run_set: str,
    configs: Mapping[str, Any],
    init_options: Mapping[str, Any],
) -> tuple[Run, bool]:
    """The run to record on and whether the caller started it (and so must finish it).

    ``run`` when given, else the current run, else a new one from :func:`mldiag.init` with
    ``configs`` as its user configs. A run that already exists keeps its configs: the
    registry takes configs when a run is created, so pass them to ``init`` yourself then.
    """
    if run is None:
        run = current_run()
    if run is not None:
        return run, False
    started = init(name=name, run_set=run_set, configs=configs, **dict(init_options))
    return started, True


def scalars(values: Mapping[str, Any] | None, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(prefix + name, value)`` for each entry that is one number (Python, NumPy, JAX or a
    zero-dimensional tensor); lists, strings and larger arrays are left out. Arrays are
    kept as they are, so that reading them waits on the SDK's thread, not the caller's."""
    for key, value in (values or {}).items():
        if is_scalar(value):
            yield f"{prefix}{key}", value


def is_scalar(value: Any) -> bool:
    """Whether ``value`` is a single number that :meth:`mldiag.Run.log` can record."""
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Number):
        return True
    shape = getattr(value, "shape", None)
    return shape is not None and tuple(shape) == () and hasattr(value, "dtype")


def as_float(value: Any) -> float | None:
    """``value`` as a float, or None when it is not one number (a torch tensor is read
    with ``.item()``, which waits for its device)."""
    item = getattr(value, "item", None)
    try:
        return float(item() if callable(item) else value)
    except (TypeError, ValueError, RuntimeError):
        return None
