"""The search of a tuning job: a Vertex ``StudySpec`` run as an Optuna study (ask/tell,
median stopping, the best trial or the Pareto set). Pure: no I/O, no clock, no bus.

The study lives in memory (``InMemoryStorage``) and is a cache of the controller's trials
table: :class:`Search` is rebuilt from that table's rows (:class:`TrialRecord`) whenever the
cache may be stale. Every suggestion is a function of the spec, the seed and the history
alone (the sampler is seeded afresh from ``(seed, trial number)`` before each ask), so a
rebuilt search suggests what the one it replaces would have.

Mapping (Vertex → Optuna):

- ``ALGORITHM_UNSPECIFIED``: TPE with ``constant_liar`` (parallel trials see the active ones
  as bad results rather than piling onto one spot), ``multivariate`` (``group`` when the
  space has conditional parameters) and 5 random trials first; several metrics:
  multi-objective TPE (NSGA-II's first generation, 50 trials, is random search). See
  ``benchmarks/tuning.py`` for the figures.
- ``RANDOM_SEARCH``: ``RandomSampler``.
- ``GRID_SEARCH``: every point of the product of the parameters' values, each once, in a
  seeded pseudo-random order computed lazily (Optuna's ``GridSampler`` materialises the
  whole product, which a search over a few wide integer ranges cannot afford).
- DOUBLE/INTEGER: ``suggest_float``/``suggest_int``, ``log=True`` for ``UNIT_LOG_SCALE``;
  ``UNIT_REVERSE_LOG_SCALE`` samples ``z`` log-uniform in ``[min, max]`` under an internal
  name no parameter id can take (``<id>~reverse_log``) and exposes ``min + max - z``.
- DISCRETE: when evenly spaced, ``suggest_int`` over the values' index (what
  ``suggest_float(step=Δ)`` would be, TPE keeping the order, without ``low + k * Δ``'s
  rounding), else a categorical over the values; either way the value given is exactly one
  of the spec's.
- CATEGORICAL: ``suggest_categorical``.
- Conditional parameters are suggested define-by-run: a child only when its parent took one
  of the child's condition values.
- ``medianAutomatedStoppingSpec``: Vertex's rule as an Optuna pruner (:class:`MedianStopping`):
  once 5 trials have completed, a trial whose best objective value so far is worse than the
  median of the completed trials' running averages up to its last step is stopped. Optuna's
  ``MedianPruner`` compares values at exactly the same step, which never meet when steps are
  elapsed seconds (``useElapsedDuration``) or trials report at different steps. Never for
  several metrics.
"""

import bisect
import itertools
import math
import random
import statistics
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from mldiag_schemas.tuning import (
    MAX_PARAMETERS,
    Algorithm,
    ConditionalParameterSpec,
    GoalType,
    ParameterSpec,
    ScaleType,
    StudySpec,
)

__all__ = [
    "MEDIAN_STOPPING_STARTUP_TRIALS",
    "MedianStopping",
    "Search",
    "Suggestion",
    "TrialRecord",
    "argument",
    "check_study_spec",
]

MEDIAN_STOPPING_STARTUP_TRIALS = 5
"""Completed trials median stopping waits for before it stops anything."""

TPE_STARTUP_TRIALS = 5
"""Random trials TPE runs before it models the space. Optuna's default is 10; tuning jobs
run tens of trials, and 5 found better values on Branin in 30 trials (median 0.69 against
1.35 over 25 seeds) and as good on Hartmann-3 (``benchmarks/tuning.py``)."""

TPE_MULTIVARIATE = True
"""Single-objective TPE models the parameters jointly (Optuna's default models each alone);
``benchmarks/tuning.py`` compares both."""

REVERSE_LOG_SUFFIX = "~reverse_log"
"""Appended to a reverse-log parameter's id to name the internal log-uniform variable
(``~`` is not allowed in a parameter id, so it never collides with one)."""

DISCRETE_SPACING = 1e-10
"""The least gap between two DISCRETE values (Vertex's rule)."""

_EVEN_SPACING_TOLERANCE = 1e-9  # relative, for "these DISCRETE values are evenly spaced"

