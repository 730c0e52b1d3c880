"""Record a Hugging Face ``Trainer`` on an mldiag run::

    from mldiag.integrations.transformers import MldiagCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[MldiagCallback()])

Written against ``transformers.TrainerCallback``: ``on_train_begin`` finds or starts the run
(its configs: the ``TrainingArguments`` as ``args.to_dict()`` gives them, and the model's
class); ``on_step_begin`` / ``on_step_end`` time each optimizer step (all its gradient
accumulation substeps) as ``step_time``; ``on_log`` records every number the Trainer logs
(``loss``, ``learning_rate``, ``grad_norm``, ``epoch``, ``eval_*``...) under the Trainer's own
names; ``on_train_end`` finishes a run this callback started. Steps are
``state.global_step``, the Trainer's count of optimizer steps (the first step is 1), so the
points line up with the Trainer's own logs.

On a GPU the Trainer's step returns once its work is queued; ``step_time`` is the host's
time per step, which matches the device's once the queue is full (each logging step reads
the loss back and waits for it).

Importing this module needs ``transformers`` (its callback classes import without torch);
without it the callback is a plain class with the same methods. Tested here with
transformers' own ``CallbackHandler`` calling the hooks the way ``Trainer`` does, not with a
real ``Trainer`` (torch does not fit CI): docs/integrations.md has the manual check.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from typing import Any

from mldiag.integrations._runs import STEP_TIME, resolve_run, scalars
from mldiag.run import Run

__all__ = ["MldiagCallback"]


def _base() -> type:
    try:
        module = importlib.import_module("transformers")
    except ImportError:
        return object
    base: type = module.TrainerCallback
    return base


# The hooks keep TrainerCallback's signatures (the Trainer passes more by keyword).
# ruff: noqa: ARG002


class MldiagCallback(_base()):  # type: ignore[misc]  # TrainerCallback, or object without it
    """A ``transformers.TrainerCallback`` that records training on an mldiag run.

    Args:
        run: The run to record on; default: the current run, else one started at
            ``on_train_begin`` (named after ``args.run_name``, else the model's class) and
            finished at ``on_train_end`` (a new run for each training).
        configs: More configs for a run this callback starts.
        run_set: The run set of a run this callback starts.
        init_options: Keyword arguments for :func:`mldiag.init` when this starts the run.
    """

    def __init__(
        self,
        run: Run | None = None,
        *,
        configs: Mapping[str, Any] | None = None,
        run_set: str = "default",
        init_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._given = run
        self._run: Run | None = None
        self._configs = dict(configs or {})
        self._run_set = run_set
        self._init_options = dict(init_options or {})
        self._owned = False
        self._began: float | None = None

    @property
    def run(self) -> Run | None:
        """The run of the latest training (None before one starts)."""
        return self._run

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Find or start the run, with the training arguments as its configs."""
        model = kwargs.get("model")
        configs: dict[str, Any] = dict(args.to_dict()) if hasattr(args, "to_dict") else {}
        if model is not None:
            configs["model"] = type(model).__name__
        configs.update(self._configs)
        name = getattr(args, "run_name", None) or configs.get("model", "")
        self._run, self._owned = resolve_run(
            self._given,
            name=str(name),
            run_set=self._run_set,
            configs=configs,
            init_options=self._init_options,
        )

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the step's clock."""
        self._began = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Record the step's time at ``state.global_step``."""
        if self._run is None or self._began is None:
            return
        elapsed, self._began = time.perf_counter() - self._began, None
        self._run.log({STEP_TIME: elapsed}, step=state.global_step)

    def on_log(
        self,
        args: Any,
        state: Any,
        control: Any,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Record every number of the Trainer's logs at ``state.global_step``."""
        values = dict(scalars(logs))
        if self._run is not None and values:
            self._run.log(values, step=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Finish the run if this callback started it."""
        if self._run is not None and self._owned:
            self._run.finish()
