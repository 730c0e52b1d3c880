"""The CLI's renderers: aligned tables, cells, and the YAML emitter (checked with PyYAML)."""

import json
import math

import pytest
import yaml

from mldiag.cli.metrics import series_label
from mldiag.cli.output import (
    cell,
    dump,
    labels_cell,
    render_fields,
    render_table,
    short_time,
    to_yaml,
)
from mldiag.cli.runs import run_row


def test_table_aligns_columns_and_trims_trailing_space() -> None:
    text = render_table(("ID", "NAME", "X"), [("a", "long name", ""), ("bbbb", "n", "1")])
    assert text.splitlines() == [
        "ID    NAME       X",
        "a     long name",
        "bbbb  n          1",
    ]
    assert render_table(("ONLY",), []) == "ONLY"


def test_fields_align_keys() -> None:
    assert render_fields([("a", "1"), ("longer", "2"), ("empty", "")]) == (
        "a       1\nlonger  2\nempty"
    )
    assert render_fields([]) == ""


def test_cells() -> None:
    assert cell(None) == ""
    assert cell("text") == "text"
    assert cell(3) == "3"
    assert cell(0.1) == "0.1"
    assert (cell(math.nan), cell(math.inf), cell(-math.inf)) == ("NaN", "Infinity", "-Infinity")
    assert cell(True) == "true"
    assert cell({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert short_time("2026-01-02T03:04:05.123456Z") == "2026-01-02 03:04:05"
    assert short_time(None) == ""
    assert labels_cell({"b": "2", "a": "1"}) == "a=1,b=2"
    assert labels_cell({}) == ""


def test_run_row_and_series_label() -> None:
    run = {
        "runId": "r1",
        "displayName": "first",
        "runSet": "s",
        "runPhase": "ACTIVE",
        "createTime": "2026-01-02T03:04:05Z",
        "labels": {"team": "ml"},
    }
    assert run_row(run) == ("r1", "first", "s", "ACTIVE", "2026-01-02 03:04:05", "team=ml")
    assert series_label({"host": "h0", "processIndex": 0, "labels": {"d": "1"}}) == "h0 p0 d=1"
    assert series_label({"host": None, "labels": None}) == "all"


@pytest.mark.parametrize(
    "data",
    [
        {"a": 1, "b": "two", "c": None, "d": True, "e": [], "f": {}},
        {"list": [1, "x", {"k": "v", "n": [1, 2]}, [3, 4], []], "nested": {"deep": {"x": 1.5}}},
        {"strings": ["yes", "no", "null", "", "1", "1.5", "a: b", "#x", "- y", "ü", 'q"uote', "~"]},
        {
            "name": "projects/default/locations/local/machineLearningRuns/r",
            "t": "2026-01-01T00:00:00Z",
        },
        [{"a": 1}, {"b": [{"c": 2}]}],
        "scalar",
        {"key with space": 1, "123": "numeric key", "true": 1},
    ],
)
def test_yaml_round_trips_through_pyyaml(data: object) -> None:
    assert yaml.safe_load(to_yaml(data)) == data


def test_yaml_writes_non_finite_numbers() -> None:
    loaded = yaml.safe_load(to_yaml({"nan": math.nan, "inf": math.inf, "ninf": -math.inf}))
    assert math.isnan(loaded["nan"])
    assert (loaded["inf"], loaded["ninf"]) == (math.inf, -math.inf)


def test_json_keeps_the_api_tokens() -> None:
    text = dump({"v": math.nan, "w": math.inf}, "json")
    assert "NaN" in text and "Infinity" in text
    assert math.isnan(json.loads(text)["v"])
