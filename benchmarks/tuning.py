"""Tuning jobs: how good the search of a tuning job is, next to plain Optuna and random search.

Run: ``.venv/bin/python benchmarks/tuning.py [--part quality] [--seeds S] [--trials N]
[--mlp-seeds S] [--mlp-trials N]`` (every part by default).

Part ``quality`` (no services; a few minutes on 2 CPUs): the median over seeds (with the
quartiles) of the best value found after N trials, each search driven as the controller
drives it (ask → evaluate → tell; "4 at a time" asks four before telling any, as a job with
``parallelTrialCount: 4`` does), for

- mldiag's default algorithm (``ALGORITHM_UNSPECIFIED``: TPE, multivariate, constant liar,
  5 random trials first), also 4 at a time, and with univariate TPE (the alternative it was
  chosen over);
- plain Optuna with its default ``TPESampler`` and the same budget;
- mldiag's ``RANDOM_SEARCH``;

on Branin (2-D, minimum 0.397887), Hartmann-3 (minimum -3.86278) and a small JAX model (a
2-layer MLP on a synthetic 3-class set, 300 full-batch Adam steps; learning rate (log),
hidden units (integer), weight decay (log); the objective is the validation loss). Then,
for several metrics, the hypervolume (larger is better) of the Pareto set after N trials
on ZDT1 (3-D) for mldiag's default (multi-objective TPE), Optuna's NSGA-II and random search.
"""

import argparse
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from _support import emit

from mldiag_schemas.tuning import StudySpec
from mldiag_training.tuning import search as search_module
from mldiag_training.tuning.search import Search

BRANIN_MINIMUM = 0.397887
HARTMANN3_MINIMUM = -3.86278

Params = dict[str, float | str]
Objective = Callable[[Params], float]


@dataclass(frozen=True)
class Dimension:
    """One parameter of a benchmark problem, as both a Vertex spec and an Optuna suggest."""

    name: str
    low: float
    high: float
    log: bool = False
    integer: bool = False

    def spec(self) -> dict[str, Any]:
        """The Vertex ParameterSpec."""
        body: dict[str, Any] = {"parameterId": self.name}
        if self.integer:
            body["integerValueSpec"] = {"minValue": int(self.low), "maxValue": int(self.high)}
        else:
            body["doubleValueSpec"] = {"minValue": self.low, "maxValue": self.high}
        if self.log:
            body["scaleType"] = "UNIT_LOG_SCALE"
        return body

    def suggest(self, trial: optuna.Trial) -> float:
        """The value plain Optuna suggests."""
        if self.integer:
            return float(trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log))
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)


@dataclass(frozen=True)
class Problem:
    """A minimisation problem over some dimensions."""

    name: str
    dimensions: Sequence[Dimension]
    objective: Callable[[Params], float | tuple[float, ...]]
    reference: str
    objectives: int = 1


# --- Problems -----------------------------------------------------------------------------


def branin(p: Params) -> float:
    """Branin-Hoo on [-5, 10] x [0, 15]; three global minima of 0.397887."""
    x1, x2 = float(p["x1"]), float(p["x2"])
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


_H3_A = np.array([[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]])
_H3_P = 1e-4 * np.array(
    [[3689, 1170, 2673], [4699, 4387, 7470], [1091, 8732, 5547], [381, 5743, 8828]]
)
_H3_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann3(p: Params) -> float:
    """Hartmann-3 on [0, 1]^3; global minimum -3.86278."""
    x = np.array([float(p["x1"]), float(p["x2"]), float(p["x3"])])
    return float(-np.sum(_H3_ALPHA * np.exp(-np.sum(_H3_A * (x - _H3_P) ** 2, axis=1))))


def zdt1(p: Params) -> tuple[float, float]:
    """ZDT1 in 3 dimensions (both minimised); the front is f2 = 1 - sqrt(f1) at g = 1."""
    x = [float(p[f"x{i}"]) for i in range(1, 4)]
    g = 1 + 9 * sum(x[1:]) / (len(x) - 1)
    return x[0], g * (1 - math.sqrt(x[0] / g))


def hypervolume(points: Sequence[tuple[float, float]], reference: tuple[float, float]) -> float:
    """The area dominated by ``points`` (both minimised) up to ``reference``."""
    inside = sorted(p for p in points if p[0] < reference[0] and p[1] < reference[1])
    area, best_f2 = 0.0, reference[1]
    for f1, f2 in inside:
        if f2 < best_f2:
            area += (reference[0] - f1) * (best_f2 - f2)
            best_f2 = f2
    return area


