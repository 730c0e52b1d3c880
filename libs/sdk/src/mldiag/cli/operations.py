"""``mldiag operations``: list, describe, wait for, cancel and delete the long-running
operations that run writes return."""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from mldiag.api_client import JsonObject
from mldiag.cli.common import Context, api_command_group, api_verb, positive, resource_argument
from mldiag.cli.output import cell, flatten, render_fields, render_table, short_time
from mldiag.cli.progress import Progress

OPERATION = resource_argument("operations")
"""An argparse type: an operation's id or full name."""


def add_operations_commands(commands: Any) -> None:
    """Add ``operations`` to ``mldiag``'s commands."""
    verbs = api_command_group(commands, "operations", "inspect the operations run writes return")
    _add_operations(verbs, api_verb)


def operation_id(operation: JsonObject) -> str:
    """The last segment of an operation's ``name`` (its id)."""
    return str(operation.get("name", "")).rsplit("/", 1)[-1]


def _add_operations(verbs: Any, verb: Any) -> None:
    listing = verb(verbs, "list", _operations_list, "list operations (newest first)")
    listing.add_argument("--filter", default="", help="e.g. 'done = true'")
    listing.add_argument("--page-size", type=positive)
    listing.add_argument("--page-token", default="")
    listing.add_argument("--all", action="store_true", help="follow every page")

    for name, handler, help_text in (
        ("describe", _operations_describe, "show one operation"),
        ("cancel", _operations_cancel, "cancel an operation"),
        ("delete", _operations_delete, "forget an operation"),
    ):
        parser = verb(verbs, name, handler, help_text)
        parser.add_argument(
            "operation", metavar="OPERATION", type=OPERATION, help="id or full name"
        )

    wait = verb(verbs, "wait", _operations_wait, "wait until an operation is done")
    wait.add_argument("operation", metavar="OPERATION", type=OPERATION, help="id or full name")
    wait.add_argument("--timeout", default="", help="e.g. 10s [30s; the API caps it at 60s]")


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
    if args.all or args.limit:
        # --limit follows pages until it has enough (gcloud's --limit), and no further;
        # unless --sort-by, sorted here, needs every operation to pick the first ones.
        enough = math.inf if args.sort_by or not args.limit else args.limit
        operations = list(page.get("operations", []))
        while (token := page.get("nextPageToken")) and len(operations) < enough:
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
                operation_id(op),
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


DEFAULT_WAIT = "30s"
"""How long ``operations wait`` waits without ``--timeout`` (the API's own default)."""

MAX_WAIT_SECONDS = 60.0
"""The longest the API holds one :wait call."""

PROGRESS_SLICE_SECONDS = 2
"""One :wait call's timeout while a progress line is shown (it refreshes after each)."""


def _seconds(duration: str) -> float | None:
    """``"5s"`` as 5.0; ``None`` for a duration this CLI does not read (the API judges it)."""
    number = duration.removesuffix("s")
    return float(number) if number.replace(".", "", 1).isdigit() else None


def _wait_in_slices(ctx: Context, reference: str, seconds: float, progress: Progress) -> JsonObject:
    """Wait for the operation in short :wait calls, showing the time waited, up to
    ``seconds`` (capped at the API's 60 s, as one call would be)."""
    deadline = time.monotonic() + min(seconds, MAX_WAIT_SECONDS)
    while True:
        remaining = deadline - time.monotonic()
        wait = max(0.1, min(PROGRESS_SLICE_SECONDS, remaining))
        operation = ctx.client.wait_operation(reference, timeout=f"{wait:.1f}s")
        if operation.get("done") or remaining <= PROGRESS_SLICE_SECONDS:
            return operation
        progress.update("running")


def _operations_wait(ctx: Context, args: argparse.Namespace) -> int:
    reference = _operation_ref(args.operation)
    timeout = args.timeout
    if timeout and timeout.replace(".", "", 1).isdigit():
        timeout += "s"  # the API reads durations like "5s"
    seconds = _seconds(timeout or DEFAULT_WAIT)
    with Progress(f"operation {reference}", enabled=not ctx.quiet) as progress:
        if seconds is None or not progress.in_place:
            # One call, as the API holds it: no line to keep fresh on the way.
            operation = ctx.client.wait_operation(reference, timeout=timeout)
        else:
            operation = _wait_in_slices(ctx, reference, seconds, progress)
    ctx.emit(operation, lambda: _operation_fields(operation))
    if not operation.get("done"):
        print(
            f"error: not_done: operation {operation_id(operation)} is still running",
            file=sys.stderr,
        )
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
