"""Record a Flax or plain JAX + Optax training step on an mldiag run::

    from mldiag.integrations import flax as mldiag_flax

    train_step = mldiag_flax.track(train_step, sync_every=10)
    for batch in batches:
        loss = train_step(model, optimizer, batch)

The wrapped step is called as before and returns what it returned. From its result the
wrapper takes the metrics: a mapping returned (or the last mapping in a returned tuple, as in
``return state, {"loss": loss, "grads": grads}``), else a returned scalar, taken as the loss;
``metrics=`` picks them from any other shape. It records, per step (every ``log_every``-th):

- every scalar of the metrics (``loss``, ``accuracy``, ``grad_norm``...);
- ``grad_norm``: ``optax.tree.norm`` of ``metrics["grads"]`` when the step returns its
  gradients and no ``grad_norm`` of its own (computed in one jitted call);
- ``learning_rate``: from ``learning_rate=`` (a number, or an Optax schedule called with the
  step), else from an ``optax.inject_hyperparams`` state found in the step's arguments or
  result (an ``nnx.Optimizer``, a ``TrainState``, a bare ``opt_state``);
- ``step_time``: see below. JAX compilations go to ``compile_time`` (:meth:`Run.watch_jax`).

Values stay device arrays in the SDK's buffer and are read on its thread: the training loop
does not wait for them.
"""

from __future__ import annotations

import functools
import logging
import numbers
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar

import jax
import optax

from mldiag.integrations._runs import (
    GRAD_NORM,
    LEARNING_RATE,
    STEP_TIME,
    is_scalar,
    resolve_run,
    scalars,
)
from mldiag.run import Run

__all__ = ["TrackedStep", "injected_learning_rate", "track"]

logger = logging.getLogger("mldiag")

P = ParamSpec("P")
R = TypeVar("R")

_INJECTED = (optax.InjectHyperparamsState, optax.InjectStatefulHyperparamsState)

# One compiled reduction instead of a dispatch per gradient leaf. optax.tree.norm replaced
# optax.global_norm (deprecated, warns on every trace) in the optax releases that have it.
_tree = getattr(optax, "tree", None)
_global_norm: Callable[[Any], jax.Array] = jax.jit(
    getattr(_tree, "norm", None) or optax.global_norm
)


