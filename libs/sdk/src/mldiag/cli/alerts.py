"""``mldiag alerts``: notification channels, the alert rules that route workload events to
them, and the delivery history, from the command line.

``channels create|list|describe|delete|test``, ``rules create|list|describe|delete`` and
``deliveries list`` call the alerts API (the notifier, behind the one base URL). A channel's
secrets can come from ``--secret-file KEY=PATH`` or ``--secret-stdin KEY`` so that they stay
out of the shell's history; the API never shows them again, only their names.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mldiag.alerts_api import CHANNELS, DELIVERIES, RULES, AlertsClient, deliveries_filter
from mldiag.api_client import ApiError, JsonObject
from mldiag.cli.common import (
    Context,
    UsageError,
    add_global_options,
    resource_argument,
    run_argument,
)
from mldiag.cli.jobs import parse_key_values
from mldiag.cli.output import labels_cell, short_time
from mldiag.cli.resources import (
    client_kwargs,
    emit_deleted,
    emit_fields,
    emit_list,
    list_all,
    positive,
    read_config,
    resource_id,
)

KINDS = ("webhook", "slack", "email", "alertmanager", "apprise")
"""Channel kinds, as the ``--kind`` flag takes them (the API's are upper case)."""
STATES = ("PENDING", "RETRYING", "DELIVERED", "SUPPRESSED", "DEAD")
"""Delivery states ``deliveries list --state`` takes."""
SEVERITIES = ("INFO", "WARNING", "CRITICAL")
"""Event severities, least first."""

Verbs = Callable[[str, Callable[[Context, argparse.Namespace], int], str], argparse.ArgumentParser]
"""Adds one verb to a resource of ``alerts``: ``verb(name, handler, help)``."""


def _alerts(ctx: Context, args: argparse.Namespace) -> AlertsClient:
    return AlertsClient(**client_kwargs(ctx, args))


Handler = Callable[[Context, argparse.Namespace], int]


def _explained(handler: Handler) -> Handler:
    """``handler``, its API errors carrying what each field's problem is: a refused body
    says "the NotificationChannel body is not valid" and puts the reasons in ``details``."""

    def run(ctx: Context, args: argparse.Namespace) -> int:
        try:
            return handler(ctx, args)
        except ApiError as error:
            problems = [
                str(detail["problem"])
                for detail in error.details
                if isinstance(detail, dict) and detail.get("problem")
            ]
            if not problems:
                raise
            message = f"{error.message}: {'; '.join(problems)}"
            raise ApiError(error.status, error.code, message, error.details) from None

    return run


def _split(texts: Iterable[str]) -> list[str]:
    return [item.strip() for text in texts for item in text.split(",") if item.strip()]


# the parser


def add_alerts_commands(commands: Any) -> None:
    """Add ``alerts`` (``channels``, ``rules``, ``deliveries``)."""
    options = argparse.ArgumentParser(add_help=False)
    add_global_options(options, suppress=True)
    text = "send workload events to people and systems: channels, rules, deliveries"
    resources = commands.add_parser("alerts", help=text, description=text).add_subparsers(
        dest="verb", required=True, metavar="RESOURCE"
    )

    def group(name: str, help_text: str) -> Verbs:
        verbs = resources.add_parser(name, help=help_text, description=help_text)
        actions = verbs.add_subparsers(dest="action", required=True, metavar="VERB")

        def verb(
            action: str, handler: Callable[[Context, argparse.Namespace], int], what: str
        ) -> argparse.ArgumentParser:
            parser: argparse.ArgumentParser = actions.add_parser(
                action, parents=[options], help=what, description=what
            )
            parser.set_defaults(api_handler=_explained(handler))
            return parser

        return verb

    _add_channels(group("channels", "where notifications go (webhook, Slack, email, ...)"))
    _add_rules(group("rules", "which events go to which channels"))
    deliveries = group("deliveries", "the history of notifications sent (or not)")
    listing = deliveries("list", _list_deliveries, "list deliveries, newest first")
    listing.add_argument("--event", default="", metavar="EVENT_ID", help="of this event")
    listing.add_argument(
        "--run", default="", metavar="RUN", type=run_argument, help="of this run's events"
    )
    listing.add_argument("--channel", default="", metavar="ID", help="through this channel")
    listing.add_argument("--state", default="", type=str.upper, choices=STATES)
    listing.add_argument("--limit", type=positive, help="at most this many [all]")


def _add_channels(verb: Verbs) -> None:
    create = verb(
        "create",
        _create_channel,
        "create a channel; secrets are stored encrypted and never shown again",
    )
    create.add_argument("--kind", type=str.lower, choices=KINDS, help="how it delivers")
    create.add_argument("--display-name", help="shown to people")
    create.add_argument("--id", default="", help="its id [made from the display name]")
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting that is not secret, e.g. url=https://hooks.example.com/mldiag",
    )
    create.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a secret setting (it lands in the shell's history: prefer the two below)",
    )
    create.add_argument(
        "--secret-file",
        action="append",
        default=[],
        metavar="KEY=PATH",
        help="a secret setting read from a file (its last newline dropped)",
    )
    create.add_argument(
        "--secret-stdin",
        metavar="KEY",
        help="a secret setting read from standard input",
    )
    create.add_argument(
        "--from-file",
        type=Path,
        metavar="FILE",
        help="a YAML or JSON channel (displayName, kind, config, secrets); flags override it",
    )
    create.add_argument("--disabled", action="store_true", help="create it switched off")
    verb("list", _list_channels, "list channels")
    for action, handler, what in (
        ("describe", _describe_channel, "show a channel (its secrets' names only)"),
        ("delete", _delete_channel, "delete a channel no rule names"),
        ("test", _test_channel, "send a TEST notification through a channel now"),
    ):
        verb(action, handler, what).add_argument(
            "channel", metavar="CHANNEL", type=resource_argument(CHANNELS), help="id or name"
        )


