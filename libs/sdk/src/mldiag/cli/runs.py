"""``mldiag runs`` (gcloud's ``machine-learning-runs``): create, list, describe, update,
delete and purge runs, and (from :mod:`mldiag.cli.events`) their goodput.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from mldiag.api_client import JsonObject
from mldiag.cli.common import (
    Context,
    UsageError,
    api_command_group,
    api_verb,
    config_value,
    key_value,
    nest,
    positive,
    run_argument,
)
from mldiag.cli.events import add_goodput_verb
from mldiag.cli.operations import operation_id
from mldiag.cli.output import cell, flatten, labels_cell, render_fields, render_table, short_time
from mldiag.cli.resources import order_by

PHASES = ("ACTIVE", "COMPLETED", "FAILED")
"""The run phases a person may set."""


def add_runs_commands(commands: Any) -> None:
    """Add ``runs`` (also ``machine-learning-runs``) to ``mldiag``'s commands."""
    verbs = api_command_group(
        commands,
        "runs",
        "create, list, describe, update, delete and purge runs",
        aliases=("machine-learning-runs",),
    )
    _add_runs(verbs, api_verb)


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    for section in ("software", "hardware", "user"):
        parser.add_argument(
            f"--{section}-config",
            dest=f"{section}_configs",
            type=config_value,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"a {section} config entry (repeatable; VALUE parsed as JSON when it is "
            "JSON; dotted keys nest)",
        )


