"""Overrides of the detection rules on the command line: ``rules show|set``, for the project
(``/monitoringRules``) or, with ``--run``, for one run (its ``monitoring`` field).

Rules not named keep their defaults (docs/monitoring.md lists every rule and threshold).
"""

from __future__ import annotations

import argparse
import copy
import sys
from typing import TYPE_CHECKING, Any

from mldiag.api_client import JsonObject
from mldiag.cli.common import api_command_group, api_verb, run_argument
from mldiag.cli.output import cell, render_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from mldiag.cli.common import Context

    Verb = Callable[..., argparse.ArgumentParser]

Setting = tuple[str, str, float | bool]
"""(rule, threshold or ``enabled``, value)."""


def setting_argument(text: str) -> Setting:
    """``RULE.THRESHOLD=NUMBER`` or ``RULE.enabled=true|false``."""
    key, sep, raw = text.partition("=")
    rule, dot, name = key.strip().partition(".")
    if not sep or not dot or not rule or not name:
        raise argparse.ArgumentTypeError(
            f"expected RULE.THRESHOLD=VALUE (e.g. hang.floorSeconds=60), got {text!r}"
        )
    if name == "enabled":
        if raw.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{key} takes true or false, got {raw!r}")
        return rule, name, raw.lower() == "true"
    try:
        return rule, name, float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{key} takes a number, got {raw!r}") from None


def apply_settings(
    rules: JsonObject, settings: list[Setting], unset: list[str], *, replace: bool = False
) -> JsonObject:
    """``rules`` (rule → override) with ``unset`` removed (``RULE`` or ``RULE.NAME``) and
    ``settings`` applied; rules left with nothing to override are dropped."""
    result: JsonObject = {} if replace else copy.deepcopy(rules)
    for item in unset:
        rule, _, name = item.partition(".")
        if not name:
            result.pop(rule, None)
        elif rule in result:
            if name == "enabled":
                result[rule]["enabled"] = None
            else:
                (result[rule].get("thresholds") or {}).pop(name, None)
    for rule, name, value in settings:
        override = result.setdefault(rule, {"enabled": None, "thresholds": {}})
        if name == "enabled":
            override["enabled"] = value
        else:
            override.setdefault("thresholds", {})[name] = value
    return {
        rule: override
        for rule, override in result.items()
        if override.get("enabled") is not None or override.get("thresholds")
    }


def render_rules(rules: JsonObject, scope: str) -> str:
    """Overrides as a table of RULE, SETTING, VALUE."""
    if not rules:
        return f"no overrides for {scope}: every rule keeps its defaults (docs/monitoring.md)"
    rows: list[tuple[str, str, str]] = []
    for rule in sorted(rules):
        override = rules[rule]
        if override.get("enabled") is not None:
            rows.append((rule, "enabled", cell(override["enabled"])))
        rows += [
            (rule, name, cell(value))
            for name, value in sorted(override.get("thresholds", {}).items())
        ]
    return f"overrides for {scope}\n\n{render_table(('RULE', 'SETTING', 'VALUE'), rows)}"


def add_rules_commands(commands: Any) -> None:
    """Add ``rules`` to ``mldiag``'s commands."""
    verbs = api_command_group(commands, "rules", "override the detection rules' thresholds")
    _add_rules_verbs(verbs, api_verb)


def _add_rules_verbs(verbs: Any, verb: Verb) -> None:
    """``rules show`` and ``rules set``."""
    show = verb(verbs, "show", _rules_show, "show the overrides of the detection rules")
    show.add_argument(
        "--run", metavar="RUN", type=run_argument, help="a run's overrides [the project's]"
    )

    change = verb(
        verbs,
        "set",
        _rules_set,
        "override detection rules' thresholds, or switch rules off",
        "Set thresholds (hang.floorSeconds=60) or switch a rule (straggler.enabled=false) "
        "for the project, or with --run for one run; other overrides are kept unless "
        "--replace. The detector applies run, then project overrides, then the defaults.",
    )
    change.add_argument(
        "settings", metavar="RULE.NAME=VALUE", nargs="*", type=setting_argument, default=[]
    )
    change.add_argument(
        "--run", metavar="RUN", type=run_argument, help="one run's overrides [the project's]"
    )
    change.add_argument(
        "--unset",
        action="append",
        default=[],
        metavar="RULE[.NAME]",
        help="drop an override (a rule's, or one threshold) (repeatable)",
    )
    change.add_argument("--replace", action="store_true", help="drop every other override")


def _scope(args: argparse.Namespace) -> str:
    return f"run {args.run}" if args.run else "the project"


def _rules_show(ctx: Context, args: argparse.Namespace) -> int:
    if args.run:
        answer: JsonObject = ctx.client.get_run(args.run).get("monitoring") or {"rules": {}}
    else:
        answer = ctx.client.get_monitoring_rules()
    ctx.emit(answer, lambda: render_rules(answer.get("rules") or {}, _scope(args)))
    return 0


def _rules_set(ctx: Context, args: argparse.Namespace) -> int:
    if not args.settings and not args.unset and not args.replace:
        print(
            "mldiag rules set: error: nothing to change: give RULE.NAME=VALUE, --unset or"
            " --replace",
            file=sys.stderr,
        )
        return 2
    if args.run:
        run = ctx.client.get_run(args.run)
        current = (run.get("monitoring") or {}).get("rules") or {}
        rules = apply_settings(current, args.settings, args.unset, replace=args.replace)
        operation = ctx.client.update_run(
            args.run,
            {"etag": run.get("etag", ""), "monitoring": {"rules": rules}},
            update_mask="monitoring",
        )
        answer: JsonObject = (operation.get("response") or {}).get("monitoring") or {}
    else:
        current = ctx.client.get_monitoring_rules().get("rules") or {}
        rules = apply_settings(current, args.settings, args.unset, replace=args.replace)
        answer = ctx.client.set_monitoring_rules(rules)
    ctx.emit(answer, lambda: render_rules(answer.get("rules") or {}, _scope(args)))
    return 0
