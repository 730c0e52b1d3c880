"""The commands that talk to the run-registry API: ``runs``, ``metrics``, ``operations``,
``configs``, and (from :mod:`mldiag.cli.events`, :mod:`mldiag.cli.rules` and
:mod:`mldiag.cli.profiles`) ``events``, ``rules``, ``profiles``, ``targets`` and ``xprof``.
Each prints a table for a person, or the API's body for ``--format json|yaml``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mldiag.api_client import DEFAULT_API_URL, JsonObject, RegistryClient
from mldiag.cli.events import add_events_commands, add_goodput_verb
from mldiag.cli.output import (
    FORMATS,
    Format,
    cell,
    dump,
    flatten,
    labels_cell,
    render_fields,
    render_table,
    short_time,
)
from mldiag.cli.profiles import add_profiles_commands, add_targets_commands, add_xprof_commands
from mldiag.cli.rules import add_rules_commands
from mldiag.credentials import resolve_token

PHASES = ("ACTIVE", "COMPLETED", "FAILED")
"""The run phases a person may set."""

GROUP_BY = ("series", "host", "none")
"""How ``metrics get --buckets`` may split lines."""


class UsageError(Exception):
    """The arguments make no sense together (exit status 2)."""


@dataclass(frozen=True, slots=True)
class Context:
    """What every API command gets: the client and how to print."""

    client: RegistryClient
    output_format: Format

    def emit(self, body: Any, table: Callable[[], str]) -> None:
        """Print ``body`` in a machine format, or ``table()`` for a person."""
        if self.output_format == "table":
            text = table()
            if text:
                print(text)
        else:
            print(dump(body, self.output_format))


Handler = Callable[[Context, argparse.Namespace], int]


def add_global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The API options (``--api-url``, ``--token``, ``--project``, ``--location``, ``--format``).

    They go on the top-level parser and, with ``suppress``, on each API command too, so they
    work before or after the command's name.
    """

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("API options")
    group.add_argument(
        "--api-url",
        default=default(None),
        metavar="URL",
        help=f"the run-registry API [$MLDIAG_API_URL or {DEFAULT_API_URL}]",
    )
    group.add_argument(
        "--token",
        default=default(None),
        help="API token sent with every request [$MLDIAG_TOKEN, else the admin token"
        " `mldiag up` keeps in $MLDIAG_HOME]",
    )
    group.add_argument(
        "--project",
        default=default(None),
        help="project of the long resource form [the short form: default]",
    )
    group.add_argument(
        "--location",
        default=default(None),
        help="location of the long resource form [the short form: local]",
    )
    group.add_argument(
        "--format",
        dest="output_format",
        choices=FORMATS,
        default=default("table"),
        help="table for people; json or yaml print the API's bodies [table]",
    )


def client_from_args(args: argparse.Namespace) -> RegistryClient:
    """The API client the global options (and ``MLDIAG_API_URL``/``MLDIAG_TOKEN``) describe."""
    url = args.api_url or os.environ.get("MLDIAG_API_URL") or DEFAULT_API_URL
    token = resolve_token(args.token) or None
    return RegistryClient(url, token=token, project=args.project, location=args.location)


# argument types


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _config_value(text: str) -> tuple[str, Any]:
    key, value = _key_value(text)
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value  # not JSON: a string