def _add_rules(verb: Verbs) -> None:
    create = verb("create", _create_rule, "create an alert rule")
    create.add_argument("--display-name", required=True, help="shown to people")
    create.add_argument("--id", default="", help="its id [made from the display name]")
    create.add_argument(
        "--channel",
        action="append",
        required=True,
        metavar="ID",
        help="a channel it delivers to (repeat, or comma-separated)",
    )
    create.add_argument(
        "--event-type",
        action="append",
        default=[],
        metavar="TYPE",
        help="an event type it routes, e.g. HANG (repeat; none: every type)",
    )
    create.add_argument(
        "--min-severity", type=str.upper, choices=SEVERITIES, help="least severity [WARNING]"
    )
    create.add_argument(
        "--run-set",
        action="append",
        default=[],
        metavar="NAME",
        help="a run set it routes (repeat; none: every run)",
    )
    create.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run label that must be present with this value (repeat)",
    )
    create.add_argument(
        "--no-resolve", action="store_true", help="do not notify when an event resolves"
    )
    create.add_argument(
        "--group-window",
        type=float,
        metavar="SECONDS",
        help="fold a run's further events opening within this long into one notification [60]",
    )
    create.add_argument(
        "--max-per-hour",
        type=positive,
        metavar="N",
        help="notifications per channel per hour; beyond, SUPPRESSED [30]",
    )
    create.add_argument("--disabled", action="store_true", help="create it switched off")
    verb("list", _list_rules, "list alert rules")
    for action, handler, what in (
        ("describe", _describe_rule, "show an alert rule"),
        ("delete", _delete_rule, "delete an alert rule"),
    ):
        verb(action, handler, what).add_argument(
            "rule", metavar="RULE", type=resource_argument(RULES), help="id or name"
        )


# channels


