"""``mldiag configs diff``'s rendering of the API's diff, and the CLI's flattening."""

from mldiag.cli.configs import render_diff
from mldiag.cli.output import flatten


def test_flatten_dots_nested_dicts_and_keeps_leaves() -> None:
    assert flatten({"a": {"b": {"c": 1}, "d": [1, {"x": 2}]}, "e": {}, "f": None}) == {
        "a.b.c": 1,
        "a.d": [1, {"x": 2}],
        "e": {},
        "f": None,
    }


def _difference(
    key: str, change: str, base: object = None, other: object = None
) -> dict[str, object]:
    return {
        "section": "userConfigs",
        "key": key,
        "change": change,
        "baseValue": base,
        "otherValue": other,
    }


def test_render_diff() -> None:
    differences = [
        _difference("lr", "CHANGED", 0.1, 0.2),
        _difference("name", "ADDED", other="adam"),
        _difference("n", "REMOVED", base="1"),
        _difference("seed", "UNCHANGED", 1, 1),
    ]
    assert render_diff("a", "b", differences).splitlines() == [
        "configs of a → b: 1 added, 1 removed, 1 changed",
        "",
        "CHANGE     KEY               a    b",
        "changed    userConfigs.lr    0.1  0.2",
        'added      userConfigs.name       "adam"',
        'removed    userConfigs.n     "1"',
        "unchanged  userConfigs.seed  1    1",
    ]
    assert render_diff("a", "b", []) == "configs of a and b are the same"
    assert render_diff("a", "b", differences[3:]) == "configs of a and b are the same"
