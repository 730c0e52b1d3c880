"""``mldiag metrics``: read a run's metrics (list, latest, get, export)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from mldiag.api_client import JsonObject
from mldiag.cli.common import (
    Context,
    UsageError,
    add_global_options,
    api_command_group,
    api_verb,
    positive,
    run_argument,
)
from mldiag.cli.output import cell, labels_cell, render_table, short_time

GROUP_BY = ("series", "host", "none")
"""How ``metrics get --buckets`` may split lines."""

EXPORT_FORMATS = ("csv", "jsonl")
"""What ``metrics export --format`` writes."""


def add_metrics_commands(commands: Any) -> None:
    """Add ``metrics`` to ``mldiag``'s commands."""
    _add_metrics(api_command_group(commands, "metrics", "read a run's metrics"), api_verb)


def _add_metrics(verbs: Any, verb: Any) -> None:
    listing = verb(verbs, "list", _metrics_list, "the run's metrics with point counts")
    listing.add_argument("run", metavar="RUN", type=run_argument)

    latest = verb(verbs, "latest", _metrics_latest, "the latest value of every series")
    latest.add_argument("run", metavar="RUN", type=run_argument)
    latest.add_argument("metric", metavar="METRIC", nargs="*", help="only these metrics")

    get = verb(
        verbs,
        "get",
        _metrics_get,
        "a metric's points, downsampled or latest",
        "Raw points in step order; with --buckets N at most N step buckets per line "
        "(min, max, mean, last, count, NaN count); with --latest the latest value per series.",
    )
    get.add_argument("run", metavar="RUN", type=run_argument)
    get.add_argument("metric", metavar="METRIC")
    get.add_argument("--buckets", type=positive, metavar="N", help="downsample to N buckets")
    get.add_argument("--group-by", choices=GROUP_BY, help="lines of --buckets [series]")
    get.add_argument("--latest", action="store_true", help="only the latest value per series")
    get.add_argument("--page-size", type=positive, help="raw points per page [10000]")
    get.add_argument("--page-token", default="", help="continue from a page")
    get.add_argument("--all", action="store_true", help="follow every page of raw points")

    # built like api_verb's, but its own --format (the file's) takes the place of the output
    # format's
    options = argparse.ArgumentParser(add_help=False)
    add_global_options(options, suppress=True)
    export = verbs.add_parser(
        "export",
        parents=[options],
        conflict_handler="resolve",
        help="every point of a metric as CSV or JSON Lines",
        description="Every point of every series of METRIC, in step order, written to stdout"
        " (or --output) as it arrives, whatever the series' length. CSV: a header line, then"
        " step,value,time,host,processIndex,labels; JSON Lines: one point object a line. NaN"
        " and infinities are written NaN, Infinity, -Infinity; times are RFC 3339 in UTC.",
    )
    export.set_defaults(api_handler=_metrics_export)
    export.add_argument("run", metavar="RUN", type=run_argument)
    export.add_argument("metric", metavar="METRIC")
    export.add_argument(
        "--format",
        dest="export_format",
        choices=EXPORT_FORMATS,
        default="csv",
        help="the file's format [csv]",
    )
    export.add_argument("--start-step", type=_step, metavar="N", help="from this step on")
    export.add_argument("--end-step", type=_step, metavar="N", help="up to this step")
    export.add_argument(
        "--output", "-o", type=Path, metavar="FILE", help="write to FILE instead of stdout"
    )