class TrackedStep(Generic[P, R]):
    """A training step that records itself on a run; call it as the step it wraps.

    Timing: JAX dispatches work asynchronously, so a step's call returns long before the
    device is done, and timing calls alone measures only dispatch. Blocking on every step's
    result would be honest but would stall the host each step (no next step queued while the
    device works). So the wrapper blocks on the result (``jax.block_until_ready``) only on the
    first step and then every ``sync_every`` steps, and records at each of those steps
    ``step_time`` = wall time since the previous block / steps since: the mean time per
    step over the window, the device's throughput as the loop sees it. The first step's
    time includes its compilation. ``sync_every=1`` gives each step its own exact time.
    """

    def __init__(
        self,
        step: Callable[P, R],
        run: Run | None = None,
        *,
        log_every: int = 1,
        sync_every: int = 10,
        metrics: Callable[[R], Mapping[str, Any]] | None = None,
        learning_rate: float | Callable[[int], Any] | None = None,
        grads_key: str = "grads",
        name: str = "",
        configs: Mapping[str, Any] | None = None,
        run_set: str = "default",
        init_options: Mapping[str, Any] | None = None,
    ) -> None:
        if log_every < 1 or sync_every < 1:
            raise ValueError(
                f"log_every and sync_every must be at least 1 ({log_every}, {sync_every})"
            )
        self._step_fn = step
        self._run = run
        self.log_every = log_every
        self.sync_every = sync_every
        self._metrics = metrics or _default_metrics
        self._learning_rate = learning_rate
        self._grads_key = grads_key
        self._name = name or getattr(step, "__name__", "train_step")
        self._configs = dict(configs or {})
        self._run_set = run_set
        self._init_options = dict(init_options or {})
        self._calls = 0
        self._first_step = 0
        self._warned = False
        self._search_rate = True
        self._synced_at = 0.0
        self._synced_calls = 0
        functools.update_wrapper(self, step)

    @property
    def run(self) -> Run | None:
        """The run recorded on (None before the first call)."""
        return self._run

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the step, then record what it returned.

        Raises what the step raises (and, when it blocks, what the device computation
        raised); a failure to pick the metrics is logged once and the step's values skipped.
        """
        run = self._run or self._find_run()
        if self._calls == 0:
            self._first_step = run.step
            run.watch_jax()
            self._synced_at = time.perf_counter()
        result = self._step_fn(*args, **kwargs)
        calls, self._calls = self._calls, self._calls + 1
        step = self._first_step + calls
        values: dict[str, Any] = {}
        if calls == 0 or self._calls - self._synced_calls >= self.sync_every:
            jax.block_until_ready(result)  # type: ignore[no-untyped-call]  # untyped in jax
            now = time.perf_counter()
            values[STEP_TIME] = (now - self._synced_at) / (self._calls - self._synced_calls)
            self._synced_at, self._synced_calls = now, self._calls
        if calls % self.log_every == 0:
            try:
                values.update(self._values(result, args, kwargs, step))
            except Exception as error:  # noqa: BLE001  # a metrics picker or schedule of the user's
                self._warn(error)
        if values:
            run.log(values, step=step)
        return result

    def _warn(self, error: Exception) -> None:
        if not self._warned:  # once: the same mistake would repeat at every step
            self._warned = True
            logger.warning("mldiag.flax.metrics_failed step_fn=%s error=%r", self._name, error)

    def _find_run(self) -> Run:
        """The current run, or one started now (at the first call)."""
        self._run, _ = resolve_run(
            None,
            name=self._name,
            run_set=self._run_set,
            configs=self._configs,
            init_options=self._init_options,
        )
        return self._run

    def _values(
        self, result: R, args: tuple[Any, ...], kwargs: Mapping[str, Any], step: int
    ) -> dict[str, Any]:
        metrics = self._metrics(result)
        values = dict(scalars(metrics))
        grads = metrics.get(self._grads_key)
        if GRAD_NORM not in values and grads is not None:
            values[GRAD_NORM] = _global_norm(grads)
        rate = self._rate(step, (result, args, kwargs))
        if rate is not None:
            values[LEARNING_RATE] = rate
        return values

    def _rate(self, step: int, tree: Any) -> Any:
        if callable(self._learning_rate):
            return self._learning_rate(step - self._first_step)
        if self._learning_rate is not None:
            return self._learning_rate
        if not self._search_rate:
            return None
        # Walking the arguments' pytrees costs host time on every recorded step; a step
        # without an injected state the first time has none later either.
        rate = injected_learning_rate(tree)
        self._search_rate = rate is not None
        return rate


def track(
    step: Callable[P, R],
    run: Run | None = None,
    *,
    log_every: int = 1,
    sync_every: int = 10,
    metrics: Callable[[R], Mapping[str, Any]] | None = None,
    learning_rate: float | Callable[[int], Any] | None = None,
    grads_key: str = "grads",
    name: str = "",
    configs: Mapping[str, Any] | None = None,
    run_set: str = "default",
    init_options: Mapping[str, Any] | None = None,
) -> TrackedStep[P, R]:
    """Wrap a training step so that each call is recorded on a run.

    Args:
        step: The step function (jitted or not); its calls and result are unchanged.
        run: The run to record on; default: the current run, else one started at the first
            call (named after ``step``; the exit hooks of :func:`mldiag.init` end it).
        log_every: Record metrics every this many calls.
        sync_every: Block on the result every this many calls to time them (see
            :class:`TrackedStep`).
        metrics: Picks the metrics mapping from the step's result (default: see the module).
        learning_rate: A number, or a schedule called with the step number (0 first);
            default: read from an ``optax.inject_hyperparams`` state.
        grads_key: The metrics key holding gradients, for ``grad_norm``.
        name: Name of a run this starts. configs: its configs. run_set: its run set.
        init_options: Other keywords for :func:`mldiag.init` when this starts the run.
    """
    return TrackedStep(
        step,
        run,
        log_every=log_every,
        sync_every=sync_every,
        metrics=metrics,
        learning_rate=learning_rate,
        grads_key=grads_key,
        name=name,
        configs=configs,
        run_set=run_set,
        init_options=init_options,
    )


def injected_learning_rate(tree: Any) -> Any:
    """The ``learning_rate`` hyperparameter of the first ``optax.inject_hyperparams`` state
    in ``tree`` (any pytree, Flax NNX objects included), or None."""
    found = jax.tree_util.tree_leaves(tree, is_leaf=lambda node: isinstance(node, _INJECTED))
    for node in found:
        if isinstance(node, _INJECTED) and "learning_rate" in node.hyperparams:
            return _array(node.hyperparams["learning_rate"])
    return None


def _array(value: Any) -> Any:
    """The array inside a Flax NNX variable (whose content an update replaces in place:
    the variable itself would be read later, after more updates), else ``value``."""
    if isinstance(value, jax.Array | numbers.Number):
        return value
    get_value = getattr(value, "get_value", None)  # Flax >= 0.12
    return get_value() if callable(get_value) else getattr(value, "value", value)


def _default_metrics(result: Any) -> Mapping[str, Any]:
    if isinstance(result, Mapping):
        return result
    if isinstance(result, tuple | list):
        for item in reversed(result):
            if isinstance(item, Mapping):
                return item
    if is_scalar(result):
        return {"loss": result}
    return {}
