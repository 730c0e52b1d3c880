"""Workload monitoring on the command line: ``events list|describe`` and ``runs goodput``.

Tables for people, the API's bodies with ``--json`` (or ``--format json|yaml``).
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from mldiag.api_client import JsonObject
from mldiag.cli.common import (
    RUNS,
    api_command_group,
    api_verb,
    resource_argument,
    run_argument,
    same_parent,
)
from mldiag.cli.output import add_json_flag, cell, render_fields, render_table, short_time

if TYPE_CHECKING:
    from collections.abc import Callable

    from mldiag.cli.common import Context

    Verb = Callable[..., argparse.ArgumentParser]

EVENT_STATES = ("OPEN", "RESOLVED")
"""The states ``--state`` accepts."""

EVENT_COLUMNS = ("EVENT ID", "RUN", "TYPE", "SEVERITY", "STATE", "STARTED", "LOST", "CAUSE")
"""The columns of ``mldiag events list`` (the one-line summary follows)."""

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_USAGE = 2


def time_argument(text: str) -> str:
    """``--since``/``--until``: an RFC 3339 time, or an age such as ``30m``, ``2h``, ``1d``
    (that long before now), as the RFC 3339 time the API's filter takes."""
    match = _RELATIVE.match(text.strip())
    if match:
        age = timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
        return (datetime.now(UTC) - age).isoformat(timespec="seconds").replace("+00:00", "Z")
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an RFC 3339 time (2026-01-01T12:00:00Z) or an age (30m, 2h, 1d),"
            f" got {text!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)  # a person's bare time: read as UTC
    return parsed.isoformat().replace("+00:00", "Z")


