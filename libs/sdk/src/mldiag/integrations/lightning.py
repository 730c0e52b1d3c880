"""Record a PyTorch Lightning ``Trainer.fit`` on an mldiag run::

    from mldiag.integrations.lightning import MldiagCallback

    trainer = lightning.pytorch.Trainer(max_epochs=3, callbacks=[MldiagCallback()])

Written against ``lightning.pytorch.Callback`` (or ``pytorch_lightning.Callback``):

- ``on_train_start`` finds or starts the run (its configs: the module's ``hparams``, the
  module's class, ``max_epochs``, ``accumulate_grad_batches`` and the optimizers' classes);
- ``on_train_batch_start`` / ``on_train_batch_end`` time the batches; once an optimizer step
  is done (``trainer.global_step`` moved) it records ``step_time`` (the batches' time since
  the last step, so all of a gradient accumulation), ``loss`` (``outputs["loss"]``, which
  Lightning divides by ``accumulate_grad_batches``) and ``learning_rate`` (the first
  optimizer's ``param_groups``; ``learning_rate_<i>`` for more groups), every ``log_every``
  steps;
- ``on_train_epoch_end`` records ``epoch`` and the numbers of ``trainer.callback_metrics``
  (what ``self.log`` gave) that are not validation metrics; ``on_validation_end`` records
  those whose name starts with ``val`` (skipped during the sanity check);
- ``on_train_end`` finishes a run this callback started.

Steps are ``trainer.global_step``, Lightning's count of optimizer steps (the first is 1).
Reading ``loss`` and ``callback_metrics`` tensors (``.item()``) waits for the GPU on the
steps that record; ``log_every`` keeps that rare.

Lightning needs torch, which does not fit CI: there this module imports with ``object`` as
the base class, and its tests drive the hooks with stand-ins shaped like Lightning's
objects. docs/integrations.md has the manual check with the real ``Trainer``.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from typing import Any

from mldiag.integrations._runs import LEARNING_RATE, STEP_TIME, as_float, resolve_run
from mldiag.run import Run

__all__ = ["MldiagCallback"]


def _base() -> type:
    for module_name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        base: type = module.Callback
        return base
    return object


# The hooks keep Lightning's signatures.
# ruff: noqa: ARG002


class MldiagCallback(_base()):  # type: ignore[misc]  # Lightning's Callback, or object
    """A Lightning callback that records ``fit`` on an mldiag run.

    Args:
        run: The run to record on; default: the current run, else one started at
            ``on_train_start`` (named after the module's class) and finished at
            ``on_train_end`` (a new run for each training).
        log_every: Record every this many optimizer steps.
        configs: More configs for a run this callback starts.
        run_set: The run set of a run this callback starts.
        init_options: Keyword arguments for :func:`mldiag.init` when this starts the run.
    """

    def __init__(
        self,
        run: Run | None = None,
        *,
        log_every: int = 1,
        configs: Mapping[str, Any] | None = None,
        run_set: str = "default",
        init_options: Mapping[str, Any] | None = None,
    ) -> None:
        if log_every < 1:
            raise ValueError(f"log_every must be at least 1, not {log_every}")
        self._given = run
        self._run: Run | None = None
        self.log_every = log_every
        self._configs = dict(configs or {})
        self._run_set = run_set
        self._init_options = dict(init_options or {})
        self._owned = False
        self._began = 0.0
        self._batches_time = 0.0
        self._last_step = 0
        self._steps_recorded = 0

    @property
    def run(self) -> Run | None:
        """The run of the latest training (None before one starts)."""
        return self._run

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Find or start the run, with the module's hyperparameters as its configs."""
        configs: dict[str, Any] = dict(getattr(pl_module, "hparams", None) or {})
        configs["module"] = type(pl_module).__name__
        configs["max_epochs"] = trainer.max_epochs
        configs["accumulate_grad_batches"] = getattr(trainer, "accumulate_grad_batches", 1)
        configs["optimizers"] = [type(optimizer).__name__ for optimizer in trainer.optimizers]
        configs.update(self._configs)
        self._run, self._owned = resolve_run(
            self._given,
            name=configs["module"],
            run_set=self._run_set,
            configs=configs,
            init_options=self._init_options,
        )
        self._last_step = trainer.global_step

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """Start the batch's clock."""
        self._began = time.perf_counter()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Once an optimizer step is done, record its time, loss and learning rate."""
        self._batches_time += time.perf_counter() - self._began
        step = trainer.global_step
        if self._run is None or step == self._last_step:
            return  # still accumulating gradients
        elapsed, self._batches_time, self._last_step = self._batches_time, 0.0, step
        recorded, self._steps_recorded = self._steps_recorded, self._steps_recorded + 1
        if recorded % self.log_every:
            return
        values: dict[str, Any] = {STEP_TIME: elapsed}
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is not None and (number := as_float(loss)) is not None:
            values["loss"] = number
        values.update(_learning_rates(trainer))
        self._run.log(values, step=step)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Record ``epoch`` and the epoch's training metrics from ``callback_metrics``."""
        if self._run is None:
            return
        values: dict[str, Any] = {"epoch": trainer.current_epoch}
        values.update(_metrics(trainer.callback_metrics, validation=False))
        self._run.log(values, step=trainer.global_step)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """Record the validation metrics (``val*``) from ``callback_metrics``."""
        if self._run is None or getattr(trainer, "sanity_checking", False):
            return
        values = _metrics(trainer.callback_metrics, validation=True)
        if values:
            self._run.log(values, step=trainer.global_step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Finish the run if this callback started it."""
        if self._run is not None and self._owned:
            self._run.finish()


def _learning_rates(trainer: Any) -> dict[str, float]:
    """The first optimizer's learning rate per parameter group."""
    optimizers = list(getattr(trainer, "optimizers", None) or [])
    if not optimizers:
        return {}
    groups = list(getattr(optimizers[0], "param_groups", None) or [])
    rates = [as_float(group.get("lr")) for group in groups]
    if len(rates) == 1:
        return {LEARNING_RATE: rates[0]} if rates[0] is not None else {}
    return {f"{LEARNING_RATE}_{i}": rate for i, rate in enumerate(rates) if rate is not None}


def _metrics(metrics: Mapping[str, Any], *, validation: bool) -> dict[str, float]:
    """The numbers of ``callback_metrics``: validation ones (``val*``) or the others."""
    values: dict[str, float] = {}
    for name, value in metrics.items():
        if name.startswith("val") == validation and (number := as_float(value)) is not None:
            values[name] = number
    return values
