"""``mldiag configs diff``'s logic: flattening nested configs and classifying differences."""

import math

from mldiag.cli.diff import ConfigDifference, diff_configs, diff_flat, flatten, flatten_configs
from mldiag.cli.registry import render_diff


def test_flatten_dots_nested_dicts_and_keeps_leaves() -> None:
    assert flatten({"a": {"b": {"c": 1}, "d": [1, {"x": 2}]}, "e": {}, "f": None}) == {
        "a.b.c": 1,
        "a.d": [1, {"x": 2}],
        "e": {},
        "f": None,
    }


def test_flatten_configs_prefixes_sections_and_ignores_the_rest() -> None:
    run = {
        "configs": {
            "softwareConfigs": {"framework": "jax"},
            "hardwareConfigs": {"slices": 2},
            "userConfigs": {"opt": {"lr": 0.1}},
            "other": {"x": 1},
        }
    }
    assert flatten_configs(run) == {
        "softwareConfigs.framework": "jax",
        "hardwareConfigs.slices": 2,
        "userConfigs.opt.lr": 0.1,
    }
    assert flatten_configs({}) == {}
    assert flatten_configs({"configs": {"userConfigs": None}}) == {}


def test_diff_classifies_added_removed_changed_sorted_by_key() -> None:
    a = {"same": 1, "gone": "x", "lr": 0.1, "nan": math.nan, "int": 1, "flag": True}
    b = {"same": 1, "new": [1], "lr": 0.2, "nan": math.nan, "int": 1.0, "flag": 1}
    assert diff_flat(a, b) == [
        ConfigDifference("flag", "changed", a=True, b=1),  # true is not 1
        ConfigDifference("gone", "removed", a="x"),
        ConfigDifference("lr", "changed", a=0.1, b=0.2),
        ConfigDifference("new", "added", b=[1]),
    ]


def test_a_subtree_turned_scalar_shows_as_removed_keys_and_an_added_one() -> None:
    run_a = {"configs": {"userConfigs": {"opt": {"lr": 0.1, "beta": 0.9}}}}
    run_b = {"configs": {"userConfigs": {"opt": "sgd"}}}
    assert [(d.change, d.key) for d in diff_configs(run_a, run_b)] == [
        ("added", "userConfigs.opt"),
        ("removed", "userConfigs.opt.beta"),
        ("removed", "userConfigs.opt.lr"),
    ]


def test_difference_as_json_leaves_out_the_missing_side() -> None:
    assert ConfigDifference("k", "added", b=1).as_json() == {"key": "k", "change": "added", "b": 1}
    assert ConfigDifference("k", "removed", a=None).as_json() == {
        "key": "k",
        "change": "removed",
        "a": None,
    }


def test_render_diff() -> None:
    differences = [
        ConfigDifference("userConfigs.lr", "changed", a=0.1, b=0.2),
        ConfigDifference("userConfigs.name", "added", b="adam"),
        ConfigDifference("userConfigs.n", "removed", a="1"),
    ]
    assert render_diff("a", "b", differences).splitlines() == [
        "configs of a → b: 1 added, 1 removed, 1 changed",
        "",
        "CHANGE   KEY               a    b",
        "changed  userConfigs.lr    0.1  0.2",
        'added    userConfigs.name       "adam"',
        'removed  userConfigs.n     "1"',
    ]
    assert render_diff("a", "b", []) == "configs of a and b are the same"