def events_filter(
    *,
    event_type: str | None = None,
    state: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> str:
    """The API filter the ``events list`` options describe (AND of each one given)."""
    terms = []
    if event_type:
        terms.append(f"type = {event_type.upper()}")
    if state:
        terms.append(f"state = {state.upper()}")
    if since:
        terms.append(f'startTime >= "{since}"')
    if until:
        terms.append(f'startTime <= "{until}"')
    return " AND ".join(terms)


def duration(seconds: Any) -> str:
    """Seconds for a person: ``45.5s``, ``3m20s``, ``2h05m``."""
    if not isinstance(seconds, int | float):
        return ""
    if seconds < 60:
        return f"{seconds:.3g}s" if seconds < 10 else f"{seconds:.1f}".rstrip("0").rstrip(".") + "s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def probable_cause(event: JsonObject) -> str:
    """The top-ranked DETECTED report's analyzer; ``none found`` when the analysis found
    nothing; empty before any analysis."""
    reports = event.get("analyzerReports") or []
    for report in reports:
        if report.get("detectionState") == "DETECTED":
            return str(report.get("analyzer", ""))
    return "none found" if reports else ""


def event_row(event: JsonObject) -> tuple[str, ...]:
    """One event as a row of ``mldiag events list``."""
    return (
        cell(event.get("eventId")),
        cell(event.get("runId")),
        cell(event.get("type")),
        cell(event.get("severity")),
        cell(event.get("state")),
        short_time(event.get("startTime")),
        duration(event.get("timeLostSeconds")),
        probable_cause(event),
        cell(event.get("displayName")),
    )


def add_events_commands(commands: Any) -> None:
    """Add ``events`` (also ``monitored-events``) to ``mldiag``'s commands."""
    verbs = api_command_group(
        commands,
        "events",
        "list and describe workload events",
        aliases=("monitored-events",),
    )
    _add_events_verbs(verbs, api_verb)


def _add_events_verbs(verbs: Any, verb: Verb) -> None:
    """``events list`` and ``events describe``."""
    listing = verb(
        verbs,
        "list",
        _events_list,
        "list workload events (newest first)",
        "The events the detector opened, of one run or of every run of the project, with "
        "the probable cause once the analyzer has reported.",
    )
    listing.add_argument("--run", metavar="RUN", type=run_argument, help="only this run's events")
    listing.add_argument("--type", dest="event_type", metavar="TYPE", help="e.g. HANG")
    listing.add_argument("--state", choices=EVENT_STATES, type=str.upper)
    listing.add_argument(
        "--since", type=time_argument, metavar="TIME", help="started at or after (or 2h)"
    )
    listing.add_argument(
        "--until", type=time_argument, metavar="TIME", help="started at or before (or 30m)"
    )
    listing.add_argument("--filter", default="", help="more API filter terms, ANDed")
    listing.add_argument("--page-size", type=int, help="events per page [50]")
    listing.add_argument("--page-token", default="", help="continue from a page")
    listing.add_argument("--all", action="store_true", help="follow every page")
    add_json_flag(listing)

    describe = verb(
        verbs,
        "describe",
        _events_describe,
        "show one event with its evidence and analyzer reports",
    )
    describe.add_argument(
        "event",
        metavar="EVENT",
        type=resource_argument("monitoredEvents", parent=RUNS),
        help="event id, or its full name",
    )
    describe.add_argument(
        "--run", metavar="RUN", type=run_argument, help="the event's run (with an event id)"
    )
    add_json_flag(describe)


def add_goodput_verb(verbs: Any, verb: Verb) -> None:
    """``runs goodput``."""
    goodput = verb(
        verbs,
        "goodput",
        _runs_goodput,
        "productive time against wall time, and where the rest went",
        "The run's wall time split into productive step time and lost time: STARTUP, "
        "DATA_LOADING, CHECKPOINTING, DISRUPTIONS, EVENTS and UNACCOUNTED (docs/events.md).",
    )
    goodput.add_argument("run", metavar="RUN", type=run_argument)
    add_json_flag(goodput)


# events


def _events_list(ctx: Context, args: argparse.Namespace) -> int:
    text = events_filter(
        event_type=args.event_type, state=args.state, since=args.since, until=args.until
    )
    if args.filter:
        text = f"{text} AND ({args.filter})" if text else args.filter
    query = {"run_id": args.run, "filter": text, "page_size": args.page_size}
    if args.all:
        page: JsonObject = {"events": list(ctx.client.iter_events(**query)), "nextPageToken": ""}
    else:
        page = ctx.client.list_events(**query, page_token=args.page_token)
    events = page.get("events", [])

    def table() -> str:
        if not events:
            return "no events"
        text = render_table((*EVENT_COLUMNS, "SUMMARY"), (event_row(e) for e in events))
        if token := page.get("nextPageToken"):
            text += f"\n\nmore events: --page-token {token} (or --all)"
        return text

    ctx.emit(page, table)
    return 0


def _events_describe(ctx: Context, args: argparse.Namespace) -> int:
    run = same_parent(args.event, args.run, "--run")
    if not run:
        print(
            "mldiag events describe: error: give --run RUN with an event id"
            " (or the event's full name)",
            file=sys.stderr,
        )
        return _USAGE
    event = ctx.client.get_event(args.event, run_id=run)
    ctx.emit(event, lambda: describe_event(event))
    return 0


def _value_and_step(step: Any, value: Any) -> str:
    if step is None:
        return ""
    return f"{step} (value {cell(value)})" if value is not None else str(step)


def _evidence_lines(evidence: JsonObject) -> list[str]:
    fields = [
        ("metric", cell(evidence.get("metric"))),
        ("host", cell(evidence.get("host"))),
        (
            "first bad step",
            _value_and_step(evidence.get("firstBadStep"), evidence.get("firstBadValue")),
        ),
        (
            "last good step",
            _value_and_step(evidence.get("lastGoodStep"), evidence.get("lastGoodValue")),
        ),
        *((f"facts.{key}", cell(value)) for key, value in (evidence.get("facts") or {}).items()),
    ]
    lines = ["  " + line for line in render_fields((k, v) for k, v in fields if v).splitlines()]
    windows = evidence.get("windows") or []
    if windows:
        rows = [
            (
                cell(w.get("metric")),
                cell(w.get("host")) or "all",
                _steps(w.get("startStep"), w.get("endStep")),
                cell(w.get("observed")),
                cell(w.get("baseline")),
                cell(w.get("count")),
            )
            for w in windows
        ]
        table = render_table(("METRIC", "HOST", "STEPS", "OBSERVED", "BASELINE", "POINTS"), rows)
        lines += ["  windows:", *("    " + line for line in table.splitlines())]
    return lines


def _steps(start: Any, end: Any) -> str:
    if start is None and end is None:
        return ""
    return f"{cell(start)}-{cell(end)}"


def _report_lines(index: int, report: JsonObject) -> list[str]:
    head = (
        f"  {index}. {report.get('detectionState', '')}  {report.get('analyzer', '')}"
        f"  ({report.get('layer', '').lower()}, score {cell(report.get('score'))})"
    )
    lines = [head, f"     {report.get('details', '')}"]
    if report.get("hosts"):
        lines.append(f"     hosts: {', '.join(report['hosts'])}")
    if report.get("evidence"):
        lines += ["     evidence:", *(f"       - {item}" for item in report["evidence"])]
    actions = report.get("recommendedActions") or []
    if actions:
        lines.append("     recommended actions:")
        for action in actions:
            lines.append(f"       - {action.get('description', '')}")
            if action.get("documentationUrl"):
                lines.append(f"         {action['documentationUrl']}")
    return lines


def describe_event(event: JsonObject) -> str:
    """An event for a person: its fields, its evidence, then every analyzer's report."""
    thresholds = event.get("thresholds") or {}
    rule = cell(event.get("rule"))
    if thresholds:
        rule += " (" + ", ".join(f"{k}={cell(v)}" for k, v in sorted(thresholds.items())) + ")"
    fields = [
        ("name", cell(event.get("name"))),
        ("summary", cell(event.get("displayName"))),
        ("type", cell(event.get("type"))),
        ("severity", cell(event.get("severity"))),
        ("state", cell(event.get("state"))),
        ("started", short_time(event.get("startTime"))),
        ("ended", short_time(event.get("endTime"))),
        ("time lost", duration(event.get("timeLostSeconds"))),
        ("rule", rule),
        ("hosts", ", ".join(event.get("hosts") or [])),
        ("revision", cell(event.get("revision"))),
    ]
    lines = render_fields((k, v) for k, v in fields if v).splitlines()
    evidence = _evidence_lines(event.get("evidence") or {})
    if evidence:
        lines += ["", "evidence", *evidence]
    reports = event.get("analyzerReports") or []
    if reports:
        found = "a cause found" if event.get("analyzerInsightFound") else "no cause found"
        lines += ["", f"analyzer reports ({found})"]
        for index, report in enumerate(reports, start=1):
            lines += _report_lines(index, report)
    else:
        lines += ["", "analyzer reports: none yet"]
    return "\n".join(lines)


# goodput


def _seconds(value: Any) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, int | float) else ""


