"""``mldiag sync [PATH|RUN]``: upload runs recorded with ``MLDIAG_MODE=offline``.

With no argument, every offline run under the spool root not synced yet; with a run's
folder, a folder of runs, or a run id (short or full name), those. Each run is created with
its own id (attached to when it exists), its metric batches posted in order with the batch
ids they were recorded with, its final phase set, and its manifest stamped as synced; one
line per run says what was sent. ``--dry-run`` only lists. See :mod:`mldiag.offline`.

Exit status: 0 done, 1 the platform refused (or a run is still being written), 2 nothing
matches the argument, 3 the platform did not answer (run it again: nothing sent is sent
twice).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mldiag.cli.common import add_global_options
from mldiag.config import Settings
from mldiag.offline import (
    SyncError,
    SyncResult,
    offline_root,
    offline_runs,
    resolve_target,
    sync_run,
)

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def add_sync_command(commands: Any) -> None:
    """Add ``sync`` to ``mldiag``'s commands."""
    options = argparse.ArgumentParser(add_help=False)
    add_global_options(options, suppress=True)
    parser: argparse.ArgumentParser = commands.add_parser(
        "sync",
        parents=[options],
        help="upload runs recorded offline (MLDIAG_MODE=offline)",
        description="Upload offline runs: create each run with its id, send its configs and"
        " metrics in order (batch ids the platform dedupes on, so an interrupted sync can"
        " simply be run again), set its final phase and mark it synced.",
    )
    parser.add_argument(
        "target",
        nargs="?",
        default="",
        metavar="PATH|RUN",
        help="a run's folder, a folder of runs, or a run id [every unsynced offline run]",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be sent")
    parser.add_argument(
        "--spool-dir",
        default=None,
        metavar="DIR",
        help="the spool root the runs were recorded under [$MLDIAG_SPOOL_DIR or the cache]",
    )
    parser.add_argument(
        "--ingestion-url",
        default=None,
        metavar="URL",
        help="where metric batches go [$MLDIAG_INGESTION_URL, else the API URL]",
    )
    parser.set_defaults(handler=_sync)


def _sync(args: argparse.Namespace) -> int:
    settings = Settings.resolve(
        api_url=getattr(args, "api_url", None),
        ingestion_url=args.ingestion_url,
        token=getattr(args, "token", None),
        spool_dir=args.spool_dir,
    )
    root = settings.spool_dir
    assert root is not None  # noqa: S101  # Settings.resolve always names one
    if args.target:
        runs = resolve_target(args.target, root)
        if not runs:
            print(f"mldiag sync: error: no offline run at {args.target!r}", file=sys.stderr)
            return EXIT_USAGE
    else:
        runs = offline_runs(offline_root(root))
        if not runs:
            print(f"nothing to sync under {offline_root(root)}")
            return 0
    status = 0
    for directory in runs:
        try:
            result = sync_run(
                directory,
                settings,
                project=getattr(args, "project", None),
                location=getattr(args, "location", None),
                dry_run=args.dry_run,
            )
        except SyncError as error:
            print(f"error: {directory.name}: {error.code}: {error.message}", file=sys.stderr)
            status = max(status, EXIT_UNREACHABLE if error.unreachable else EXIT_REFUSED)
            continue
        print(_line(result, dry_run=args.dry_run))
    return status


def _line(result: SyncResult, *, dry_run: bool) -> str:
    where = ""
    if result.project or result.location:
        where = f" in projects/{result.project or 'default'}/locations/{result.location or 'local'}"
    phase = result.phase or "none recorded (the process did not finish)"
    verb = "would sync" if dry_run else "synced"
    note = " (synced before)" if result.synced_before else ""
    line = (
        f"{verb} {result.run_id}{where}{note}: run {result.run}, {result.batches} batches,"
        f" {result.points} points, phase {phase}"
    )
    if result.rejected:
        kept = Path(result.directory, "dead-letter.jsonl")
        line += f", {result.rejected} batches rejected (kept in {kept})"
    return line
