"""The search of a tuning job: StudySpec → Optuna mappings, rebuilding from the trials
table, median stopping, the best trial and the Pareto set, and the spec's semantic checks."""

import math
import re
import statistics
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mldiag_schemas.tuning import StudySpec
from mldiag_training.tuning.search import (
    MEDIAN_STOPPING_STARTUP_TRIALS,
    TPE_STARTUP_TRIALS,
    Search,
    Suggestion,
    TrialRecord,
    argument,
    check_study_spec,
)


def _spec(*parameters: dict[str, Any], **fields: Any) -> StudySpec:
    body: dict[str, Any] = {
        "metrics": fields.pop("metrics", [{"metricId": "loss", "goal": "MINIMIZE"}]),
        "parameters": list(parameters),
        **fields,
    }
    return StudySpec.model_validate(body)


def _double(pid: str, low: float, high: float, scale: str | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {"parameterId": pid, "doubleValueSpec": {"minValue": low, "maxValue": high}}
    if scale:
        p["scaleType"] = scale
    return p


def _integer(pid: str, low: int, high: int, scale: str | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {
        "parameterId": pid,
        "integerValueSpec": {"minValue": str(low), "maxValue": str(high)},
    }
    if scale:
        p["scaleType"] = scale
    return p


def _categorical(pid: str, *values: str, **extra: Any) -> dict[str, Any]:
    return {"parameterId": pid, "categoricalValueSpec": {"values": list(values)}, **extra}


def _discrete(pid: str, *values: float, **extra: Any) -> dict[str, Any]:
    return {"parameterId": pid, "discreteValueSpec": {"values": list(values)}, **extra}


def _samples(spec: StudySpec, n: int, seed: int = 0) -> list[Suggestion]:
    """n suggestions, each told a constant value so the search moves on."""
    search = Search(spec, seed)
    out = []
    for _ in range(n):
        suggestion = search.ask()
        assert suggestion is not None
        search.tell(suggestion.number, [1.0] * len(spec.metrics))
        out.append(suggestion)
    return out


def _values(suggestions: list[Suggestion], pid: str) -> list[float]:
    values = [s.parameters[pid] for s in suggestions]
    assert all(isinstance(v, float) for v in values)
    return [float(v) for v in values]


# --- Distributions ------------------------------------------------------------------------


def test_linear_double_spreads_evenly() -> None:
    xs = _values(_samples(_spec(_double("x", -2, 6), algorithm="RANDOM_SEARCH"), 400), "x")
    assert all(-2 <= x <= 6 for x in xs)
    assert 1.5 < statistics.median(xs) < 2.5


def test_log_double_spreads_over_orders_of_magnitude() -> None:
    spec = _spec(_double("lr", 1e-5, 1e-1, "UNIT_LOG_SCALE"), algorithm="RANDOM_SEARCH")
    xs = _values(_samples(spec, 400), "lr")
    assert all(1e-5 <= x <= 1e-1 for x in xs)
    below_geometric_middle = sum(x < 1e-3 for x in xs) / len(xs)
    assert 0.4 < below_geometric_middle < 0.6  # linear would put 1% there


def test_reverse_log_double_spreads_out_the_top_of_the_range() -> None:
    spec = _spec(_double("beta", 1, 1000, "UNIT_REVERSE_LOG_SCALE"), algorithm="RANDOM_SEARCH")
    xs = _values(_samples(spec, 600), "beta")
    assert all(1 <= x <= 1000 for x in xs)
    # x = 1001 - z with z log-uniform: P(x > 900) = log(101) / log(1000), about 0.67,
    # where a linear scale gives 0.1 and a log scale 0.015.
    top_decile = sum(x > 900 for x in xs) / len(xs)
    assert 0.58 < top_decile < 0.76
    # ... and the bottom of the range is reached too, rarely.
    assert min(xs) < 500


def test_reverse_log_integer_stays_integral_and_favours_the_top() -> None:
    spec = _spec(_integer("n", 1, 100, "UNIT_REVERSE_LOG_SCALE"), algorithm="RANDOM_SEARCH")
    xs = _values(_samples(spec, 400), "n")
    assert all(x.is_integer() and 1 <= x <= 100 for x in xs)
    assert sum(x >= 90 for x in xs) / len(xs) > 0.4


def test_integer_values_are_int_valued_floats_covering_the_range() -> None:
    xs = _values(_samples(_spec(_integer("k", 3, 7), algorithm="RANDOM_SEARCH"), 100), "k")
    assert set(xs) == {3.0, 4.0, 5.0, 6.0, 7.0}


def test_log_integer_favours_small_values() -> None:
    spec = _spec(_integer("units", 1, 1024, "UNIT_LOG_SCALE"), algorithm="RANDOM_SEARCH")
    xs = _values(_samples(spec, 400), "units")
    assert all(x.is_integer() for x in xs)
    assert 0.4 < sum(x <= 32 for x in xs) / len(xs) < 0.6


@pytest.mark.parametrize(
    "values",
    [
        (0.1, 0.2, 0.3, 0.4),  # evenly spaced: an ordered index (float rounding would miss)
        (0.001, 0.01, 0.1, 1.0),  # not evenly spaced: categorical
        (7.5,),
    ],
)
@pytest.mark.parametrize("algorithm", ["ALGORITHM_UNSPECIFIED", "RANDOM_SEARCH"])
def test_discrete_values_are_exactly_the_specs(values: tuple[float, ...], algorithm: str) -> None:
    xs = _values(_samples(_spec(_discrete("d", *values), algorithm=algorithm), 40), "d")
    assert set(xs) <= set(values)
    if len(values) > 1:
        assert len(set(xs)) > 1


def test_categorical_values_are_the_specs_strings() -> None:
    spec = _spec(_categorical("opt", "sgd", "adam", "rmsprop"), algorithm="RANDOM_SEARCH")
    got = {s.parameters["opt"] for s in _samples(spec, 60)}
    assert got == {"sgd", "adam", "rmsprop"}


@pytest.mark.parametrize("algorithm", ["ALGORITHM_UNSPECIFIED", "RANDOM_SEARCH"])
def test_conditional_children_present_only_when_their_condition_holds(algorithm: str) -> None:
    spec = _spec(
        _categorical(
            "opt",
            "sgd",
            "adam",
            conditionalParameterSpecs=[
                {
                    "parentCategoricalValues": {"values": ["sgd"]},
                    "parameterSpec": {
                        **_integer("layers", 1, 4),
                        "conditionalParameterSpecs": [
                            {
                                "parentIntValues": {"values": ["3", "4"]},
                                "parameterSpec": _discrete("dropout", 0.0, 0.25, 0.5),
                            }
                        ],
                    },
                },
                {
                    "parentCategoricalValues": {"values": ["adam"]},
                    "parameterSpec": _double("beta1", 0.8, 0.99),
                },
            ],
        ),
        _double("lr", 1e-4, 1e-1, "UNIT_LOG_SCALE"),
        algorithm=algorithm,
    )
    suggestions = _samples(spec, 60)
    for s in suggestions:
        p = s.parameters
        assert ("layers" in p) == (p["opt"] == "sgd")
        assert ("beta1" in p) == (p["opt"] == "adam")
        assert ("dropout" in p) == (p.get("layers") in (3.0, 4.0))
        assert "lr" in p
    assert any("dropout" in s.parameters for s in suggestions)
    assert any("beta1" in s.parameters for s in suggestions)


def test_goal_unspecified_maximizes() -> None:
    spec = _spec(_double("x", 0, 1), metrics=[{"metricId": "acc"}])
    search = Search(spec, 0)
    for value in (0.2, 0.9, 0.5):
        s = search.ask()
        assert s is not None
        search.tell(s.number, [value])
    assert search.best() == [1]


# --- Grid ---------------------------------------------------------------------------------


def test_grid_suggests_every_point_once_then_is_exhausted() -> None:
    spec = _spec(
        _integer("a", 1, 3),
        _categorical("b", "x", "y"),
        _discrete("c", 0.5, 2.0),
        algorithm="GRID_SEARCH",
    )
    search = Search(spec, 7)
    points = []
    while (s := search.ask()) is not None:
        points.append((s.parameters["a"], s.parameters["b"], s.parameters["c"]))
        assert not search.exhausted or len(points) == 12
    assert len(points) == 12
    assert set(points) == {(a, b, c) for a in (1.0, 2.0, 3.0) for b in "xy" for c in (0.5, 2.0)}
    assert search.exhausted
    assert search.ask() is None


def test_grid_over_a_huge_space_starts_at_once_and_never_repeats() -> None:
    spec = _spec(
        *[_integer(f"p{i}", 0, 10**12) for i in range(4)],
        _discrete("d", *[float(i) for i in range(100)]),
        algorithm="GRID_SEARCH",
    )
    search = Search(spec, 1)
    points = set()
    for _ in range(200):
        s = search.ask()
        assert s is not None
        points.add(tuple(s.parameters.values()))
    assert len(points) == 200
    assert not search.exhausted


def test_grid_seeds_give_different_orders() -> None:
    spec = _spec(_integer("a", 0, 99), algorithm="GRID_SEARCH")
    first = [s.parameters["a"] for s in _samples(spec, 10, seed=1)]
    second = [s.parameters["a"] for s in _samples(spec, 10, seed=2)]
    assert first != second
    assert first == [s.parameters["a"] for s in _samples(spec, 10, seed=1)]


_GRID_PARAMS = st.lists(
    st.one_of(
        st.integers(1, 4).map(lambda n: ("i", n)),
        st.integers(1, 3).map(lambda n: ("c", n)),
        st.integers(1, 3).map(lambda n: ("d", n)),
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=30, deadline=None)
@given(
    kinds=_GRID_PARAMS,
    seed=st.integers(0, 2**31),
    taken=st.integers(0, 40),
    states=st.lists(st.sampled_from(["active", "succeeded", "infeasible"]), min_size=40),
)
def test_rebuilt_grid_never_resuggests_a_used_point(
    kinds: list[tuple[str, int]], seed: int, taken: int, states: list[str]
) -> None:
    parameters = []
    for i, (kind, n) in enumerate(kinds):
        if kind == "i":
            parameters.append(_integer(f"p{i}", -1, n - 2))
        elif kind == "c":
            parameters.append(_categorical(f"p{i}", *[f"v{j}" for j in range(n)]))
        else:
            parameters.append(_discrete(f"p{i}", *[0.1 * (j + 1) for j in range(n)]))
    spec = _spec(*parameters, algorithm="GRID_SEARCH")
    size = math.prod(n for _, n in kinds)
    first = Search(spec, seed)
    history = []
    for number in range(min(taken, size)):
        s = first.ask()
        assert s is not None
        state = states[number]
        values = (1.0,) if state == "succeeded" else None
        history.append(TrialRecord(number, s.parameters, state, values))  # type: ignore[arg-type]
    rebuilt = Search(spec, seed + 1, history)
    used = {tuple(r.parameters.values()) for r in history}
    while (s := rebuilt.ask()) is not None:
        point = tuple(s.parameters.values())
        assert point not in used
        used.add(point)
    assert len(used) == size
    assert rebuilt.exhausted


# --- Rebuilding ---------------------------------------------------------------------------


def _run(search: Search, n: int, objective: Any) -> list[TrialRecord]:
    records = []
    for _ in range(n):
        s = search.ask()
        assert s is not None
        value = objective(s.parameters)
        search.tell(s.number, [value])
        records.append(TrialRecord(s.number, s.parameters, "succeeded", (value,)))
    return records


def _quadratic(p: dict[str, float | str]) -> float:
    return (float(p["x"]) - 0.3) ** 2 + (float(p["y"]) - 7) ** 2


@pytest.mark.parametrize("algorithm", ["ALGORITHM_UNSPECIFIED", "RANDOM_SEARCH"])
def test_a_rebuilt_search_continues_the_study(algorithm: str) -> None:
    spec = _spec(
        _double("x", 0, 1),
        _integer("y", 1, 10, "UNIT_REVERSE_LOG_SCALE"),
        _discrete("z", 1.0, 2.0, 3.0),
        algorithm=algorithm,
    )
    original = Search(spec, 42)
    history = _run(original, 14, _quadratic)
    active = original.ask()
    assert active is not None
    history.append(TrialRecord(active.number, active.parameters, "active"))

    rebuilt = Search(spec, 42, history)
    assert rebuilt.best() == original.best()
    # The next number continues, and (the sampler being seeded per trial) the suggestion
    # is the one the original search would have made.
    following = original.ask()
    again = rebuilt.ask()
    assert again is not None
    assert following is not None
    assert again.number == 15
    assert again == following
    # The active trial comes back active: it can be reported on and told.
    rebuilt.tell(active.number, [0.0])
    assert rebuilt.best() == [active.number]


_DOMAINS = st.sampled_from(
    [
        _double("a", -1, 1),
        _double("a", 1e-4, 1, "UNIT_LOG_SCALE"),
        _double("a", 0.5, 0.999, "UNIT_REVERSE_LOG_SCALE"),
        _integer("a", -5, 5),
        _integer("a", 1, 1000, "UNIT_LOG_SCALE"),
        _integer("a", 2, 64, "UNIT_REVERSE_LOG_SCALE"),
        _discrete("a", 0.1, 0.2, 0.3, 0.4),
        _discrete("a", 1e-3, 1e-2, 0.5),
        _categorical("a", "p", "q", "r"),
    ]
)


@settings(max_examples=25, deadline=None)
@given(
    domains=st.lists(_DOMAINS, min_size=1, max_size=3),
    algorithm=st.sampled_from(["ALGORITHM_UNSPECIFIED", "RANDOM_SEARCH"]),
    outcomes=st.lists(
        st.tuples(
            st.sampled_from(["succeeded", "infeasible", "stopped", "active"]), st.floats(0, 1)
        ),
        min_size=1,
        max_size=12,
    ),
    seed=st.integers(0, 2**40),
)
def test_a_rebuilt_search_suggests_what_the_original_would(
    domains: list[dict[str, Any]], algorithm: str, outcomes: list[tuple[str, float]], seed: int
) -> None:
    """Every mapping round-trips: the trials table's values rebuild the same Optuna study,
    so the next suggestion is the same (whatever the trials' states) and in the domain."""
    parameters = [{**d, "parameterId": f"p{i}"} for i, d in enumerate(domains)]
    spec = _spec(*parameters, algorithm=algorithm, medianAutomatedStoppingSpec={})
    original = Search(spec, seed)
    history = []
    for state, value in outcomes:
        s = original.ask()
        assert s is not None
        curve = {1: value + 1, 2: value + 0.5, 3: value}
        for step, v in curve.items():
            original.report(s.number, step, v)
        if state == "succeeded":
            original.tell(s.number, [value])
        elif state == "stopped":
            original.tell(s.number, [value], stopped=True)
        elif state == "infeasible":
            original.tell(s.number, None)
        values = (value,) if state in ("succeeded", "stopped") else None
        history.append(TrialRecord(s.number, s.parameters, state, values, curve))  # type: ignore[arg-type]
    rebuilt = Search(spec, seed, history)
    assert rebuilt.best() == original.best()
    expected, got = original.ask(), rebuilt.ask()
    assert got == expected
    assert got is not None
    for parameter in spec.parameters:
        given = got.parameters[parameter.parameter_id]
        if parameter.categorical_value_spec is not None:
            assert given in parameter.categorical_value_spec.values
            continue
        assert isinstance(given, float)
        if parameter.double_value_spec is not None:
            assert parameter.double_value_spec.min_value <= given
            assert given <= parameter.double_value_spec.max_value
        elif parameter.integer_value_spec is not None:
            assert given.is_integer()
            assert parameter.integer_value_spec.min_value <= given
            assert given <= parameter.integer_value_spec.max_value
        elif parameter.discrete_value_spec is not None:
            assert given in parameter.discrete_value_spec.values


def test_history_must_be_numbered_in_order() -> None:
    spec = _spec(_double("x", 0, 1))
    with pytest.raises(ValueError, match=r"0\.\.n-1"):
        Search(spec, 0, [TrialRecord(1, {"x": 0.5}, "succeeded", (1.0,))])


def test_history_tolerates_values_outside_todays_space() -> None:
    spec = _spec(_double("x", 0, 1))
    history = [
        TrialRecord(0, {"x": 5.0, "gone": "a"}, "succeeded", (1.0,)),
        TrialRecord(1, {"x": 0.5}, "infeasible"),
        TrialRecord(2, {"x": 0.25}, "succeeded", (math.nan,)),
    ]
    search = Search(spec, 0, history)
    assert search.best() == [0]
    s = search.ask()
    assert s is not None
    assert s.number == 3


def test_rebuilt_stopped_trials_keep_their_values() -> None:
    spec = _spec(_double("x", 0, 1), medianAutomatedStoppingSpec={})
    history = [
        TrialRecord(0, {"x": 0.1}, "succeeded", (0.5,), {1: 0.6, 2: 0.5}),
        TrialRecord(1, {"x": 0.2}, "stopped", (0.2,), {1: 0.2}),
    ]
    assert Search(spec, 0, history).best() == [1]


# --- Telling ------------------------------------------------------------------------------


def test_tell_nan_is_infeasible_and_telling_twice_does_nothing() -> None:
    search = Search(_spec(_double("x", 0, 1)), 0)
    a, b = search.ask(), search.ask()
    assert a is not None
    assert b is not None
    search.tell(a.number, [math.nan])
    search.tell(b.number, None)
    assert search.best() == []
    search.tell(b.number, [0.1])  # already ended: ignored
    assert search.best() == []
    with pytest.raises(ValueError, match="no trial 9"):
        search.tell(9, [1.0])
    c = search.ask()
    assert c is not None
    with pytest.raises(ValueError, match="2 values for 1 metrics"):
        search.tell(c.number, [1.0, 2.0])


def test_parallel_asks_give_new_numbers_and_distinct_points() -> None:
    search = Search(_spec(_double("x", 0, 1), _double("y", 0, 1)), 3)
    _run(search, 12, lambda p: float(p["x"]) + float(p["y"]))
    pending = [search.ask() for _ in range(4)]
    assert [s.number for s in pending if s] == [12, 13, 14, 15]
    assert len({tuple(s.parameters.values()) for s in pending if s}) == 4


# --- Median stopping ----------------------------------------------------------------------


def _median_study(goal: str = "MINIMIZE", **fields: Any) -> tuple[Search, Suggestion]:
    spec = _spec(
        _double("x", 0, 1),
        metrics=fields.pop("metrics", [{"metricId": "loss", "goal": goal}]),
        **fields,
    )
    search = Search(spec, 0)
    sign = 1.0 if goal == "MINIMIZE" else -1.0
    for i in range(MEDIAN_STOPPING_STARTUP_TRIALS):
        s = search.ask()
        assert s is not None
        for step in range(5):
            assert not search.report(s.number, step, sign * (1.0 + 0.01 * i))
        search.tell(s.number, [sign * (1.0 + 0.01 * i)] * len(spec.metrics))
    bad = search.ask()
    assert bad is not None
    return search, bad


@pytest.mark.parametrize("goal", ["MINIMIZE", "MAXIMIZE"])
def test_median_stopping_stops_a_clearly_bad_trial(goal: str) -> None:
    search, bad = _median_study(goal, medianAutomatedStoppingSpec={})
    sign = 1.0 if goal == "MINIMIZE" else -1.0
    assert search.report(bad.number, 0, sign * 100.0)
    search.tell(bad.number, [sign * 100.0], stopped=True)
    assert search.best() == [0]


def test_median_stopping_spares_a_good_trial() -> None:
    search, good = _median_study("MINIMIZE", medianAutomatedStoppingSpec={})
    assert not search.report(good.number, 0, 0.5)
    assert not search.report(good.number, 1, 0.4)


def test_median_stopping_waits_for_five_completed_trials() -> None:
    search = Search(_spec(_double("x", 0, 1), medianAutomatedStoppingSpec={}), 0)
    for i in range(MEDIAN_STOPPING_STARTUP_TRIALS - 1):
        s = search.ask()
        assert s is not None
        search.report(s.number, 0, 1.0 + i)
        search.tell(s.number, [1.0 + i])
    s = search.ask()
    assert s is not None
    assert not search.report(s.number, 0, 1000.0)


def test_no_stopping_without_the_spec_or_with_several_metrics() -> None:
    search, bad = _median_study("MINIMIZE")
    assert not search.report(bad.number, 0, 100.0)
    two = [{"metricId": "loss", "goal": "MINIMIZE"}, {"metricId": "ms", "goal": "MINIMIZE"}]
    search, bad = _median_study(metrics=two, medianAutomatedStoppingSpec={})
    assert not search.report(bad.number, 0, 100.0)


def _completed(search: Search, curves: list[dict[int, float]]) -> None:
    for curve in curves:
        s = search.ask()
        assert s is not None
        for step, value in curve.items():
            search.report(s.number, step, value)
        search.tell(s.number, [curve[max(curve)]])


def test_median_stopping_compares_at_the_last_step_reported_by_then() -> None:
    """Trials reporting at different steps (or elapsed seconds) still meet: a completed
    trial counts with what it reported up to the stopped trial's step."""
    search = Search(_spec(_double("x", 0, 1), medianAutomatedStoppingSpec={}), 0)
    _completed(search, [{10: 1.0, 20: 0.8, 30: 0.6}] * MEDIAN_STOPPING_STARTUP_TRIALS)
    early, late = search.ask(), search.ask()
    assert early is not None
    assert late is not None
    assert not search.report(early.number, 5, 50.0)  # nothing completed had reported by 5
    assert search.report(late.number, 15, 50.0)  # Optuna's MedianPruner: no value at 15


def test_median_stopping_uses_vertexs_running_average() -> None:
    """Vertex: the trial's best value against the median of the completed trials' running
    averages (here 10, 6, 4.33 at steps 1, 2, 3), not their values at that step."""
    search = Search(_spec(_double("x", 0, 1), medianAutomatedStoppingSpec={}), 0)
    _completed(search, [{1: 10.0, 2: 2.0, 3: 1.0}] * MEDIAN_STOPPING_STARTUP_TRIALS)
    trial = search.ask()
    assert trial is not None
    assert not search.report(trial.number, 1, 9.0)
    assert not search.report(trial.number, 3, 4.0)  # worse than every value at step 3 (1.0)
    trial = search.ask()
    assert trial is not None
    assert search.report(trial.number, 3, 4.5)  # its best, 4.5, is worse than 4.33


def test_median_stopping_stops_a_nan_at_once() -> None:
    search, trial = _median_study("MINIMIZE", medianAutomatedStoppingSpec={})
    assert search.report(trial.number, 0, math.nan)


def test_report_on_an_ended_trial_says_no() -> None:
    search, bad = _median_study("MINIMIZE", medianAutomatedStoppingSpec={})
    search.tell(bad.number, [100.0])
    assert not search.report(bad.number, 0, 100.0)


# --- Best and Pareto ----------------------------------------------------------------------


def test_pareto_set_of_a_hand_made_history() -> None:
    spec = _spec(
        _double("x", 0, 1),
        metrics=[{"metricId": "acc", "goal": "MAXIMIZE"}, {"metricId": "ms", "goal": "MINIMIZE"}],
    )
    history = [
        TrialRecord(0, {"x": 0.0}, "succeeded", (0.90, 50.0)),  # front
        TrialRecord(1, {"x": 0.1}, "succeeded", (0.80, 60.0)),  # dominated by 0
        TrialRecord(2, {"x": 0.2}, "succeeded", (0.95, 80.0)),  # front: most accurate
        TrialRecord(3, {"x": 0.3}, "infeasible"),
        TrialRecord(4, {"x": 0.4}, "succeeded", (0.70, 10.0)),  # front: fastest
        TrialRecord(5, {"x": 0.5}, "succeeded", (0.90, 50.0)),  # equal to 0: not dominated
        TrialRecord(6, {"x": 0.6}, "succeeded", (0.70, 20.0)),  # dominated by 4
        TrialRecord(7, {"x": 0.7}, "active"),
    ]
    search = Search(spec, 0, history)
    assert search.best() == [0, 2, 4, 5]
    search.tell(7, [0.99, 5.0])  # dominates everything
    assert search.best() == [7]


def test_best_of_none_is_empty_and_ties_go_to_the_earliest() -> None:
    search = Search(_spec(_double("x", 0, 1)), 0)
    assert search.best() == []
    for value in (0.5, 0.2, 0.2):
        s = search.ask()
        assert s is not None
        search.tell(s.number, [value])
    assert search.best() == [1]


@pytest.mark.parametrize(
    "metrics",
    [
        [{"metricId": "loss", "goal": "MINIMIZE"}],
        [{"metricId": "loss", "goal": "MINIMIZE"}, {"metricId": "acc", "goal": "MAXIMIZE"}],
    ],
)
def test_default_algorithm_improves_on_a_smooth_problem(metrics: list[dict[str, str]]) -> None:
    """Not a benchmark (see benchmarks/tuning.py): a smoke test that the model-based
    sampler is wired in, for one and for several objectives."""
    spec = _spec(_double("x", -5, 5), _double("y", -5, 5), metrics=metrics)
    search = Search(spec, 0)
    for _ in range(40):
        s = search.ask()
        assert s is not None
        x, y = float(s.parameters["x"]), float(s.parameters["y"])
        loss = (x - 1) ** 2 + (y + 2) ** 2
        search.tell(s.number, [loss] if len(metrics) == 1 else [loss, -loss])
    best = search.best()
    assert best
    assert best[0] >= TPE_STARTUP_TRIALS  # a random start trial is not the best after 40


# --- Checks -------------------------------------------------------------------------------

_CHECKS: list[tuple[str, StudySpec, str, str]] = [
    (
        "grid over a double",
        _spec(_double("x", 0, 1), _integer("n", 1, 3), algorithm="GRID_SEARCH"),
        "studySpec.parameters[0].doubleValueSpec",
        "GRID_SEARCH cannot enumerate DOUBLE parameter 'x'",
    ),
    (
        "log over a range reaching 0",
        _spec(_integer("n", 1, 3), _double("lr", 0, 1, "UNIT_LOG_SCALE")),
        "studySpec.parameters[1].doubleValueSpec.minValue",
        "UNIT_LOG_SCALE needs a range above 0",
    ),
    (
        "reverse log over a negative integer range",
        _spec(_integer("n", -3, 3, "UNIT_REVERSE_LOG_SCALE")),
        "studySpec.parameters[0].integerValueSpec.minValue",
        "UNIT_REVERSE_LOG_SCALE needs a range above 0",
    ),
    (
        "log over discrete values from 0",
        _spec(_discrete("d", 0.0, 1.0, scaleType="UNIT_LOG_SCALE")),
        "studySpec.parameters[0].discreteValueSpec.values[0]",
        "UNIT_LOG_SCALE needs values above 0",
    ),
    (
        "double min > max",
        _spec(_double("x", 2, 1)),
        "studySpec.parameters[0].doubleValueSpec.minValue",
        "minValue 2 is greater than maxValue 1",
    ),
    (
        "integer min > max",
        _spec(_integer("n", 5, 1)),
        "studySpec.parameters[0].integerValueSpec.minValue",
        "minValue 5 is greater than maxValue 1",
    ),
    (
        "infinite bound",
        _spec(_double("x", 0, math.inf)),
        "studySpec.parameters[0].doubleValueSpec.maxValue",
        "maxValue must be finite",
    ),
    (
        "duplicate parameter ids",
        _spec(_double("x", 0, 1), _integer("x", 1, 2)),
        "studySpec.parameters[1].parameterId",
        "duplicate parameterId 'x' (also studySpec.parameters[0])",
    ),
    (
        "duplicate parameter id in a conditional child",
        _spec(
            _double("lr", 0, 1),
            _categorical(
                "opt",
                "sgd",
                conditionalParameterSpecs=[
                    {
                        "parentCategoricalValues": {"values": ["sgd"]},
                        "parameterSpec": _double("lr", 0, 1),
                    }
                ],
            ),
        ),
        "studySpec.parameters[1].conditionalParameterSpecs[0].parameterSpec.parameterId",
        "duplicate parameterId 'lr'",
    ),
    (
        "duplicate metric ids",
        _spec(_double("x", 0, 1), metrics=[{"metricId": "loss"}, {"metricId": "loss"}]),
        "studySpec.metrics[1].metricId",
        "duplicate metricId 'loss' (also metrics[0])",
    ),
    (
        "categorical condition value never taken",
        _spec(
            _categorical(
                "opt",
                "sgd",
                "adam",
                conditionalParameterSpecs=[
                    {
                        "parentCategoricalValues": {"values": ["adam", "lion"]},
                        "parameterSpec": _double("b", 0, 1),
                    }
                ],
            )
        ),
        "studySpec.parameters[0].conditionalParameterSpecs[0].parentCategoricalValues.values[1]",
        "parent 'opt' never takes 'lion'",
    ),
    (
        "integer condition value outside the range",
        _spec(
            {
                **_integer("layers", 1, 4),
                "conditionalParameterSpecs": [
                    {"parentIntValues": {"values": ["9"]}, "parameterSpec": _double("d", 0, 1)}
                ],
            }
        ),
        "studySpec.parameters[0].conditionalParameterSpecs[0].parentIntValues.values[0]",
        "its range is [1, 4]",
    ),
    (
        "discrete condition value not among the values",
        _spec(
            _discrete(
                "d",
                0.1,
                0.2,
                conditionalParameterSpecs=[
                    {
                        "parentDiscreteValues": {"values": [0.15]},
                        "parameterSpec": _double("e", 0, 1),
                    }
                ],
            )
        ),
        "studySpec.parameters[0].conditionalParameterSpecs[0].parentDiscreteValues.values[0]",
        "parent 'd' never takes 0.15",
    ),
    (
        "condition kind not matching the parent",
        _spec(
            _categorical(
                "opt",
                "sgd",
                conditionalParameterSpecs=[
                    {"parentIntValues": {"values": ["1"]}, "parameterSpec": _double("b", 0, 1)}
                ],
            )
        ),
        "studySpec.parameters[0].conditionalParameterSpecs[0].parentIntValues",
        "parentIntValues needs a INTEGER parent; 'opt' is CATEGORICAL "
        "(use parentCategoricalValues)",
    ),
    (
        "a condition under a double parent",
        _spec(
            {
                **_double("x", 0, 1),
                "conditionalParameterSpecs": [
                    {"parentDiscreteValues": {"values": [0.5]}, "parameterSpec": _double("y", 0, 1)}
                ],
            }
        ),
        "studySpec.parameters[0].conditionalParameterSpecs[0].parentDiscreteValues",
        "a DOUBLE parameter cannot have children",
    ),
    (
        "discrete values not increasing",
        _spec(_discrete("d", 0.1, 0.3, 0.2)),
        "studySpec.parameters[0].discreteValueSpec.values[2]",
        "values must increase",
    ),
    (
        "discrete values too close",
        _spec(_discrete("d", 1.0, 1.0 + 1e-12)),
        "studySpec.parameters[0].discreteValueSpec.values[1]",
        "at least 1e-10 apart",
    ),
    (
        "scale type on a categorical",
        _spec(_categorical("opt", "a", "b", scaleType="UNIT_LINEAR_SCALE")),
        "studySpec.parameters[0].scaleType",
        "scaleType does not apply to CATEGORICAL parameter 'opt'",
    ),
    (
        "duplicate categorical values",
        _spec(_categorical("opt", "a", "b", "a")),
        "studySpec.parameters[0].categoricalValueSpec.values[2]",
        "duplicate 'a' (also values[0])",
    ),
    (
        "default value",
        _spec(
            {
                "parameterId": "x",
                "doubleValueSpec": {"minValue": 0, "maxValue": 1, "defaultValue": 0.5},
            }
        ),
        "studySpec.parameters[0].doubleValueSpec.defaultValue",
        "defaultValue is Vizier-only",
    ),
    (
        "grid with conditional parameters",
        _spec(
            _categorical(
                "opt",
                "sgd",
                conditionalParameterSpecs=[
                    {
                        "parentCategoricalValues": {"values": ["sgd"]},
                        "parameterSpec": _integer("n", 1, 2),
                    }
                ],
            ),
            algorithm="GRID_SEARCH",
        ),
        "studySpec.parameters[0].conditionalParameterSpecs",
        "GRID_SEARCH does not support conditional parameters",
    ),
    (
        "no-progress stopping with several metrics",
        _spec(
            _double("x", 0, 1),
            metrics=[{"metricId": "a"}, {"metricId": "b"}],
            studyStoppingConfig={"maxNumTrialsNoProgress": 5},
        ),
        "studySpec.studyStoppingConfig.maxNumTrialsNoProgress",
        "needs a single metric",
    ),
    (
        "too many parameters counting conditional ones",
        _spec(
            *[_double(f"x{i}", 0, 1) for i in range(99)],
            _categorical(
                "opt",
                "a",
                conditionalParameterSpecs=[
                    {
                        "parentCategoricalValues": {"values": ["a"]},
                        "parameterSpec": _double("y", 0, 1),
                    }
                ],
            ),
        ),
        "studySpec.parameters",
        "101 parameters (conditional ones included); at most 100",
    ),
]


@pytest.mark.parametrize(
    ("spec", "path", "problem"), [c[1:] for c in _CHECKS], ids=[c[0] for c in _CHECKS]
)
def test_check_study_spec_names_the_field_and_the_problem(
    spec: StudySpec, path: str, problem: str
) -> None:
    problems = check_study_spec(spec)
    assert [p for p, _ in problems] == [path], problems
    assert problem in problems[0][1]
    with pytest.raises(ValueError, match=re.escape(path)):
        Search(spec, 0)


def test_check_study_spec_accepts_what_the_search_runs() -> None:
    spec = _spec(
        _double("lr", 1e-5, 1, "UNIT_LOG_SCALE"),
        _integer("units", 16, 512, "UNIT_REVERSE_LOG_SCALE"),
        _discrete("d", 0.1, 0.2, 0.4, scaleType="UNIT_LOG_SCALE"),
        _categorical(
            "opt",
            "sgd",
            "adam",
            conditionalParameterSpecs=[
                {
                    "parentCategoricalValues": {"values": ["sgd"]},
                    "parameterSpec": _double("momentum", 0, 0.99),
                }
            ],
        ),
        medianAutomatedStoppingSpec={"useElapsedDuration": True},
    )
    assert check_study_spec(spec) == []
    grid = _spec(*[_integer(f"p{i}", 0, 10**15) for i in range(5)], algorithm="GRID_SEARCH")
    assert check_study_spec(grid) == []  # huge: it ends at maxTrialCount


def test_several_problems_are_all_reported() -> None:
    spec = _spec(_double("x", -1, -2, "UNIT_LOG_SCALE"), _double("x", 0, 1))
    paths = [p for p, _ in check_study_spec(spec)]
    assert paths == [
        "studySpec.parameters[0].doubleValueSpec.minValue",
        "studySpec.parameters[0].doubleValueSpec.minValue",
        "studySpec.parameters[1].parameterId",
    ]


# --- Arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (64.0, "--p=64"),
        (-3.0, "--p=-3"),
        (0.0, "--p=0"),
        (0.01, "--p=0.01"),
        (1e-05, "--p=1e-05"),
        (0.1 + 0.2, "--p=0.30000000000000004"),
        (1e20, "--p=100000000000000000000"),
        ("adam", "--p=adam"),
        (7, "--p=7"),
    ],
)
def test_argument_formats_values_as_trials_parse_them(value: float | str, expected: str) -> None:
    assert argument("p", value) == expected
    text = expected.split("=", 1)[1]
    if not isinstance(value, str):
        assert float(text) == value
        if float(value).is_integer():
            assert int(text) == value
