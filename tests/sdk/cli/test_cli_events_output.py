"""The monitoring commands' arguments and tables, without a server."""

import argparse
from datetime import UTC, datetime, timedelta

import pytest

from mldiag.cli import build_parser
from mldiag.cli.events import (
    duration,
    events_filter,
    probable_cause,
    render_goodput,
    time_argument,
)
from mldiag.cli.rules import apply_settings, render_rules, setting_argument


def test_times_are_rfc3339_or_ages() -> None:
    assert time_argument("2026-01-01T12:00:00Z") == "2026-01-01T12:00:00Z"
    assert time_argument("2026-01-01T12:00:00") == "2026-01-01T12:00:00Z"  # bare: UTC
    assert time_argument("2026-01-01T13:00:00+01:00") == "2026-01-01T13:00:00+01:00"
    two_hours_ago = datetime.fromisoformat(time_argument("2h").replace("Z", "+00:00"))
    assert abs(datetime.now(UTC) - timedelta(hours=2) - two_hours_ago) < timedelta(seconds=5)
    with pytest.raises(argparse.ArgumentTypeError):
        time_argument("yesterday")


def test_list_options_become_one_api_filter() -> None:
    assert events_filter() == ""
    assert events_filter(event_type="hang", state="OPEN", since="S", until="U") == (
        'type = HANG AND state = OPEN AND startTime >= "S" AND startTime <= "U"'
    )


def test_cells_for_people() -> None:
    assert [duration(s) for s in (0.5, 9.75, 45.5, 200, 7500)] == [
        "0.5s",
        "9.75s",
        "45.5s",
        "3m20s",
        "2h05m",
    ]
    assert duration(None) == ""
    reports = [
        {"analyzer": "a", "detectionState": "NOT_DETECTED"},
        {"analyzer": "b", "detectionState": "DETECTED"},
    ]
    assert probable_cause({"analyzerReports": reports}) == "b"
    assert probable_cause({"analyzerReports": reports[:1]}) == "none found"
    assert probable_cause({}) == ""


def test_json_flag_and_verbs_parse() -> None:
    parser = build_parser()
    args = parser.parse_args(["events", "list", "--json", "--state", "resolved"])
    assert (args.output_format, args.state) == ("json", "RESOLVED")
    assert parser.parse_args(["events", "list"]).output_format == "table"
    assert parser.parse_args(["runs", "goodput", "r1", "--json"]).output_format == "json"
    args = parser.parse_args(["rules", "set", "hang.floorSeconds=60", "--run", "r1"])
    assert (args.settings, args.run) == ([("hang", "floorSeconds", 60.0)], "r1")


def test_rule_settings_merge_into_overrides() -> None:
    assert setting_argument("hang.floorSeconds=60") == ("hang", "floorSeconds", 60.0)
    assert setting_argument("straggler.enabled=False") == ("straggler", "enabled", False)
    for bad in ("hang=1", "hang.floorSeconds", "hang.floorSeconds=soon", "hang.enabled=maybe"):
        with pytest.raises(argparse.ArgumentTypeError):
            setting_argument(bad)

    current = {"hang": {"enabled": None, "thresholds": {"floorSeconds": 60.0}}}
    merged = apply_settings(current, [("hang", "stepFactor", 5.0)], [])
    assert merged == {
        "hang": {"enabled": None, "thresholds": {"floorSeconds": 60.0, "stepFactor": 5.0}}
    }
    assert current["hang"]["thresholds"] == {"floorSeconds": 60.0}  # not changed in place
    assert apply_settings(merged, [], ["hang.floorSeconds", "hang.stepFactor"]) == {}
    assert apply_settings(merged, [("x", "enabled", False)], [], replace=True) == {
        "x": {"enabled": False, "thresholds": {}}
    }
    assert render_rules({}, "the project").startswith("no overrides for the project")


def test_goodput_table() -> None:
    answer = {
        "run": "projects/p/locations/l/machineLearningRuns/r1",
        "wallSeconds": 1000.0,
        "productiveSeconds": 85.75,
        "goodput": 0.08575,
        "steps": 11,
        "reference": "process 0",
        "buckets": [
            {"kind": "STARTUP", "seconds": 55.0, "fraction": 0.055},
            {"kind": "UNACCOUNTED", "seconds": 859.25, "fraction": 0.85925},
        ],
        "events": [
            {
                "event": "x/monitoredEvents/e1",
                "type": "HANG",
                "bucket": "DISRUPTIONS",
                "seconds": 200.0,
                "displayName": "no step for 10 min",
            },
        ],
    }
    text = render_goodput(answer)
    assert text.splitlines()[0] == (
        "run r1: goodput 8.6% (1m26s productive of 16m40s wall time; 11 steps, process 0)"
    )
    assert text.splitlines()[2:6] == [
        "BUCKET       SECONDS  SHARE",
        "PRODUCTIVE   85.75    8.6%",
        "STARTUP      55       5.5%",
        "UNACCOUNTED  859.25   85.9%",
    ]
    assert "e1        HANG  DISRUPTIONS  200" in text