def _step(text: str) -> int:
    """An argparse type: a step (an integer, 0 or more)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a step, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a step is 0 or more, got {value}")
    return value


def series_label(line: JsonObject) -> str:
    """A series (or downsampled line) named by what sets it apart: host, process, labels."""
    parts = []
    if line.get("host"):
        parts.append(str(line["host"]))
    if line.get("processIndex") is not None:
        parts.append(f"p{line['processIndex']}")
    if labels := labels_cell(line.get("labels")):
        parts.append(labels)
    return " ".join(parts) or "all"


def _metrics_list(ctx: Context, args: argparse.Namespace) -> int:
    answer = ctx.client.list_metrics(args.run)
    metrics = answer.get("metrics", [])
    rows = (
        (cell(m.get("name")), cell(m.get("pointCount")), cell(m.get("lastStep"))) for m in metrics
    )
    ctx.emit(
        answer,
        lambda: render_table(("NAME", "POINTS", "LAST STEP"), rows) if metrics else "no metrics",
    )
    return 0


def _latest_table(values: list[JsonObject]) -> str:
    if not values:
        return "no metrics"
    rows = (
        (
            cell(v.get("name")),
            series_label(v),
            cell(v.get("step")),
            cell(v.get("value")),
            short_time(v.get("time")),
            cell(v.get("pointCount")),
        )
        for v in values
    )
    return render_table(("NAME", "SERIES", "STEP", "VALUE", "TIME", "POINTS"), rows)


def _latest(ctx: Context, run: str, names: list[str]) -> int:
    answer = ctx.client.latest_metrics(run)
    if names:
        answer = {
            **answer,
            "values": [v for v in answer.get("values", []) if v.get("name") in names],
        }
    ctx.emit(answer, lambda: _latest_table(answer.get("values", [])))
    return 0


def _metrics_latest(ctx: Context, args: argparse.Namespace) -> int:
    return _latest(ctx, args.run, args.metric)


def _buckets_table(answer: JsonObject) -> str:
    head = (
        f"{answer.get('metric')}: bucket width {answer.get('bucketWidth')}, "
        f"source {answer.get('source')}, group by {answer.get('groupBy')}"
    )
    rows = [
        (
            series_label(line) if answer.get("groupBy") != "none" else "all",
            f"{b.get('startStep')}-{b.get('endStep')}",
            cell(b.get("count")),
            cell(b.get("nanCount")),
            cell(b.get("min")),
            cell(b.get("max")),
            cell(b.get("mean")),
            cell(b.get("last")),
        )
        for line in answer.get("series", [])
        for b in line.get("buckets", [])
    ]
    if not rows:
        return f"{head}\n\nno points"
    columns = ("SERIES", "STEPS", "COUNT", "NAN", "MIN", "MAX", "MEAN", "LAST")
    return f"{head}\n\n{render_table(columns, rows)}"


def _points_table(answer: JsonObject) -> str:
    points = answer.get("points", [])
    if not points:
        return "no points"
    rows = (
        (cell(p.get("step")), cell(p.get("value")), series_label(p), short_time(p.get("time")))
        for p in points
    )
    text = render_table(("STEP", "VALUE", "SERIES", "TIME"), rows)
    if token := answer.get("nextPageToken"):
        text += f"\n\nmore points: --page-token {token} (or --all)"
    return text


def _metrics_get(ctx: Context, args: argparse.Namespace) -> int:
    if args.latest:
        if args.buckets or args.group_by:
            raise UsageError("--latest does not go with --buckets or --group-by")
        return _latest(ctx, args.run, [args.metric])
    if args.group_by and not args.buckets:
        raise UsageError("--group-by needs --buckets N")
    if args.buckets:
        answer = ctx.client.downsample_metric(
            args.run, args.metric, buckets=args.buckets, group_by=args.group_by or ""
        )
        ctx.emit(answer, lambda: _buckets_table(answer))
        return 0
    answer = ctx.client.read_metric(
        args.run, args.metric, page_size=args.page_size, page_token=args.page_token
    )
    if args.all:
        points = list(answer.get("points", []))
        while token := answer.get("nextPageToken"):
            answer = ctx.client.read_metric(
                args.run, args.metric, page_size=args.page_size, page_token=token
            )
            points += answer.get("points", [])
        answer = {**answer, "points": points, "nextPageToken": ""}
    ctx.emit(answer, lambda: _points_table(answer))
    return 0


def _write_all(chunks: Iterator[bytes], out: IO[bytes]) -> int:
    written = 0
    for chunk in chunks:
        out.write(chunk)
        written += len(chunk)
    out.flush()
    return written


def _metrics_export(ctx: Context, args: argparse.Namespace) -> int:
    if (
        args.start_step is not None
        and args.end_step is not None
        and args.start_step > args.end_step
    ):
        raise UsageError("--start-step must not be greater than --end-step")
    chunks = ctx.client.export_metric(
        args.run,
        args.metric,
        args.export_format,
        start_step=args.start_step,
        end_step=args.end_step,
    )
    if args.output is None:
        sys.stdout.flush()  # what was printed before goes first
        _write_all(chunks, sys.stdout.buffer)
        return 0
    first = next(chunks, b"")  # an error is raised before the file is created
    with args.output.open("wb") as out:
        out.write(first)
        written = len(first) + _write_all(chunks, out)
    if not ctx.quiet:
        print(f"wrote {written:,} bytes to {args.output}", file=sys.stderr)
    return 0