def _add_runs(verbs: Any, verb: Any) -> None:
    create = verb(verbs, "create", _runs_create, "create a run")
    create.add_argument("--display-name", required=True, help="human-readable name")
    create.add_argument("--run-id", help="the run's id [generated]")
    create.add_argument("--run-set", help="group of related runs")
    create.add_argument("--label", type=key_value, action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--workload-id", help="the workload's identity (resumes attach to it)")
    create.add_argument("--orchestrator", help="GKE, SLURM, LOCAL, ...")
    create.add_argument("--phase", choices=PHASES, help="initial phase [ACTIVE]")
    _add_config_flags(create)

    listing = verb(verbs, "list", _runs_list, "list runs (newest first)")
    listing.add_argument("--filter", default="", help="AIP-160 filter, e.g. 'runSet = \"a\"'")
    listing.add_argument("--order-by", default="", help="e.g. 'displayName, createTime desc'")
    listing.add_argument("--page-size", type=positive, help="runs per page [10]")
    listing.add_argument("--page-token", default="", help="continue from a page")
    listing.add_argument("--all", action="store_true", help="follow every page")

    describe = verb(verbs, "describe", _runs_describe, "show one run")
    describe.add_argument("run", metavar="RUN", type=run_argument)

    update = verb(
        verbs,
        "update",
        _runs_update,
        "update a run",
        "Update a run. The current etag is read first (GET) unless --etag is given; a stale "
        "etag is refused with etag_mismatch. --label and --remove-label edit the labels "
        "the run has.",
    )
    update.add_argument("run", metavar="RUN", type=run_argument)
    update.add_argument("--etag", help="the etag read [read now]")
    update.add_argument("--display-name")
    update.add_argument("--run-set")
    update.add_argument(
        "--label",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a label (repeatable)",
    )
    update.add_argument(
        "--remove-label", action="append", default=[], metavar="KEY", help="drop a label"
    )
    update.add_argument("--phase", choices=PHASES, help="ACTIVE resumes an ended run")
    update.add_argument("--workload-id", help="the workload (needed to resume)")

    delete = verb(
        verbs, "delete", _runs_delete, "delete a run (soft: its id stays taken until it is purged)"
    )
    delete.add_argument("run", metavar="RUN", type=run_argument)
    delete.add_argument("--etag", default="", help="refuse if the run changed since this etag")

    purge = verb(
        verbs,
        "purge",
        _runs_purge,
        "remove a deleted run for good: its metrics, events, logs, profiles and the run",
    )
    purge.add_argument("run", metavar="RUN", type=run_argument)

    add_goodput_verb(verbs, verb)


def _run_fields(run: JsonObject) -> str:
    return render_fields((key, cell(value)) for key, value in flatten(run).items())


def _written(operation: JsonObject, verb: str) -> str:
    run = operation.get("response") or {}
    headline = f"{verb} run {run.get('runId', '?')} (operation {operation_id(operation)})"
    return f"{headline}\n\n{_run_fields(run)}"


def _runs_create(ctx: Context, args: argparse.Namespace) -> int:
    body: JsonObject = {"displayName": args.display_name}
    optional = {
        "runId": args.run_id,
        "runSet": args.run_set,
        "workloadId": args.workload_id,
        "orchestrator": args.orchestrator,
        "runPhase": args.phase,
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    if args.label:
        body["labels"] = dict(args.label)
    configs = {
        f"{section}Configs": nest(getattr(args, f"{section}_configs"))
        for section in ("software", "hardware", "user")
        if getattr(args, f"{section}_configs")
    }
    if configs:
        body["configs"] = configs
    operation = ctx.client.create_run(body)
    ctx.emit(operation, lambda: _written(operation, "created"))
    return 0


RUN_COLUMNS = ("RUN ID", "DISPLAY NAME", "RUN SET", "PHASE", "CREATED", "LABELS")
"""The columns of ``mldiag runs list``."""


def run_row(run: JsonObject) -> tuple[str, ...]:
    """One run as a row of ``mldiag runs list``."""
    return (
        cell(run.get("runId")),
        cell(run.get("displayName")),
        cell(run.get("runSet")),
        cell(run.get("runPhase")),
        short_time(run.get("createTime")),
        labels_cell(run.get("labels")),
    )


ORDERABLE = frozenset(
    {
        "runId",
        "displayName",
        "runSet",
        "state",
        "runPhase",
        "orchestrator",
        "workloadId",
        "createTime",
        "updateTime",
    }
)
"""The fields the runs API's ``orderBy`` takes; ``--sort-by`` on others sorts here."""


def _server_order(args: argparse.Namespace) -> str:
    """The ``orderBy`` to send: ``--order-by``, else ``--sort-by`` when the API can sort by
    every field it names."""
    if args.order_by or not args.sort_by:
        return str(args.order_by)
    fields = [key.strip().removeprefix("~") for key in args.sort_by.split(",") if key.strip()]
    return order_by(args.sort_by) if set(fields) <= ORDERABLE else ""


def _runs_list(ctx: Context, args: argparse.Namespace) -> int:
    server_order = _server_order(args)
    query = {"filter": args.filter, "order_by": server_order, "page_size": args.page_size}
    if args.all or args.limit:
        # --limit follows pages until it has enough (gcloud's --limit), and no further;
        # unless --sort-by is sorted here, and so needs every run to pick the first ones.
        sorted_here = bool(args.sort_by) and server_order != order_by(args.sort_by)
        enough = None if sorted_here else args.limit
        runs = itertools.islice(ctx.client.iter_runs(**query), enough)
        page: JsonObject = {"machineLearningRuns": list(runs), "nextPageToken": ""}
    else:
        page = ctx.client.list_runs(**query, page_token=args.page_token)
    runs = page.get("machineLearningRuns", [])

    def table() -> str:
        if not runs:
            return "no runs"
        text = render_table(RUN_COLUMNS, (run_row(run) for run in runs))
        if token := page.get("nextPageToken"):
            text += f"\n\nmore runs: --page-token {token} (or --all)"
        return text

    ctx.emit(page, table)
    return 0


def _runs_describe(ctx: Context, args: argparse.Namespace) -> int:
    run = ctx.client.get_run(args.run)
    ctx.emit(run, lambda: _run_fields(run))
    return 0


def _runs_update(ctx: Context, args: argparse.Namespace) -> int:
    body: JsonObject = {}
    for key, value in (
        ("displayName", args.display_name),
        ("runSet", args.run_set),
        ("runPhase", args.phase),
        ("workloadId", args.workload_id),
    ):
        if value is not None:
            body[key] = value
    edits_labels = bool(args.label or args.remove_label)
    if not body and not edits_labels:
        raise UsageError("nothing to update: give --display-name, --label, --phase, ...")
    etag = args.etag
    if etag is None or edits_labels:
        current = ctx.client.get_run(args.run)
        etag = etag if etag is not None else current.get("etag", "")
        if edits_labels:
            labels = dict(current.get("labels") or {})
            labels.update(dict(args.label))
            for key in args.remove_label:
                labels.pop(key, None)
            body["labels"] = labels
    body["etag"] = etag
    operation = ctx.client.update_run(args.run, body)
    ctx.emit(operation, lambda: _written(operation, "updated"))
    return 0


def _runs_delete(ctx: Context, args: argparse.Namespace) -> int:
    operation = ctx.client.delete_run(args.run, etag=args.etag)
    run_id = (operation.get("response") or {}).get("runId", args.run)
    ctx.emit(operation, lambda: f"deleted run {run_id} (operation {operation_id(operation)})")
    return 0


_PURGED = (
    ("metricPoints", "metric points"),
    ("events", "events"),
    ("analyses", "analyses"),
    ("logChunks", "log chunks"),
    ("profilerSessions", "profiler sessions"),
    ("objects", "profile files"),
    ("heartbeats", "heartbeats"),
    ("operations", "operations"),
)


def _runs_purge(ctx: Context, args: argparse.Namespace) -> int:
    purged = ctx.client.purge_run(args.run)
    run_id = str(purged.get("name", args.run)).rsplit("/", 1)[-1]

    def summary() -> str:
        counts = ", ".join(f"{purged.get(key, 0)} {label}" for key, label in _PURGED)
        return f"purged run {run_id}: {counts}"

    ctx.emit(purged, summary)
    return 0