class Mlp:
    """A 2-layer MLP on a synthetic 3-class set, trained in one jitted call per trial.

    The hidden layer has 128 units and the trial's ``units`` are a mask over them, so every
    trial has the same shapes and JAX compiles once."""

    WIDTH = 128
    STEPS = 300

    def __init__(self) -> None:
        import jax  # noqa: PLC0415  # JAX only when this part runs
        import jax.numpy as jnp  # noqa: PLC0415

        self._jax, self._jnp = jax, jnp
        key = jax.random.PRNGKey(0)
        k_x, k_w1, k_w2, k_noise = jax.random.split(key, 4)
        x = jax.random.normal(k_x, (1200, 20))
        teacher = jnp.tanh(x @ jax.random.normal(k_w1, (20, 16))) @ jax.random.normal(k_w2, (16, 3))
        y = jnp.argmax(teacher + 0.7 * jax.random.normal(k_noise, teacher.shape), axis=1)
        self._train, self._val = (x[:800], y[:800]), (x[800:], y[800:])
        self._run = jax.jit(self._fit)
        self.seed = 0

    def _loss(self, params: Any, x: Any, y: Any, mask: Any) -> Any:
        jnp = self._jnp
        w1, b1, w2, b2 = params
        h = jnp.maximum(x @ w1 + b1, 0.0) * mask
        logits = h @ w2 + b2
        logp = logits - self._jax.nn.logsumexp(logits, axis=1, keepdims=True)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def _fit(self, lr: Any, wd: Any, units: Any, key: Any) -> Any:
        jax, jnp = self._jax, self._jnp
        mask = (jnp.arange(self.WIDTH) < units).astype(jnp.float32)
        k1, k2 = jax.random.split(key)
        params = (
            jax.random.normal(k1, (20, self.WIDTH)) * jnp.sqrt(2 / 20),
            jnp.zeros(self.WIDTH),
            jax.random.normal(k2, (self.WIDTH, 3)) * jnp.sqrt(1 / self.WIDTH),
            jnp.zeros(3),
        )
        x, y = self._train

        def objective(params: Any) -> Any:
            decay = sum(jnp.sum(w**2) for w in (params[0], params[2]))
            return self._loss(params, x, y, mask) + wd * decay

        grad = jax.grad(objective)
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)

        def step(i: Any, state: Any) -> Any:
            params, m, v = state
            g = grad(params)
            m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
            v = jax.tree_util.tree_map(lambda a, b: 0.999 * a + 0.001 * b**2, v, g)
            t = i + 1
            scale = lr * jnp.sqrt(1 - 0.999**t) / (1 - 0.9**t)
            params = jax.tree_util.tree_map(
                lambda p, a, b: p - scale * a / (jnp.sqrt(b) + 1e-8), params, m, v
            )
            return params, m, v

        params, _, _ = jax.lax.fori_loop(0, self.STEPS, step, (params, zeros, zeros))
        return self._loss(params, *self._val, mask)

    def __call__(self, p: Params) -> float:
        """The validation loss after training with ``p``."""
        key = self._jax.random.PRNGKey(self.seed)
        value = self._run(float(p["lr"]), float(p["weight_decay"]), float(p["units"]), key)
        return float(value)


# --- Searches -----------------------------------------------------------------------------


def _spec(problem: Problem, algorithm: str) -> StudySpec:
    metrics = [{"metricId": f"f{i}", "goal": "MINIMIZE"} for i in range(1, problem.objectives + 1)]
    return StudySpec.model_validate(
        {
            "metrics": metrics,
            "parameters": [d.spec() for d in problem.dimensions],
            "algorithm": algorithm,
        }
    )


def _values(problem: Problem, params: Params) -> tuple[float, ...] | None:
    value = problem.objective(params)
    values = value if isinstance(value, tuple) else (value,)
    return None if any(math.isnan(v) for v in values) else values


def _mldiag(problem: Problem, seed: int, trials: int, algorithm: str, parallel: int = 1) -> list:
    """Drive a Search as the controller does; the values of every feasible trial."""
    search = Search(_spec(problem, algorithm), seed)
    found = []
    asked = 0
    while asked < trials:
        batch = []
        for _ in range(min(parallel, trials - asked)):
            suggestion = search.ask()
            if suggestion is None:
                break
            batch.append(suggestion)
            asked += 1
        for suggestion in batch:
            values = _values(problem, suggestion.parameters)
            search.tell(suggestion.number, values)
            if values is not None:
                found.append(values)
    return found


def _optuna(problem: Problem, trials: int, sampler: optuna.samplers.BaseSampler) -> list:
    directions = ["minimize"] * problem.objectives
    study = optuna.create_study(directions=directions, sampler=sampler)
    found = []

    def objective(trial: optuna.Trial) -> float | tuple[float, ...]:
        params: Params = {d.name: d.suggest(trial) for d in problem.dimensions}
        values = _values(problem, params)
        if values is None:
            return math.nan
        found.append(values)
        return values if problem.objectives > 1 else values[0]

    study.optimize(objective, n_trials=trials)
    return found


def _univariate(problem: Problem, seed: int, trials: int) -> list:
    search_module.TPE_MULTIVARIATE = False
    try:
        return _mldiag(problem, seed, trials, "ALGORITHM_UNSPECIFIED")
    finally:
        search_module.TPE_MULTIVARIATE = True