def _positive(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return number


def _nest(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """``a.b=1`` pairs as nested dicts (``{"a": {"b": 1}}``)."""
    nested: dict[str, Any] = {}
    for key, value in pairs:
        *parents, leaf = key.split(".")
        target = nested
        for part in parents:
            child = target.get(part)
            if not isinstance(child, dict):
                child = target[part] = {}
            target = child
        target[leaf] = value
    return nested


# building the parser


def add_api_commands(commands: Any) -> None:
    """Add ``runs``, ``metrics``, ``operations``, ``configs``, ``events``, ``rules``,
    ``profiles``, ``targets``, ``xprof`` and ``auth`` to ``mldiag``'s commands."""
    options = argparse.ArgumentParser(add_help=False)
    add_global_options(options, suppress=True)

    def group(name: str, help_text: str) -> Any:
        parser = commands.add_parser(name, help=help_text, description=help_text)
        return parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(
        verbs: Any, name: str, handler: Handler, help_text: str, description: str = ""
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = verbs.add_parser(
            name, parents=[options], help=help_text, description=description or help_text
        )
        parser.set_defaults(api_handler=handler)
        return parser

    _add_runs(group("runs", "create, list, describe, update and delete runs"), verb)
    _add_metrics(group("metrics", "read a run's metrics"), verb)
    _add_operations(group("operations", "inspect the operations run writes return"), verb)
    _add_configs(group("configs", "compare runs' configs"), verb)
    add_events_commands(group("events", "list and describe workload events"), verb)
    add_rules_commands(group("rules", "override the detection rules' thresholds"), verb)
    add_profiles_commands(group("profiles", "list, describe and capture profiles"), verb)
    add_targets_commands(group("targets", "list runs' profiler targets"), verb)
    add_xprof_commands(group("xprof", "serve profiles in managed XProf instances"), verb)
    tokens_help = "create, list and revoke API tokens (admins only)"
    tokens = group("auth", "manage access to the API").add_parser(
        "tokens", help=tokens_help, description=tokens_help
    )
    _add_tokens(tokens.add_subparsers(dest="tokens_verb", required=True, metavar="VERB"), verb)


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    for section in ("software", "hardware", "user"):
        parser.add_argument(
            f"--{section}-config",
            dest=f"{section}_configs",
            type=_config_value,
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
    create.add_argument(
        "--label", type=_key_value, action="append", default=[], metavar="KEY=VALUE"
    )
    create.add_argument("--workload-id", help="the workload's identity (resumes attach to it)")
    create.add_argument("--orchestrator", help="GKE, SLURM, LOCAL, ...")
    create.add_argument("--phase", choices=PHASES, help="initial phase [ACTIVE]")
    _add_config_flags(create)

    listing = verb(verbs, "list", _runs_list, "list runs (newest first)")
    listing.add_argument("--filter", default="", help="AIP-160 filter, e.g. 'runSet = \"a\"'")
    listing.add_argument("--order-by", default="", help="e.g. 'displayName, createTime desc'")
    listing.add_argument("--page-size", type=_positive, help="runs per page [10]")
    listing.add_argument("--page-token", default="", help="continue from a page")
    listing.add_argument("--all", action="store_true", help="follow every page")

    describe = verb(verbs, "describe", _runs_describe, "show one run")
    describe.add_argument("run", metavar="RUN")

    update = verb(
        verbs,
        "update",
        _runs_update,
        "update a run",
        "Update a run. The current etag is read first (GET) unless --etag is given; a stale "
        "etag is refused with etag_mismatch. --label and --remove-label edit the labels "
        "the run has.",
    )
    update.add_argument("run", metavar="RUN")
    update.add_argument("--etag", help="the etag read [read now]")
    update.add_argument("--display-name")
    update.add_argument("--run-set")
    update.add_argument(
        "--label",
        type=_key_value,
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

    delete = verb(verbs, "delete", _runs_delete, "delete a run (soft: its id stays taken)")
    delete.add_argument("run", metavar="RUN")
    delete.add_argument("--etag", default="", help="refuse if the run changed since this etag")

    add_goodput_verb(verbs, verb)


def _add_metrics(verbs: Any, verb: Any) -> None:
    listing = verb(verbs, "list", _metrics_list, "the run's metrics with point counts")
    listing.add_argument("run", metavar="RUN")

    latest = verb(verbs, "latest", _metrics_latest, "the latest value of every series")
    latest.add_argument("run", metavar="RUN")
    latest.add_argument("metric", metavar="METRIC", nargs="*", help="only these metrics")

    get = verb(
        verbs,
        "get",
        _metrics_get,
        "a metric's points, downsampled or latest",
        "Raw points in step order; with --buckets N at most N step buckets per line "
        "(min, max, mean, last, count, NaN count); with --latest the latest value per series.",
    )
    get.add_argument("run", metavar="RUN")
    get.add_argument("metric", metavar="METRIC")
    get.add_argument("--buckets", type=_positive, metavar="N", help="downsample to N buckets")
    get.add_argument("--group-by", choices=GROUP_BY, help="lines of --buckets [series]")
    get.add_argument("--latest", action="store_true", help="only the latest value per series")
    get.add_argument("--page-size", type=_positive, help="raw points per page [10000]")
    get.add_argument("--page-token", default="", help="continue from a page")
    get.add_argument("--all", action="store_true", help="follow every page of raw points")


def _add_operations(verbs: Any, verb: Any) -> None:
    listing = verb(verbs, "list", _operations_list, "list operations (newest first)")
    listing.add_argument("--filter", default="", help="e.g. 'done = true'")
    listing.add_argument("--page-size", type=_positive)
    listing.add_argument("--page-token", default="")
    listing.add_argument("--all", action="store_true", help="follow every page")

    for name, handler, help_text in (
        ("describe", _operations_describe, "show one operation"),
        ("cancel", _operations_cancel, "cancel an operation"),
        ("delete", _operations_delete, "forget an operation"),
    ):
        parser = verb(verbs, name, handler, help_text)
        parser.add_argument("operation", metavar="OPERATION", help="id or full name")

    wait = verb(verbs, "wait", _operations_wait, "wait until an operation is done")
    wait.add_argument("operation", metavar="OPERATION", help="id or full name")
    wait.add_argument("--timeout", default="", help="e.g. 10s [30s; the API caps it at 60s]")


def _add_configs(verbs: Any, verb: Any) -> None:
    show = verb(
        verbs,
        "show",
        _configs_show,
        "show a run's configs, one dotted key per line",
        "The run's software, hardware and user configs with nested keys flattened to "
        "dotted ones; values keep their types (a string is quoted).",
    )
    show.add_argument("run", metavar="RUN")
    diff = verb(
        verbs,
        "diff",
        _configs_diff,
        "compare two runs' configs",
        "How RUN_B's software, hardware and user configs differ from RUN_A's, nested keys "
        "flattened to dotted ones (the API compares: 1 equals 1.0, true does not). "
        "Exit status 0 whether or not they differ.",
    )
    diff.add_argument("run_a", metavar="RUN_A")
    diff.add_argument("run_b", metavar="RUN_B")
    diff.add_argument("--all", action="store_true", help="list unchanged keys too")


# runs


def _run_fields(run: JsonObject) -> str:
    return render_fields((key, cell(value)) for key, value in flatten(run).items())


def _operation_id(operation: JsonObject) -> str:
    return str(operation.get("name", "")).rsplit("/", 1)[-1]


def _written(operation: JsonObject, verb: str) -> str:
    run = operation.get("response") or {}
    headline = f"{verb} run {run.get('runId', '?')} (operation {_operation_id(operation)})"
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
        f"{section}Configs": _nest(getattr(args, f"{section}_configs"))
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


def _runs_list(ctx: Context, args: argparse.Namespace) -> int:
    query = {"filter": args.filter, "order_by": args.order_by, "page_size": args.page_size}
    if args.all:
        page: JsonObject = {
            "machineLearningRuns": list(ctx.client.iter_runs(**query)),
            "nextPageToken": "",
        }
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
    ctx.emit(operation, lambda: f"deleted run {run_id} (operation {_operation_id(operation)})")
    return 0


# metrics


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


# operations


def _operation_ref(text: str) -> str:
    return text.rstrip("/").rsplit("/", 1)[-1]


def _short_name(name: Any) -> str:
    text = str(name or "")
    _, sep, rest = text.partition("/locations/")
    return rest.partition("/")[2] if sep else text


def _operations_list(ctx: Context, args: argparse.Namespace) -> int:
    page = ctx.client.list_operations(
        filter=args.filter, page_size=args.page_size, page_token=args.page_token
    )
    if args.all:
        operations = list(page.get("operations", []))
        while token := page.get("nextPageToken"):
            page = ctx.client.list_operations(
                filter=args.filter, page_size=args.page_size, page_token=token
            )
            operations += page.get("operations", [])
        page = {"operations": operations, "nextPageToken": ""}
    operations = page.get("operations", [])

    def table() -> str:
        if not operations:
            return "no operations"
        rows = (
            (
                _operation_id(op),
                cell((op.get("metadata") or {}).get("verb")),
                _short_name((op.get("metadata") or {}).get("target")),
                "yes" if op.get("done") else "no",
                cell((op.get("error") or {}).get("code")),
                short_time((op.get("metadata") or {}).get("createTime")),
            )
            for op in operations
        )
        text = render_table(("ID", "VERB", "TARGET", "DONE", "ERROR", "CREATED"), rows)
        if token := page.get("nextPageToken"):
            text += f"\n\nmore operations: --page-token {token} (or --all)"
        return text

    ctx.emit(page, table)
    return 0


def _operation_fields(operation: JsonObject) -> str:
    summary = {key: value for key, value in operation.items() if key != "response"}
    response = operation.get("response")
    if isinstance(response, dict) and response.get("runId"):
        summary["response"] = f"run {response['runId']} (etag {response.get('etag', '')})"
    return render_fields((key, cell(value)) for key, value in flatten(summary).items())


def _operations_describe(ctx: Context, args: argparse.Namespace) -> int:
    operation = ctx.client.get_operation(_operation_ref(args.operation))
    ctx.emit(operation, lambda: _operation_fields(operation))
    return 0


def _operations_wait(ctx: Context, args: argparse.Namespace) -> int:
    timeout = args.timeout
    if timeout and timeout.replace(".", "", 1).isdigit():
        timeout += "s"  # the API reads durations like "5s"
    operation = ctx.client.wait_operation(_operation_ref(args.operation), timeout=timeout)
    ctx.emit(operation, lambda: _operation_fields(operation))
    if not operation.get("done"):
        print(f"error: not_done: operation {_operation_id(operation)} is still running")
        return 1
    return 0


def _operations_cancel(ctx: Context, args: argparse.Namespace) -> int:
    reference = _operation_ref(args.operation)
    answer = ctx.client.cancel_operation(reference)
    ctx.emit(answer, lambda: f"cancelled operation {reference}")
    return 0


def _operations_delete(ctx: Context, args: argparse.Namespace) -> int:
    reference = _operation_ref(args.operation)
    answer = ctx.client.delete_operation(reference)
    ctx.emit(answer, lambda: f"deleted operation {reference}")
    return 0


# API tokens


def _add_tokens(verbs: Any, verb: Any) -> None:
    create = verb(verbs, "create", _tokens_create, "create a token; prints its secret once")
    create.add_argument("--role", choices=("viewer", "editor", "admin"), default="viewer")
    create.add_argument("--display-name", default="", help="what the token is for")
    create.add_argument("--ttl", type=_positive, help="expire after this many seconds")
    verb(verbs, "list", _tokens_list, "list tokens (never their secrets)")
    revoke = verb(verbs, "revoke", _tokens_revoke, "revoke a token everywhere")
    revoke.add_argument("token_id", metavar="TOKEN_ID", help="e.g. tok-1a2b3c4d5e6f")


def _tokens_create(ctx: Context, args: argparse.Namespace) -> int:
    answer = ctx.client.create_token(
        args.role, display_name=args.display_name, ttl_seconds=args.ttl
    )
    token = answer["token"]
    ctx.emit(
        answer,
        lambda: (
            f"created {token['tokenId']} ({token['role']}); its secret, shown only now:\n"
            f"{answer['secret']}"
        ),
    )
    return 0


def _tokens_list(ctx: Context, _args: argparse.Namespace) -> int:
    answer = ctx.client.list_tokens()
    tokens = answer.get("apiTokens", [])

    def table() -> str:
        if not tokens:
            return "no tokens"
        rows = [
            (
                t["tokenId"],
                t["role"],
                t["state"],
                t.get("displayName", ""),
                t["secretPrefix"] + "…",
                short_time(t["createTime"]),
                short_time(t.get("expireTime")),
            )
            for t in tokens
        ]
        return render_table(
            ("TOKEN", "ROLE", "STATE", "NAME", "SECRET", "CREATED", "EXPIRES"), rows
        )

    ctx.emit(answer, table)
    return 0


def _tokens_revoke(ctx: Context, args: argparse.Namespace) -> int:
    answer = ctx.client.revoke_token(args.token_id)
    ctx.emit(answer, lambda: f"revoked {answer['tokenId']}")
    return 0


# configs


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
