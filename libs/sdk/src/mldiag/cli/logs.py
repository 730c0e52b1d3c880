"""``mldiag logs RUN``: a run's log lines, searched, and followed while it runs.

Lines print oldest first as ``TIME HOST STREAM  text``; ``--format json`` prints one API
entry per line (JSON Lines), ``yaml`` one document per line entry. ``--follow`` asks again
with the cursor every second until the run has ended and nothing more comes; Ctrl-C ends it
quietly (exit status 0).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from mldiag.cli.common import add_global_options, run_argument
from mldiag.cli.events import time_argument
from mldiag.cli.output import dump

if TYPE_CHECKING:
    from mldiag.api_client import JsonObject
    from mldiag.cli.common import Context

STREAMS = ("stdout", "stderr", "otlp", "system")
"""What ``--stream`` accepts."""

SEVERITIES = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""What ``--severity`` accepts (that severity or a worse one)."""

PAGE_SIZE = 1000
FOLLOW_INTERVAL_SECONDS = 1.0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def add_logs_command(commands: Any) -> None:
    """Add ``logs`` to ``mldiag``'s commands."""
    options = argparse.ArgumentParser(add_help=False)
    add_global_options(options, suppress=True)
    parser: argparse.ArgumentParser = commands.add_parser(
        "logs",
        parents=[options],
        help="print a run's log lines (grep, time window, follow)",
        description="Print the lines a run's processes wrote, oldest first, as TIME HOST"
        " STREAM  text. --follow keeps printing as lines land until the run has ended.",
    )
    parser.add_argument("run", metavar="RUN", type=run_argument, help="the run's id or full name")
    parser.add_argument("--grep", default="", metavar="RE", help="lines matching this regex")
    parser.add_argument(
        "--since",
        type=time_argument,
        metavar="TIME",
        help="lines written at or after TIME (RFC 3339) or that long ago (10m, 2h, 1d)",
    )
    parser.add_argument("--until", type=time_argument, metavar="TIME", help="and at or before")
    parser.add_argument("--host", default=None, help="lines of this host only")
    parser.add_argument("--stream", choices=STREAMS, default="", help="lines of this stream")
    parser.add_argument(
        "--severity",
        type=str.upper,
        choices=SEVERITIES,
        default="",
        help="lines of this severity or worse",
    )
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
    parser.add_argument("--limit", type=_positive, default=None, metavar="N", help="N lines")
    parser.set_defaults(api_handler=_logs, verb="")


def text_line(entry: JsonObject) -> str:
    """One entry as ``TIME HOST STREAM  text``."""
    host = entry.get("host") or "-"
    stream = str(entry.get("stream", "")).lower()
    return f"{entry.get('time', '')} {host} {stream}  {entry.get('text', '')}"


def _print(entries: list[JsonObject], output_format: str) -> None:
    for entry in entries:
        if output_format == "json":
            print(json.dumps(entry, ensure_ascii=False))
        elif output_format == "yaml":
            print("---\n" + dump(entry, "yaml").rstrip("\n"))
        else:
            print(text_line(entry))
    sys.stdout.flush()


def _logs(ctx: Context, args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a follower stops
        _read(ctx, args)
    return 0


def _read(ctx: Context, args: argparse.Namespace) -> None:
    token = ""
    printed = 0
    while True:
        size = PAGE_SIZE if args.limit is None else min(PAGE_SIZE, args.limit - printed)
        page = ctx.client.list_logs(
            args.run,
            grep=args.grep,
            since=args.since or "",
            until=args.until or "",
            host=args.host,
            stream=args.stream.upper(),
            min_severity=args.severity,
            page_size=size,
            page_token=token,
        )
        entries: list[JsonObject] = page.get("entries", [])
        _print(entries, ctx.output_format)
        printed += len(entries)
        following = page.get("nextPageToken") or ""
        if not following or (args.limit is not None and printed >= args.limit):
            return  # the run has ended and everything is read, or enough was
        caught_up = not entries and following == token
        token = following
        if caught_up:
            if not args.follow:
                return
            time.sleep(FOLLOW_INTERVAL_SECONDS)