SINGLE: dict[str, Callable[[Problem, int, int], list]] = {
    "mldiag default": lambda p, s, n: _mldiag(p, s, n, "ALGORITHM_UNSPECIFIED"),
    "  4 at a time": lambda p, s, n: _mldiag(p, s, n, "ALGORITHM_UNSPECIFIED", parallel=4),
    "  univariate TPE": _univariate,
    "Optuna TPE default": lambda p, s, n: _optuna(p, n, optuna.samplers.TPESampler(seed=s)),
    "mldiag random": lambda p, s, n: _mldiag(p, s, n, "RANDOM_SEARCH"),
}
"""The single-objective searches compared, by column name."""

MULTI: dict[str, Callable[[Problem, int, int], list]] = {
    "mldiag default (MOTPE)": lambda p, s, n: _mldiag(p, s, n, "ALGORITHM_UNSPECIFIED"),
    "Optuna NSGA-II": lambda p, s, n: _optuna(p, n, optuna.samplers.NSGAIISampler(seed=s)),
    "mldiag random": lambda p, s, n: _mldiag(p, s, n, "RANDOM_SEARCH"),
}
"""The multi-objective searches compared, by column name."""


def _summary(samples: Sequence[float]) -> str:
    q1, median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return f"{median:9.4f} [{q1:.3f}, {q3:.3f}]"


def _table(
    problems: Sequence[tuple[Problem, int, int]],
    searches: dict[str, Callable[[Problem, int, int], list]],
    score: Callable[[list], float],
    what: str,
) -> None:
    emit(f"{what}; median [quartiles] over seeds")
    emit(f"  {'search':<24}" + "".join(f"{p.name:>30}" for p, _, _ in problems))
    for name, run in searches.items():
        cells = []
        started = time.monotonic()
        for problem, seeds, trials in problems:
            if isinstance(problem.objective, Mlp):
                problem.objective.seed = 0
            scores = []
            for seed in range(seeds):
                if isinstance(problem.objective, Mlp):
                    problem.objective.seed = seed
                scores.append(score(run(problem, seed, trials)))
            cells.append(_summary(scores))
        seconds = time.monotonic() - started
        emit(f"  {name:<24}" + "".join(f"{c:>30}" for c in cells) + f"   ({seconds:.0f} s)")
    emit("  reference: " + "; ".join(f"{p.name}: {p.reference}" for p, _, _ in problems))


def search_quality(
    seeds: int = 15, trials: int = 30, mlp_seeds: int = 3, mlp_trials: int = 20
) -> None:
    """Part ``quality``: the tables of the module's docstring."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    square = [Dimension("x1", -5, 10), Dimension("x2", 0, 15)]
    cube = [Dimension(f"x{i}", 0, 1) for i in range(1, 4)]
    mlp_space = [
        Dimension("lr", 1e-4, 1.0, log=True),
        Dimension("units", 4, 128, integer=True),
        Dimension("weight_decay", 1e-6, 1e-1, log=True),
    ]
    mlp = Mlp()
    started = time.monotonic()
    baseline = mlp({"lr": 1e-3, "units": 32, "weight_decay": 1e-4})
    emit(f"MLP: compiled and one trial in {time.monotonic() - started:.1f} s")
    single = [
        (Problem(f"Branin, {trials} trials", square, branin, f"{BRANIN_MINIMUM}"), seeds, trials),
        (
            Problem(f"Hartmann-3, {trials} trials", cube, hartmann3, f"{HARTMANN3_MINIMUM}"),
            seeds,
            trials,
        ),
        (
            Problem(
                f"MLP val loss, {mlp_trials} trials",
                mlp_space,
                mlp,
                f"lr=1e-3 units=32 wd=1e-4 gives {baseline:.4f}",
            ),
            mlp_seeds,
            mlp_trials,
        ),
    ]
    _table(single, SINGLE, lambda found: min(v[0] for v in found), "best value (lower is better)")
    reference = (1.1, 11.0)
    multi = [
        (
            Problem(f"ZDT1-3D, {trials} trials", cube, zdt1, f"HV to {reference}", 2),
            seeds,
            trials,
        )
    ]
    front = [(f1, 1 - math.sqrt(f1)) for f1 in np.linspace(0, 1, 1001)]
    _table(
        multi,
        MULTI,
        lambda found: hypervolume(found, reference),
        "hypervolume of the Pareto set (higher is better)",
    )
    emit(f"  the true front's hypervolume: {hypervolume(front, reference):.4f}")


PARTS: dict[str, Callable[[argparse.Namespace], None]] = {
    "quality": lambda args: search_quality(
        args.seeds, args.trials, args.mlp_seeds, args.mlp_trials
    ),
}
"""The parts of this benchmark, run in this order by default."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=[*PARTS, "all"], default="all")
    parser.add_argument("--seeds", type=int, default=15, help="seeds of Branin, Hartmann, ZDT1")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--mlp-seeds", type=int, default=3)
    parser.add_argument("--mlp-trials", type=int, default=20)
    args = parser.parse_args()
    for name, part in PARTS.items():
        if args.part in (name, "all"):
            part(args)


if __name__ == "__main__":
    main()
