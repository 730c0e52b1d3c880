"""``mldiag configs``: show a run's configs and compare two runs' configs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mldiag.api_client import JsonObject
from mldiag.cli.common import Context, api_command_group, api_verb, run_argument
from mldiag.cli.output import render_table


def add_configs_commands(commands: Any) -> None:
    """Add ``configs`` to ``mldiag``'s commands."""
    _add_configs(api_command_group(commands, "configs", "compare runs' configs"), api_verb)


def _add_configs(verbs: Any, verb: Any) -> None:
    show = verb(
        verbs,
        "show",
        _configs_show,
        "show a run's configs, one dotted key per line",
        "The run's software, hardware and user configs with nested keys flattened to "
        "dotted ones; values keep their types (a string is quoted).",
    )
    show.add_argument("run", metavar="RUN", type=run_argument)
    diff = verb(
        verbs,
        "diff",
        _configs_diff,
        "compare two runs' configs",
        "How RUN_B's software, hardware and user configs differ from RUN_A's, nested keys "
        "flattened to dotted ones (the API compares: 1 equals 1.0, true does not). "
        "Exit status 0 whether or not they differ.",
    )
    diff.add_argument("run_a", metavar="RUN_A", type=run_argument)
    diff.add_argument("run_b", metavar="RUN_B", type=run_argument)
    diff.add_argument("--all", action="store_true", help="list unchanged keys too")


def _configs_show(ctx: Context, args: argparse.Namespace) -> int:
    answer = ctx.client.run_configs(args.run)
    rows = [(entry["section"], entry["key"], _value(entry["value"])) for entry in answer["entries"]]
    ctx.emit(answer, lambda: render_table(("SECTION", "KEY", "VALUE"), rows))
    return 0


def _configs_diff(ctx: Context, args: argparse.Namespace) -> int:
    answer = ctx.client.diff_configs(args.run_a, args.run_b, include_unchanged=args.all)
    ctx.emit(answer, lambda: render_diff(args.run_a, args.run_b, answer["differences"]))
    return 0


def render_diff(name_a: str, name_b: str, differences: list[JsonObject]) -> str:
    """The API's config diff for a person: a count line, then CHANGE, KEY and both values."""
    changed = [d for d in differences if d["change"] != "UNCHANGED"]
    if not changed:
        return f"configs of {name_a} and {name_b} are the same"
    counts = dict.fromkeys(("ADDED", "REMOVED", "CHANGED"), 0)
    for difference in changed:
        counts[difference["change"]] += 1
    head = f"configs of {name_a} → {name_b}: " + ", ".join(
        f"{count} {change.lower()}" for change, count in counts.items()
    )
    rows = (
        (
            d["change"].lower(),
            f"{d['section']}.{d['key']}",
            "" if d["change"] == "ADDED" else _value(d["baseValue"]),
            "" if d["change"] == "REMOVED" else _value(d["otherValue"]),
        )
        for d in differences
    )
    return f"{head}\n\n{render_table(('CHANGE', 'KEY', name_a, name_b), rows)}"


def _value(value: Any) -> str:
    # In a diff a string and a number that print alike must still look different.
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