def _share(value: Any) -> str:
    return f"{value * 100:.1f}%" if isinstance(value, int | float) else ""


def render_goodput(answer: JsonObject) -> str:
    """The goodput answer for a person: a headline, the buckets, then the events' cost."""
    run_id = str(answer.get("run", "")).rsplit("/", 1)[-1]
    head = (
        f"run {run_id}: goodput {_share(answer.get('goodput'))} "
        f"({duration(answer.get('productiveSeconds'))} productive of "
        f"{duration(answer.get('wallSeconds'))} wall time; {answer.get('steps', 0)} steps"
    )
    if answer.get("reference"):
        head += f", {answer['reference']}"
    head += ")"
    rows = [
        ("PRODUCTIVE", _seconds(answer.get("productiveSeconds")), _share(answer.get("goodput")))
    ]
    rows += [
        (cell(b.get("kind")), _seconds(b.get("seconds")), _share(b.get("fraction")))
        for b in answer.get("buckets", [])
    ]
    text = f"{head}\n\n{render_table(('BUCKET', 'SECONDS', 'SHARE'), rows)}"
    events = answer.get("events") or []
    if events:
        event_rows = [
            (
                str(e.get("event", "")).rsplit("/", 1)[-1],
                cell(e.get("type")),
                cell(e.get("bucket")),
                _seconds(e.get("seconds")),
                cell(e.get("displayName")),
            )
            for e in events
        ]
        columns = ("EVENT ID", "TYPE", "BUCKET", "SECONDS", "SUMMARY")
        text += f"\n\n{render_table(columns, event_rows)}"
    return text


def _runs_goodput(ctx: Context, args: argparse.Namespace) -> int:
    answer = ctx.client.run_goodput(args.run)
    ctx.emit(answer, lambda: render_goodput(answer))
    return 0