TrialRecordState = Literal["active", "succeeded", "stopped", "infeasible"]


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the controller's table holds it.

    ``number`` is 0-based (the Vertex trial id is ``str(number + 1)``); ``parameters`` are
    as suggested (numbers as floats, CATEGORICAL as strings); ``values`` are the final
    values, one per ``studySpec.metrics`` entry in order (``succeeded`` and ``stopped``
    trials); ``intermediate`` maps a step to the objective's value (single objective).
    ``stopped`` means ended early by median stopping, with values.
    """

    number: int
    parameters: dict[str, float | str]
    state: TrialRecordState
    values: tuple[float, ...] | None = None
    intermediate: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Suggestion:
    """A new trial: its number and its parameters (INTEGER values as int-valued floats,
    CATEGORICAL as strings; only the conditional children whose condition holds)."""

    number: int
    parameters: dict[str, float | str]


# --- The space ------------------------------------------------------------------------------


def _number(value: object) -> float:
    if isinstance(value, int | float):
        return float(value)
    raise TypeError(f"expected a number from Optuna, got {value!r}")


@dataclass(frozen=True)
class _Domain:
    """One parameter as Optuna sees it: its internal name and distribution, and the maps
    between the value a trial receives and Optuna's value.

    An evenly spaced DISCRETE parameter is an integer index over its values: the same
    distribution as ``suggest_float(step=Δ)`` up to an affine map, without the float
    rounding of ``low + k * step`` (the value given is exactly one of the spec's)."""

    parameter_id: str
    internal_name: str
    distribution: BaseDistribution
    kind: Literal["double", "integer", "categorical", "discrete"]
    reverse: bool  # exposed = low + high - internal
    low: float
    high: float
    choices: tuple[float | str, ...] = ()  # CATEGORICAL and DISCRETE values

    def suggest(self, trial: optuna.Trial) -> float | str:
        """Ask ``trial`` for this parameter; the value a trial receives."""
        dist = self.distribution
        name = self.internal_name
        if isinstance(dist, CategoricalDistribution):
            return self.exposed(trial.suggest_categorical(name, dist.choices))
        if isinstance(dist, IntDistribution):
            return self.exposed(trial.suggest_int(name, dist.low, dist.high, log=dist.log))
        if isinstance(dist, FloatDistribution):
            return self.exposed(trial.suggest_float(name, dist.low, dist.high, log=dist.log))
        raise TypeError(f"unexpected distribution {dist!r}")

    def exposed(self, internal: object) -> float | str:
        """The value a trial receives, from Optuna's."""
        if self.kind == "categorical":
            return str(internal)
        if self.kind == "discrete" and isinstance(self.distribution, IntDistribution):
            return self.choices[int(_number(internal))]
        value = _number(internal)
        if self.reverse:
            value = min(max(self.low + self.high - value, self.low), self.high)
        return value

    def internal(self, exposed: float | str) -> object | None:
        """Optuna's value for a trial's value; None when it is outside this domain."""
        if self.kind == "categorical":
            return exposed if exposed in self.choices else None
        if isinstance(exposed, str) or not math.isfinite(exposed):
            return None
        value = float(exposed)
        if self.kind == "discrete":
            index = next((i for i, v in enumerate(self.choices) if _same(value, _number(v))), None)
            if index is None or isinstance(self.distribution, IntDistribution):
                return index
            return self.choices[index]
        if self.reverse:
            value = min(max(self.low + self.high - value, self.low), self.high)
        candidate: float | int = value
        if self.kind == "integer":
            if value != round(value):
                return None
            candidate = round(value)
        dist = self.distribution
        return candidate if dist._contains(dist.to_internal_repr(candidate)) else None


def _kind(spec: ParameterSpec) -> Literal["double", "integer", "categorical", "discrete"]:
    if spec.double_value_spec is not None:
        return "double"
    if spec.integer_value_spec is not None:
        return "integer"
    if spec.categorical_value_spec is not None:
        return "categorical"
    return "discrete"


def _evenly_spaced(values: Sequence[float]) -> bool:
    if len(values) < 2:  # a spacing needs two values
        return False
    step = values[1] - values[0]
    if step <= 0:
        return False
    return all(
        abs((b - a) - step) <= _EVEN_SPACING_TOLERANCE * step for a, b in itertools.pairwise(values)
    )


def _domain(spec: ParameterSpec, *, grid: bool) -> _Domain:
    pid = spec.parameter_id
    kind = _kind(spec)
    # The grid walks values itself; its distributions only hold the values it fixes.
    log = spec.scale_type == ScaleType.UNIT_LOG_SCALE and not grid
    reverse = spec.scale_type == ScaleType.UNIT_REVERSE_LOG_SCALE and not grid
    name = pid + REVERSE_LOG_SUFFIX if reverse else pid
    if spec.double_value_spec is not None:
        low, high = spec.double_value_spec.min_value, spec.double_value_spec.max_value
        dist: BaseDistribution = FloatDistribution(low, high, log=log or reverse)
        return _Domain(pid, name, dist, kind, reverse, low, high)
    if spec.integer_value_spec is not None:
        ilow, ihigh = spec.integer_value_spec.min_value, spec.integer_value_spec.max_value
        dist = IntDistribution(ilow, ihigh, log=log or reverse)
        return _Domain(pid, name, dist, kind, reverse, ilow, ihigh)
    if spec.categorical_value_spec is not None:
        labels = tuple(dict.fromkeys(spec.categorical_value_spec.values))
        dist = CategoricalDistribution(labels)
        return _Domain(pid, pid, dist, kind, False, 0.0, 0.0, labels)
    values = tuple(spec.discrete_value_spec.values) if spec.discrete_value_spec else (0.0,)
    if _evenly_spaced(values) and not grid:
        dist = IntDistribution(0, len(values) - 1)
    else:
        dist = CategoricalDistribution(values)
    return _Domain(pid, pid, dist, kind, False, values[0], values[-1], values)


def _walk(parameters: Sequence[ParameterSpec]) -> Iterator[ParameterSpec]:
    for spec in parameters:
        yield spec
        yield from _walk([c.parameter_spec for c in spec.conditional_parameter_specs])


def _condition_holds(condition: ConditionalParameterSpec, parent: float | str) -> bool:
    if condition.parent_categorical_values is not None:
        return parent in condition.parent_categorical_values.values
    if isinstance(parent, str):
        return False
    if condition.parent_int_values is not None:
        return parent in [float(v) for v in condition.parent_int_values.values]
    if condition.parent_discrete_values is not None:
        return any(_same(parent, v) for v in condition.parent_discrete_values.values)
    return False


def _same(a: float, b: float) -> bool:
    # Far below DISCRETE_SPACING: tells apart any two values Vertex accepts.
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


# --- The grid -------------------------------------------------------------------------------


class _Grid:
    """Every point of the product of the parameters' values, in a seeded order computed
    lazily: position ``k`` holds point ``(a * k + b) mod size`` in mixed radix, with
    ``a`` coprime to the size, so the order is a permutation that spreads early points
    over the space without listing it."""

    def __init__(self, domains: Sequence[_Domain], seed: int) -> None:
        self._domains = domains
        self._radices = [
            int(d.high - d.low) + 1 if d.kind == "integer" else len(d.choices) for d in domains
        ]
        self.size = math.prod(self._radices)
        rng = random.Random(seed)  # noqa: S311  # a seeded order, not a secret
        self._offset = rng.randrange(self.size)
        self._step = 1
        if self.size > 2:  # 1 is the only unit below 3
            while True:
                self._step = rng.randrange(1, self.size)
                if math.gcd(self._step, self.size) == 1:
                    break
        self._cursor = 0

    def point(self, position: int) -> tuple[float | str, ...]:
        """The point at ``position`` of the order."""
        index = (self._step * position + self._offset) % self.size
        digits: list[int] = []
        for radix in reversed(self._radices):
            index, digit = divmod(index, radix)
            digits.append(digit)
        digits.reverse()
        return tuple(
            float(int(d.low) + digit) if d.kind == "integer" else d.choices[digit]
            for d, digit in zip(self._domains, digits, strict=True)
        )

    def next_unused(self, used: set[tuple[float | str, ...]]) -> tuple[float | str, ...] | None:
        """The first point from the cursor on that is not in ``used``; None when the grid
        is exhausted."""
        if len(used) >= self.size:
            return None
        while self._cursor < self.size:
            candidate = self.point(self._cursor)
            self._cursor += 1
            if candidate not in used:
                return candidate
        return None


def _grid_key(values: Sequence[float | str]) -> tuple[float | str, ...]:
    return tuple(v if isinstance(v, str) else float(v) for v in values)


# --- Median stopping ------------------------------------------------------------------------


class MedianStopping(optuna.pruners.BasePruner):
    """Vertex's median automated stopping: once ``startup_trials`` trials have completed,
    stop a trial whose best objective value so far is worse than the median of the completed
    trials' performance up to its last step, a completed trial's performance being the
    running average of the values it reported at steps up to that one (completed trials
    with no value by then are left out). A NaN best value stops at once, as in Optuna's
    ``MedianPruner``. Trials stopped early are not completed trials."""

    def __init__(self, startup_trials: int) -> None:
        self._startup_trials = startup_trials
        # number -> (steps ascending, running averages): a completed trial never changes.
        self._curves: dict[int, tuple[list[int], list[float]]] = {}

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """True when ``trial`` should stop (the Optuna pruner interface)."""
        step = trial.last_step
        if step is None:
            return False
        completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len(completed) < self._startup_trials:
            return False
        reported = list(trial.intermediate_values.values())
        if any(math.isnan(v) for v in reported):
            return True
        minimize = study.direction == StudyDirection.MINIMIZE
        best = min(reported) if minimize else max(reported)
        performances = []
        for other in completed:
            steps, averages = self._curve(other)
            at = bisect.bisect_right(steps, step)
            if at:
                performances.append(averages[at - 1])
        if not performances:
            return False
        median = statistics.median(performances)
        return best > median if minimize else best < median

    def _curve(self, trial: FrozenTrial) -> tuple[list[int], list[float]]:
        curve = self._curves.get(trial.number)
        if curve is None:
            steps, averages, total = [], [], 0.0
            for s, value in sorted(trial.intermediate_values.items()):
                if math.isnan(value):
                    continue
                total += value
                steps.append(s)
                averages.append(total / len(steps))
            curve = self._curves[trial.number] = (steps, averages)
        return curve


# --- The search -----------------------------------------------------------------------------


def _directions(spec: StudySpec) -> list[StudyDirection]:
    return [
        StudyDirection.MINIMIZE if m.goal == GoalType.MINIMIZE else StudyDirection.MAXIMIZE
        for m in spec.metrics
    ]


def _trial_seed(seed: int, number: int) -> int:
    return int(np.random.SeedSequence([seed & 0xFFFFFFFF, number]).generate_state(1)[0])


class Search:
    """An Optuna study in memory, rebuilt from ``history``.

    ``history`` numbers must be 0..n-1 in order. Active trials come back RUNNING with their
    parameters (and intermediate values), so the sampler's constant liar sees them and
    :meth:`report` and :meth:`tell` work on them. Raises ValueError for a spec that
    :func:`check_study_spec` refuses.
    """

    def __init__(self, spec: StudySpec, seed: int, history: Sequence[TrialRecord] = ()) -> None:
        problems = check_study_spec(spec)
        if problems:
            raise ValueError("; ".join(f"{path}: {problem}" for path, problem in problems))
        # Optuna logs every finished trial on its own stderr handler; the controller logs
        # trials itself, as structlog events.
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._spec = spec
        self._seed = seed
        self._grid_search = spec.algorithm == Algorithm.GRID_SEARCH
        self._objectives = len(spec.metrics)
        self._conditional = any(p.conditional_parameter_specs for p in _walk(spec.parameters))
        self._domains = {
            p.parameter_id: _domain(p, grid=self._grid_search) for p in _walk(spec.parameters)
        }
        pruner: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
        if spec.median_automated_stopping_spec is not None and self._objectives == 1:
            pruner = MedianStopping(MEDIAN_STOPPING_STARTUP_TRIALS)
        self._study = optuna.create_study(
            storage=optuna.storages.InMemoryStorage(),
            sampler=self._sampler(0),
            pruner=pruner,
            directions=_directions(spec),
        )
        self._grid: _Grid | None = None
        self._used: set[tuple[float | str, ...]] = set()
        if self._grid_search:
            top = [self._domains[p.parameter_id] for p in spec.parameters]
            self._grid = _Grid(top, seed)
        self._values: dict[int, tuple[float, ...]] = {}
        for expected, record in enumerate(history):
            if record.number != expected:
                raise ValueError(
                    f"history must hold trials 0..n-1 in order: found {record.number} "
                    f"at position {expected}"
                )
            self._restore(record)

    # -- samplers

    def _sampler(self, number: int) -> optuna.samplers.BaseSampler:
        seed = _trial_seed(self._seed, number)
        if self._spec.algorithm in (Algorithm.RANDOM_SEARCH, Algorithm.GRID_SEARCH):
            # A grid trial's values are fixed before the ask; the sampler never runs.
            return optuna.samplers.RandomSampler(seed=seed)
        with warnings.catch_warnings():
            # constant_liar, multivariate and group are marked experimental.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            multivariate = TPE_MULTIVARIATE and self._objectives == 1
            return optuna.samplers.TPESampler(
                seed=seed,
                n_startup_trials=TPE_STARTUP_TRIALS,
                constant_liar=True,
                multivariate=multivariate,
                group=multivariate and self._conditional,
            )

    # -- rebuilding

    def _restore(self, record: TrialRecord) -> None:
        params: dict[str, object] = {}
        distributions: dict[str, BaseDistribution] = {}
        for pid, exposed in record.parameters.items():
            domain = self._domains.get(pid)
            if domain is None:
                continue
            internal = domain.internal(exposed)
            if internal is None:
                continue
            params[domain.internal_name] = internal
            distributions[domain.internal_name] = domain.distribution
        if self._grid_search:
            top = [record.parameters.get(p.parameter_id) for p in self._spec.parameters]
            if all(v is not None for v in top):
                self._used.add(_grid_key([v for v in top if v is not None]))
        intermediate = dict(record.intermediate) if self._objectives == 1 else {}
        reported = record.values if _feasible(record.values, self._objectives) else None
        values: list[float] | None = None
        state: TrialState
        if record.state == "active":
            state = TrialState.RUNNING
        elif record.state == "infeasible" or reported is None:
            state = TrialState.FAIL
        else:
            self._values[record.number] = reported
            if record.state == "stopped":
                state = TrialState.PRUNED
                # As Optuna's tell(PRUNED) does: the last intermediate value, if there is one.
                if intermediate:
                    last = intermediate[max(intermediate)]
                    values = None if math.isnan(last) else [last]
            else:
                state = TrialState.COMPLETE
                values = list(reported)
        trial = optuna.trial.create_trial(
            state=state,
            values=values,
            params=params,
            distributions=distributions,
            intermediate_values=intermediate,
        )
        if state == TrialState.RUNNING:
            # create_trial stamps a completion time on every trial; a running one has none.
            trial = FrozenTrial(
                number=trial.number,
                state=state,
                value=None,
                values=None,
                datetime_start=trial.datetime_start,
                datetime_complete=None,
                params=trial.params,
                distributions=trial.distributions,
                user_attrs={},
                system_attrs={},
                intermediate_values=intermediate,
                trial_id=trial._trial_id,
            )
        self._study.add_trial(trial)

    # -- the controller's calls

    @property
    def exhausted(self) -> bool:
        """True when a grid search has used every point of its grid."""
        return self._grid is not None and len(self._used) >= self._grid.size

    def ask(self) -> Suggestion | None:
        """The next trial; None when a grid search has used every point."""
        number = len(self._study.get_trials(deepcopy=False))
        self._study.sampler = self._sampler(number)
        if self._grid is not None:
            point = self._grid.next_unused(self._used)
            if point is None:
                return None
            self._used.add(point)
            fixed = {
                p.parameter_id: int(value) if p.integer_value_spec is not None else value
                for p, value in zip(self._spec.parameters, point, strict=True)
            }
            self._study.enqueue_trial(fixed, skip_if_exists=False)
        trial = self._study.ask()
        if trial.number != number:
            raise RuntimeError(f"Optuna numbered trial {number} as {trial.number}")
        parameters: dict[str, float | str] = {}
        self._suggest(trial, self._spec.parameters, parameters)
        return Suggestion(number=number, parameters=parameters)

    def _suggest(
        self,
        trial: optuna.Trial,
        specs: Sequence[ParameterSpec],
        out: dict[str, float | str],
    ) -> None:
        for spec in specs:
            value = self._domains[spec.parameter_id].suggest(trial)
            out[spec.parameter_id] = value
            children = [
                c.parameter_spec
                for c in spec.conditional_parameter_specs
                if _condition_holds(c, value)
            ]
            self._suggest(trial, children, out)

    def report(self, number: int, step: int, value: float) -> bool:
        """Record the objective's ``value`` at ``step`` of active trial ``number``; True when
        median stopping says stop it. Always False without ``medianAutomatedStoppingSpec``,
        with several metrics, or for a trial that is not active."""
        if self._objectives != 1:
            return False
        frozen = self._frozen(number)
        if frozen.state != TrialState.RUNNING:
            return False
        # The storage and the pruner directly, as Trial.report and Trial.should_prune do,
        # but a later value for the same step replaces the earlier (Trial.report would keep
        # the first and warn) and no sampler hook runs.
        storage = self._study._storage
        storage.set_trial_intermediate_value(frozen._trial_id, step, value)
        return self._study.pruner.prune(self._study, storage.get_trial(frozen._trial_id))

    def tell(self, number: int, values: Sequence[float] | None, *, stopped: bool = False) -> None:
        """End active trial ``number``: with its final ``values`` (one per metric, in the
        spec's order), ``None`` when infeasible (or when a value is NaN), ``stopped`` when
        median stopping ended it (its values still count for :meth:`best`). Telling a trial
        that has already ended does nothing (the cache may have been rebuilt after the
        controller committed it)."""
        frozen = self._frozen(number)
        if frozen.state.is_finished():
            return
        if values is not None and len(values) != self._objectives:
            raise ValueError(f"trial {number}: {len(values)} values for {self._objectives} metrics")
        if values is None or not _feasible(values, self._objectives):
            self._study.tell(number, state=TrialState.FAIL)
            return
        self._values[number] = tuple(float(v) for v in values)
        if stopped:
            self._study.tell(number, state=TrialState.PRUNED)
        else:
            self._study.tell(number, list(values))

    def _frozen(self, number: int) -> FrozenTrial:
        trials = self._study.get_trials(deepcopy=False)
        if not 0 <= number < len(trials):
            raise ValueError(f"no trial {number} in this study ({len(trials)} trials)")
        return trials[number]

    def best(self) -> list[int]:
        """Single objective: ``[number]`` of the best trial (the earliest among equals),
        ``[]`` if none has values. Several: the numbers of the Pareto set, ascending.
        Trials stopped early count with the values they ended with."""
        directions = _directions(self._spec)
        signs = [1.0 if d == StudyDirection.MINIMIZE else -1.0 for d in directions]
        scored = sorted(
            (n, tuple(s * v for s, v in zip(signs, values, strict=True)))
            for n, values in self._values.items()
        )
        if not scored:
            return []
        if len(signs) == 1:
            return [min(scored, key=lambda item: (item[1][0], item[0]))[0]]
        return [
            n for n, costs in scored if not any(_dominates(other, costs) for _, other in scored)
        ]


def _feasible(values: Sequence[float] | None, objectives: int) -> bool:
    return (
        values is not None and len(values) == objectives and not any(math.isnan(v) for v in values)
    )


def _dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """a is no worse than b everywhere and better somewhere (costs: lower is better)."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(
        x < y for x, y in zip(a, b, strict=True)
    )


# --- Arguments ------------------------------------------------------------------------------


def argument(parameter_id: str, value: float | str) -> str:
    """The trial's command-line argument: ``--lr=0.01``; integral numbers without ``.0``
    (``--units=64``) so ``int()`` and ``float()`` both read them; other numbers at full
    precision (``repr``)."""
    if isinstance(value, str):
        return f"--{parameter_id}={value}"
    if isinstance(value, int):
        return f"--{parameter_id}={value}"
    if math.isfinite(value) and value.is_integer():
        return f"--{parameter_id}={int(value)}"
    return f"--{parameter_id}={value!r}"


# --- Checks ---------------------------------------------------------------------------------

_SPEC_FIELDS = {
    "double": "doubleValueSpec",
    "integer": "integerValueSpec",
    "categorical": "categoricalValueSpec",
    "discrete": "discreteValueSpec",
}
_KIND_NAMES = {
    "double": "DOUBLE",
    "integer": "INTEGER",
    "categorical": "CATEGORICAL",
    "discrete": "DISCRETE",
}
_CONDITION_KINDS = {
    "parentIntValues": "integer",
    "parentCategoricalValues": "categorical",
    "parentDiscreteValues": "discrete",
}


def check_study_spec(spec: StudySpec, path: str = "studySpec") -> list[tuple[str, str]]:
    """Every semantic problem of ``spec`` the models cannot see, as ``(field path in
    camelCase, problem)``, e.g. ``('studySpec.parameters[1].doubleValueSpec.minValue',
    'minValue 2 is greater than maxValue 1')``. Empty when the search can run it."""
    problems: list[tuple[str, str]] = []
    seen_metrics: dict[str, int] = {}
    for i, metric in enumerate(spec.metrics):
        if metric.metric_id in seen_metrics:
            problems.append(
                (
                    f"{path}.metrics[{i}].metricId",
                    f"duplicate metricId {metric.metric_id!r} "
                    f"(also metrics[{seen_metrics[metric.metric_id]}])",
                )
            )
        else:
            seen_metrics[metric.metric_id] = i
    seen_ids: dict[str, str] = {}
    count = 0
    for i, parameter in enumerate(spec.parameters):
        count += _check_parameter(parameter, f"{path}.parameters[{i}]", spec, seen_ids, problems)
    if count > MAX_PARAMETERS:
        problems.append(
            (
                f"{path}.parameters",
                f"{count} parameters (conditional ones included); at most {MAX_PARAMETERS}",
            )
        )
    stopping = spec.study_stopping_config
    if stopping is not None:
        if len(spec.metrics) > 1:
            for name, given in (
                ("maxNumTrialsNoProgress", stopping.max_num_trials_no_progress),
                ("maxDurationNoProgress", stopping.max_duration_no_progress),
            ):
                if given is not None:
                    problems.append(
                        (
                            f"{path}.studyStoppingConfig.{name}",
                            f"{name} needs a single metric: progress is undefined with "
                            f"{len(spec.metrics)}",
                        )
                    )
        if (
            stopping.min_num_trials is not None
            and stopping.max_num_trials is not None
            and stopping.min_num_trials > stopping.max_num_trials
        ):
            problems.append(
                (
                    f"{path}.studyStoppingConfig.minNumTrials",
                    f"minNumTrials {stopping.min_num_trials} is greater than maxNumTrials "
                    f"{stopping.max_num_trials}",
                )
            )
    return problems


def _check_parameter(
    parameter: ParameterSpec,
    path: str,
    spec: StudySpec,
    seen_ids: dict[str, str],
    problems: list[tuple[str, str]],
) -> int:
    """Append ``parameter``'s problems (its children's too); the number of parameters."""
    pid = parameter.parameter_id
    if pid in seen_ids:
        problems.append(
            (f"{path}.parameterId", f"duplicate parameterId {pid!r} (also {seen_ids[pid]})")
        )
    else:
        seen_ids[pid] = path
    grid = spec.algorithm == Algorithm.GRID_SEARCH
    domain_path = f"{path}.{_SPEC_FIELDS[_kind(parameter)]}"
    problems.extend(_domain_problems(parameter, path, domain_path, grid=grid))
    default = (
        parameter.double_value_spec
        or parameter.integer_value_spec
        or parameter.categorical_value_spec
        or parameter.discrete_value_spec
    )
    if default is not None and default.default_value is not None:
        problems.append(
            (
                f"{domain_path}.defaultValue",
                "defaultValue is Vizier-only; HyperparameterTuningJob does not support it "
                "(remove it)",
            )
        )
    if grid and parameter.conditional_parameter_specs:
        problems.append(
            (
                f"{path}.conditionalParameterSpecs",
                "GRID_SEARCH does not support conditional parameters",
            )
        )
    count = 1
    for j, conditional in enumerate(parameter.conditional_parameter_specs):
        child_path = f"{path}.conditionalParameterSpecs[{j}]"
        problems.extend(_condition_problems(parameter, conditional, child_path))
        count += _check_parameter(
            conditional.parameter_spec, f"{child_path}.parameterSpec", spec, seen_ids, problems
        )
    return count


def _domain_problems(
    parameter: ParameterSpec, path: str, domain_path: str, *, grid: bool
) -> Iterator[tuple[str, str]]:
    pid = parameter.parameter_id
    scale = parameter.scale_type
    log_like = scale in (ScaleType.UNIT_LOG_SCALE, ScaleType.UNIT_REVERSE_LOG_SCALE)
    bounds: tuple[float, float] | None = None
    if parameter.double_value_spec is not None:
        bounds = (parameter.double_value_spec.min_value, parameter.double_value_spec.max_value)
        if grid:
            yield (
                domain_path,
                f"GRID_SEARCH cannot enumerate DOUBLE parameter {pid!r} (continuous): "
                "use discreteValueSpec or integerValueSpec",
            )
    elif parameter.integer_value_spec is not None:
        bounds = (parameter.integer_value_spec.min_value, parameter.integer_value_spec.max_value)
    elif parameter.categorical_value_spec is not None:
        yield from _categorical_problems(parameter.categorical_value_spec.values, domain_path)
        if scale != ScaleType.UNSPECIFIED:
            yield (
                f"{path}.scaleType",
                f"scaleType does not apply to CATEGORICAL parameter {pid!r}: leave it unset",
            )
    elif parameter.discrete_value_spec is not None:
        values = parameter.discrete_value_spec.values
        yield from _discrete_problems(values, domain_path)
        if log_like and not values[0] > 0:
            yield (
                f"{domain_path}.values[0]",
                f"{scale.value} needs values above 0; values[0] is {values[0]:g}",
            )
    if bounds is not None:
        low, high = bounds
        for name, value in (("minValue", low), ("maxValue", high)):
            if not math.isfinite(value):
                yield (f"{domain_path}.{name}", f"{name} must be finite, not {value}")
        if low > high:
            yield (
                f"{domain_path}.minValue",
                f"minValue {low:g} is greater than maxValue {high:g}",
            )
        if log_like and not low > 0:
            yield (
                f"{domain_path}.minValue",
                f"{scale.value} needs a range above 0; minValue is {low:g}",
            )


def _categorical_problems(values: Sequence[str], path: str) -> Iterator[tuple[str, str]]:
    first: dict[str, int] = {}
    for j, label in enumerate(values):
        if label in first:
            yield (
                f"{path}.values[{j}]",
                f"duplicate {label!r} (also values[{first[label]}])",
            )
        else:
            first[label] = j


def _discrete_problems(values: Sequence[float], path: str) -> Iterator[tuple[str, str]]:
    for j, value in enumerate(values):
        if not math.isfinite(value):
            yield (f"{path}.values[{j}]", f"must be finite, not {value}")
    for j, (before, after) in enumerate(itertools.pairwise(values), start=1):
        if not after - before >= DISCRETE_SPACING:
            yield (
                f"{path}.values[{j}]",
                f"values must increase, at least {DISCRETE_SPACING:g} apart: "
                f"{after:g} follows {before:g}",
            )


def _condition_problems(
    parent: ParameterSpec, conditional: ConditionalParameterSpec, path: str
) -> Iterator[tuple[str, str]]:
    parent_kind = _kind(parent)
    pid = parent.parameter_id
    given: list[tuple[str, Sequence[float | str]]] = []
    if conditional.parent_int_values is not None:
        given.append(("parentIntValues", conditional.parent_int_values.values))
    if conditional.parent_categorical_values is not None:
        given.append(("parentCategoricalValues", conditional.parent_categorical_values.values))
    if conditional.parent_discrete_values is not None:
        given.append(("parentDiscreteValues", conditional.parent_discrete_values.values))
    for name, values in given:
        wanted = _CONDITION_KINDS[name]
        if wanted != parent_kind:
            fitting = next((n for n, k in _CONDITION_KINDS.items() if k == parent_kind), None)
            hint = f"use {fitting}" if fitting else "a DOUBLE parameter cannot have children"
            yield (
                f"{path}.{name}",
                f"{name} needs a {_KIND_NAMES[wanted]} parent; "
                f"{pid!r} is {_KIND_NAMES[parent_kind]} ({hint})",
            )
            continue
        for k, value in enumerate(values):
            if not _can_take(parent, value):
                yield (
                    f"{path}.{name}.values[{k}]",
                    f"parent {pid!r} never takes {value!r}: {_domain_text(parent)}",
                )


def _can_take(parent: ParameterSpec, value: float | str) -> bool:
    if parent.categorical_value_spec is not None:
        return value in parent.categorical_value_spec.values
    if isinstance(value, str):
        return False
    if parent.integer_value_spec is not None:
        iv = parent.integer_value_spec
        return iv.min_value <= value <= iv.max_value
    if parent.discrete_value_spec is not None:
        return any(_same(float(value), v) for v in parent.discrete_value_spec.values)
    return False


def _domain_text(parent: ParameterSpec) -> str:
    if parent.integer_value_spec is not None:
        iv = parent.integer_value_spec
        return f"its range is [{iv.min_value}, {iv.max_value}]"
    return "not one of its values"