def build_channel(args: argparse.Namespace, stdin: Any = None) -> JsonObject:
    """The channel ``channels create``'s flags (over ``--from-file``'s) describe."""
    channel: JsonObject = read_config(args.from_file, "a channel") if args.from_file else {}
    if args.display_name:
        channel["displayName"] = args.display_name
    if args.kind:
        channel["kind"] = args.kind.upper()
    elif isinstance(channel.get("kind"), str):
        channel["kind"] = channel["kind"].upper()
    if args.disabled:
        channel["enabled"] = False
    config = _mapping_of(channel, "config")
    config.update(_pairs(args.config, "--config"))
    secrets = _mapping_of(channel, "secrets")
    secrets.update(_pairs(args.secret, "--secret"))
    for key, path in _pairs(args.secret_file, "--secret-file").items():
        secrets[key] = _read_secret(Path(path), f"--secret-file {key}")
    if args.secret_stdin:
        value = (stdin or sys.stdin).read().removesuffix("\n")
        if not value:
            raise UsageError(f"--secret-stdin {args.secret_stdin}: standard input is empty")
        secrets[args.secret_stdin] = value
    channel["config"], channel["secrets"] = config, secrets
    for needed, flag in (("displayName", "--display-name"), ("kind", "--kind")):
        if not channel.get(needed):
            raise UsageError(f"{flag} is required (or {needed} in --from-file)")
    return channel


def _pairs(texts: Iterable[str], flag: str) -> dict[str, str]:
    # One KEY=VALUE per flag: a URL, a list of recipients or a secret may hold a comma.
    pairs: dict[str, str] = {}
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag}: expected KEY=VALUE, got {key.strip() or text!r}=…")
        pairs[key.strip()] = value
    return pairs


def _mapping_of(body: JsonObject, key: str) -> dict[str, str]:
    value = body.get(key) or {}
    if not isinstance(value, dict):
        raise UsageError(f"--from-file: {key} must be a mapping")
    return {str(name): str(item) for name, item in value.items()}


def _read_secret(path: Path, what: str) -> str:
    try:
        value = path.read_text().removesuffix("\n")
    except OSError as error:
        raise UsageError(f"{what}: {error.strerror or error}") from None
    if not value:
        raise UsageError(f"{what}: {path} is empty")
    return value


def _create_channel(ctx: Context, args: argparse.Namespace) -> int:
    channel = build_channel(args)
    channel_id = args.id or str(channel.pop("channelId", "") or "")
    with _alerts(ctx, args) as alerts:
        created = alerts.create_channel(channel, channel_id)
    kind, secret_keys = created.get("kind", ""), created.get("secretKeys") or []
    kept = f"; secrets kept: {', '.join(secret_keys)}" if secret_keys else ""
    ctx.emit(created, lambda: f"created {str(kind).lower()} channel {resource_id(created)}{kept}")
    return 0


def _channel_target(channel: JsonObject) -> str:
    config = channel.get("config") or {}
    return str(config.get("url") or config.get("to") or "")


def _list_channels(ctx: Context, args: argparse.Namespace) -> int:
    with _alerts(ctx, args) as alerts:
        channels = list(alerts.iter_channels())
    return emit_list(
        ctx,
        CHANNELS,
        channels,
        ("ID", "KIND", "DISPLAY NAME", "ENABLED", "TARGET", "SECRETS"),
        lambda channel: (
            resource_id(channel),
            str(channel.get("kind", "")),
            str(channel.get("displayName", "")),
            "yes" if channel.get("enabled", True) else "no",
            _channel_target(channel),
            ",".join(channel.get("secretKeys") or []),
        ),
        "no notification channels",
    )


def _describe_channel(ctx: Context, args: argparse.Namespace) -> int:
    with _alerts(ctx, args) as alerts:
        return emit_fields(ctx, alerts.get_channel(args.channel))


def _delete_channel(ctx: Context, args: argparse.Namespace) -> int:
    with _alerts(ctx, args) as alerts:
        answer = alerts.delete_channel(args.channel)
    return emit_deleted(ctx, answer, args.channel, CHANNELS, "channel")


def _test_channel(ctx: Context, args: argparse.Namespace) -> int:
    with _alerts(ctx, args) as alerts:
        outcome = alerts.test_channel(args.channel)
    name = args.channel.rsplit("/", 1)[-1]
    delivered = bool(outcome.get("delivered"))
    if delivered:
        ctx.emit(outcome, lambda: f"delivered a TEST notification through {name}")
        return 0
    ctx.emit(outcome, lambda: "")
    print(f"error: not delivered through {name}: {outcome.get('error', '')}", file=sys.stderr)
    return 1


