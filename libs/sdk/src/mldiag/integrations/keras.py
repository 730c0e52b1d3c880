"""Record ``model.fit`` of Keras 3 on an mldiag run (any backend; tested with JAX)::

    from mldiag.integrations.keras import MldiagCallback

    model.fit(x, y, epochs=2, batch_size=32, callbacks=[MldiagCallback(batch_size=32)])

Per training batch (every ``log_every``-th): ``step_time``, the batch logs Keras reports
(``loss`` and each compiled metric, as Keras's running means over the epoch so far) and
``learning_rate``. Per epoch, at the epoch's last step: ``epoch``, the epoch's metrics as
``epoch_<name>`` and the validation metrics as Keras names them (``val_<name>``).

Steps count training batches across epochs, from the run's next step. ``step_time`` is the
wall time from ``on_train_batch_begin`` to ``on_train_batch_end``; this callback is not marked
async-safe, so Keras hands it logs read back from the device and the time includes the step's
computation. Keras has no hook around fetching a batch, so no ``data_wait_time`` is recorded
(wrap your own generator's ``next`` in :func:`mldiag.data_wait` for that).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

import keras

from mldiag.integrations._runs import LEARNING_RATE, STEP_TIME, as_float, resolve_run, scalars
from mldiag.run import Run

logger = logging.getLogger("mldiag")

__all__ = ["MldiagCallback", "model_configs"]


def model_configs(
    model: Any,
    *,
    epochs: int | None = None,
    steps_per_epoch: int | None = None,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """The configs this callback stores for ``model``: its name and parameter count, the
    optimizer's class and config, and the fit's epochs, steps per epoch and batch size.

    For a run you start yourself: ``mldiag.init(configs=model_configs(model, ...))``.
    """
    configs: dict[str, Any] = {"model": model.name}
    with contextlib.suppress(ValueError):  # a model not built yet has no weights to count
        configs["parameters"] = int(model.count_params())
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        configs["optimizer"] = type(optimizer).__name__
        configs["optimizer_config"] = optimizer.get_config()
    fit = {"epochs": epochs, "steps_per_epoch": steps_per_epoch, "batch_size": batch_size}
    configs.update({key: value for key, value in fit.items() if value is not None})
    return configs


# The hooks keep Keras's signatures (Keras passes ``batch`` and ``logs`` by keyword).
# ruff: noqa: ARG002


class MldiagCallback(keras.callbacks.Callback):  # type: ignore[misc]  # keras ships no types
    """A Keras callback that records ``fit`` on an mldiag run.

    Args:
        run: The run to record on; default: the current run, else one started at
            ``on_train_begin`` (named after the model) and finished at ``on_train_end``
            (a new run for each ``fit``).
        log_every: Record every this many training batches (the SDK batches the sending).
        batch_size: The fit's batch size, for the configs (Keras does not tell callbacks).
        configs: More configs for a run this callback starts.
        run_set: The run set of a run this callback starts.
        init_options: Keyword arguments for :func:`mldiag.init` when this callback starts
            the run (``api_url``, ``spool_dir``...).
    """

    def __init__(
        self,
        run: Run | None = None,
        *,
        log_every: int = 1,
        batch_size: int | None = None,
        configs: Mapping[str, Any] | None = None,
        run_set: str = "default",
        init_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if log_every < 1:
            raise ValueError(f"log_every must be at least 1, not {log_every}")
        self._given = run
        self._run: Run | None = None
        self.log_every = log_every
        self.batch_size = batch_size
        self._configs = dict(configs or {})
        self._run_set = run_set
        self._init_options = dict(init_options or {})
        self._owned = False
        self._step = 0
        self._first_step = 0
        self._began = 0.0

    @property
    def run(self) -> Run | None:
        """The run of the latest ``fit`` (None before one starts)."""
        return self._run

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        """Find or start the run, with the model's configs when starting it."""
        params = self.params or {}
        configs = {
            **model_configs(
                self.model,
                epochs=params.get("epochs"),
                steps_per_epoch=params.get("steps"),
                batch_size=self.batch_size,
            ),
            **self._configs,
        }
        self._run, self._owned = resolve_run(
            self._given,
            name=self.model.name,
            run_set=self._run_set,
            configs=configs,
            init_options=self._init_options,
        )
        self._step = self._first_step = self._run.step

    def on_train_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        """Start the batch's clock."""
        self._began = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        """Record the batch's time, logs and learning rate (every ``log_every`` batches)."""
        elapsed = time.perf_counter() - self._began
        step, self._step = self._step, self._step + 1
        if self._run is None or (step - self._first_step) % self.log_every:
            return
        values: dict[str, Any] = {STEP_TIME: elapsed, **dict(scalars(logs))}
        rate = self._learning_rate()
        if rate is not None:
            values[LEARNING_RATE] = rate
        self._run.log(values, step=step)

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        """Record the epoch's metrics (``epoch_<name>``) and validation metrics (``val_*``)."""
        if self._run is None:
            return
        values: dict[str, Any] = {"epoch": epoch}
        for name, value in scalars(logs):
            values[name if name.startswith("val_") else f"epoch_{name}"] = value
        self._run.log(values, step=max(self._step - 1, 0))

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        """Finish the run if this callback started it."""
        if self._run is not None and self._owned:
            self._run.finish()

    def _learning_rate(self) -> float | None:
        """The optimizer's current rate (a schedule evaluated at its iteration), or None."""
        optimizer = getattr(self.model, "optimizer", None)
        try:
            rate = optimizer.learning_rate  # type: ignore[union-attr]  # checked by the except
            return as_float(keras.ops.convert_to_numpy(rate))
        except (AttributeError, TypeError, ValueError):
            return None
