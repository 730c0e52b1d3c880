"""``mldiag import tensorboard LOGDIR`` and ``mldiag import mlflow --tracking-uri URI``:
runs, configs, labels and metric points from other tools, written so that importing again
sends nothing twice (:mod:`mldiag.imports`). One line per run: points read, sent, and
skipped as already present.

Exit status: 0 done; 1 a source or the platform refused (``error: <code>: <message>``),
or an event file was damaged (what came before the damage is imported); 2 a usage error;
3 the platform or the MLflow server did not answer.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mldiag.cli.common import Context, UsageError, api_command_group, api_verb
from mldiag.cli.output import dump
from mldiag.credentials import resolve_token
from mldiag.imports.errors import ImportFailed, PlatformUnavailable, SourceUnreachable
from mldiag.imports.mlflow import MlflowClient, read_tracking_server
from mldiag.imports.source import SourceRun
from mldiag.imports.tensorboard import read_logdir
from mldiag.imports.writer import Importer, RunReport
from mldiag.transport import client as ingestion_client

EXIT_REFUSED = 1
EXIT_UNREACHABLE = 3


def add_import_commands(commands: Any) -> None:
    """Add ``import tensorboard`` and ``import mlflow`` to ``mldiag``'s commands."""
    verbs = api_command_group(
        commands, "import", "import runs and metrics from TensorBoard or MLflow"
    )
    tensorboard = api_verb(
        verbs,
        "tensorboard",
        _import_tensorboard,
        "import the scalars of a TensorBoard log directory",
        "Each directory under LOGDIR holding events.out.tfevents.* files becomes a run"
        " named after its relative path; every scalar becomes a point with its step and wall"
        " time. Importing again sends only what the platform does not hold yet.",
    )
    tensorboard.add_argument("logdir", metavar="LOGDIR", type=Path, help="the log directory")
    tensorboard.add_argument(
        "--run-set", default=None, metavar="NAME", help="run set of the runs [LOGDIR's name]"
    )
    tensorboard.add_argument(
        "--run-prefix", default="", metavar="P", help="put P before each run's name"
    )
    _common_options(tensorboard)

    mlflow = api_verb(
        verbs,
        "mlflow",
        _import_mlflow,
        "import experiments, runs, params, tags and metrics from an MLflow server",
        "Experiments become run sets, runs keep their name and status, params become the"
        " user configs, tags labels, metrics points with their steps and timestamps."
        " Importing again sends only what the platform does not hold yet.",
    )
    mlflow.add_argument(
        "--tracking-uri",
        default=None,
        metavar="URI",
        help="the MLflow tracking server [$MLFLOW_TRACKING_URI]",
    )
    mlflow.add_argument(
        "--experiment",
        action="append",
        default=[],
        metavar="NAME|ID",
        help="import this experiment (repeatable) [every experiment]",
    )
    _common_options(mlflow)


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ingestion-url",
        default=None,
        metavar="URL",
        help="where metric batches go [$MLDIAG_INGESTION_URL, else the API URL]",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="read and compare, create and send nothing"
    )


def _import_tensorboard(context: Context, args: argparse.Namespace) -> int:
    logdir: Path = args.logdir
    if not logdir.is_dir():
        raise UsageError(f"{logdir} is not a directory")
    runs = read_logdir(logdir, run_set=args.run_set, run_prefix=args.run_prefix)
    return _write_all(context, args, runs)


def _import_mlflow(context: Context, args: argparse.Namespace) -> int:
    uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise UsageError("name the MLflow server with --tracking-uri or $MLFLOW_TRACKING_URI")
    if not uri.startswith(("http://", "https://")):
        raise UsageError(f"--tracking-uri must be an http(s) URL of a tracking server: {uri!r}")
    source = MlflowClient(uri, token=os.environ.get("MLFLOW_TRACKING_TOKEN"))
    try:
        return _write_all(context, args, read_tracking_server(source, args.experiment))
    finally:
        source.close()


def _write_all(context: Context, args: argparse.Namespace, runs: Iterable[SourceRun]) -> int:
    token = resolve_token(getattr(args, "token", None), api_url=context.client.base_url)
    url = args.ingestion_url or os.environ.get("MLDIAG_INGESTION_URL") or context.client.base_url
    reports: list[RunReport] = []
    table = context.output_format == "table"
    with ingestion_client(token, 30.0) as http:
        importer = Importer(
            context.client,
            http,
            url,
            project=getattr(args, "project", None),
            location=getattr(args, "location", None),
            dry_run=args.dry_run,
        )
        try:
            for run in runs:
                report = importer.write(run)
                reports.append(report)
                if table:
                    print(run_line(report), flush=True)
        except ImportFailed as error:
            print(f"error: {error.code}: {error.message}", file=sys.stderr)
            unreachable = isinstance(error, SourceUnreachable | PlatformUnavailable)
            return EXIT_UNREACHABLE if unreachable else EXIT_REFUSED
    if not table:
        print(dump([report.as_json() for report in reports], context.output_format))
    elif not reports:
        print("no runs found")
    for note in (note for report in reports for note in report.notes):
        print(f"note: {note}", file=sys.stderr)
    problems = [problem for report in reports for problem in report.problems]
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    if args.dry_run and table:
        print("dry run: nothing was created or sent")
    return EXIT_REFUSED if problems else 0


def run_line(report: RunReport) -> str:
    """One run's outcome for a person: id, name, run set, then the counts."""
    skipped = ", ".join(f"{count} {kind}" for kind, count in sorted(report.skipped.items()))
    verb = "created" if report.created else "existing"
    return (
        f"{report.run_id}  {report.display_name!r} in {report.run_set!r} ({verb}):"
        f" read {report.points_read}, sent {report.points_sent},"
        f" skipped as present {report.points_present}, rejected {report.points_rejected}"
        + (f"; not imported: {skipped}" if skipped else "")
    )