# rules


def build_rule(args: argparse.Namespace) -> JsonObject:
    """The alert rule ``rules create``'s flags describe (unset criteria left to the API)."""
    rule: JsonObject = {"displayName": args.display_name, "channels": _split(args.channel)}
    if args.event_type:
        rule["eventTypes"] = [kind.upper() for kind in _split(args.event_type)]
    if args.min_severity:
        rule["minSeverity"] = args.min_severity
    if args.run_set:
        rule["runSets"] = _split(args.run_set)
    if args.label:
        rule["labels"] = parse_key_values(args.label, "--label")
    if args.no_resolve:
        rule["notifyOnResolve"] = False
    if args.group_window is not None:
        rule["groupWindowSeconds"] = args.group_window
    if args.max_per_hour is not None:
        rule["maxPerHour"] = args.max_per_hour
    if args.disabled:
        rule["enabled"] = False
    if not rule["channels"]:
        raise UsageError("--channel names no channel")
    return rule


def _create_rule(ctx: Context, args: argparse.Namespace) -> int:
    with _alerts(ctx, args) as alerts:
        created = alerts.create_rule(build_rule(args), args.id)
    channels = ", ".join(created.get("channels") or [])
    ctx.emit(created, lambda: f"created alert rule {resource_id(created)} (to {channels})")
    return 0


def _list_rules(ctx: Context, args: argparse.Namespace) -> int:
    with _alerts(ctx, args) as alerts:
        rules = list(alerts.iter_rules())
    return emit_list(
        ctx,
        RULES,
        rules,
        ("ID", "DISPLAY NAME", "ENABLED", "CHANNELS", "EVENT TYPES", "MIN SEVERITY", "RUNS"),
        lambda rule: (
            resource_id(rule),
            str(rule.get("displayName", "")),
            "yes" if rule.get("enabled", True) else "no",
            ",".join(rule.get("channels") or []),
            ",".join(rule.get("eventTypes") or []) or "all",
            str(rule.get("minSeverity", "")),
            _runs_cell(rule),
        ),
        "no alert rules",
    )


def _runs_cell(rule: JsonObject) -> str:
    parts = [f"set={name}" for name in rule.get("runSets") or []]
    labels = labels_cell(rule.get("labels"))
    return ",".join([*parts, *([labels] if labels else [])]) or "all"


def _describe_rule(ctx: Context, args: argparse.Namespace) -> int:
    with _alerts(ctx, args) as alerts:
        return emit_fields(ctx, alerts.get_rule(args.rule))


def _delete_rule(ctx: Context, args: argparse.Namespace) -> int:
    with _alerts(ctx, args) as alerts:
        answer = alerts.delete_rule(args.rule)
    return emit_deleted(ctx, answer, args.rule, RULES, "alert rule")


# deliveries


def _list_deliveries(ctx: Context, args: argparse.Namespace) -> int:
    query = deliveries_filter(
        event_id=args.event, run_id=args.run, channel=args.channel, state=args.state
    )
    with _alerts(ctx, args) as alerts:
        deliveries = list_all(alerts.iter_deliveries(filter=query), args.limit)
    return emit_list(
        ctx,
        DELIVERIES,
        deliveries,
        ("CREATED", "KIND", "STATE", "ATTEMPTS", "CHANNEL", "RULE", "RUN", "EVENT", "LAST ERROR"),
        lambda delivery: (
            short_time(delivery.get("createTime")),
            str(delivery.get("kind", "")),
            str(delivery.get("state", "")),
            str(delivery.get("attempts", 0)),
            str(delivery.get("channel", "")),
            str(delivery.get("rule", "")),
            str(delivery.get("runId", "")),
            str(delivery.get("eventId") or ""),
            str(delivery.get("lastError", ""))[:80],
        ),
        "no deliveries",
    )
