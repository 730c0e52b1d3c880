"""What the training resource command groups (``hp-tuning-jobs``, ``training-pipelines``,
``models``, and in part ``jobs``) share: a command group's verbs, ``--config`` files in either
key style, gcloud's list flags, table cells of resource names, and what list, describe, cancel
and delete show.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mldiag._training import parse_resource_name
from mldiag.api_client import JsonObject
from mldiag.cli.common import Context, UsageError, add_global_options
from mldiag.cli.output import cell, flatten, render_fields, render_table
from mldiag.credentials import resolve_token

FREE_FORM_KEYS = frozenset({"labels", "metadata", "inputs", "outputs"})
"""Keys whose value is a map of the user's own names: its keys are never re-cased."""

_SNAKE = re.compile(r"_([a-z0-9])")

Verb = Callable[..., argparse.ArgumentParser]
"""Adds one verb to a command group: ``verb(name, handler, help, description="",
aliases=())``."""


def command_group(commands: Any, name: str, help_text: str) -> Verb:
    """Add the command group ``name`` (its verbs take the API options and ``--region``);
    answer the function that adds a verb to it."""
    options = argparse.ArgumentParser(add_help=False)
    add_global_options(options, suppress=True)
    options.add_argument(
        "--region",
        dest="location",
        default=argparse.SUPPRESS,
        help="the location (gcloud's name for --location), e.g. us-central1",
    )
    verbs = commands.add_parser(name, help=help_text, description=help_text).add_subparsers(
        dest="verb", required=True, metavar="VERB"
    )

    def verb(
        verb_name: str,
        handler: Any,
        text: str,
        description: str = "",
        aliases: tuple[str, ...] = (),
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = verbs.add_parser(
            verb_name,
            parents=[options],
            help=text,
            description=description or text,
            aliases=list(aliases),
        )
        parser.set_defaults(api_handler=handler)
        return parser

    return verb


def client_kwargs(ctx: Context, args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of a training API client the global options describe."""
    return {
        "base_url": ctx.client.base_url,
        "token": resolve_token(args.token, api_url=ctx.client.base_url) or None,
        "project": args.project,
        "location": args.location,
    }


def positive(text: str) -> int:
    """An argparse type: a positive integer."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def add_list_flags(parser: argparse.ArgumentParser, what: str, example_filter: str) -> None:
    """gcloud's list flags: ``--filter``, ``--sort-by``, ``--limit``, ``--page-size``."""
    parser.add_argument("--filter", default="", help=f"e.g. {example_filter!r}")
    parser.add_argument(
        "--sort-by",
        default="",
        metavar="FIELD,...",
        help="order by these fields, ~ before one for descending, e.g. '~createTime'",
    )
    parser.add_argument("--limit", type=positive, help=f"at most this many {what} [all]")
    parser.add_argument("--page-size", type=positive, help=f"{what} per request [100]")


def order_by(sort_by: str) -> str:
    """gcloud's ``--sort-by`` (``~createTime,displayName``) as the API's ``orderBy``
    (``createTime desc, displayName``)."""
    fields = []
    for item in sort_by.split(","):
        name = item.strip()
        if not name:
            continue
        descending = name.startswith("~")
        name = name.removeprefix("~").strip()
        if not name:
            raise UsageError(f"--sort-by: {item!r} names no field")
        fields.append(f"{name} desc" if descending else name)
    return ", ".join(fields)


def read_config(path: Path, what: str) -> JsonObject:
    """A ``--config`` file (YAML or JSON) holding a mapping, its keys camelCase whichever
    style it was written in (``study_spec`` and ``studySpec`` alike); ``what`` names the
    mapping expected, for the error."""
    converted: JsonObject = camel_case_keys(read_mapping(path, what))
    return converted


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """A ``--config`` file (YAML or JSON) holding a mapping, as written; ``what`` names the
    mapping expected, for the error."""
    try:
        text = path.read_text()
    except OSError as error:
        raise UsageError(f"--config {path}: {error.strerror or error}") from None
    try:
        document = json.loads(text)
    except ValueError:
        document = _yaml(text, path)
    if not isinstance(document, dict):
        raise UsageError(f"--config {path}: expected a mapping ({what}) at the top")
    return document


def _yaml(text: str, path: Path) -> Any:
    try:
        import yaml  # noqa: PLC0415  # optional: only --config files in YAML need it
    except ImportError:
        raise UsageError(
            f"--config {path}: reading YAML needs PyYAML (pip install pyyaml); JSON works"
            " without it"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise UsageError(f"--config {path}: not valid YAML: {error}") from None


def camel_case(key: str) -> str:
    """``study_spec`` as ``studySpec`` (a camelCase key stays as it is)."""
    return _SNAKE.sub(lambda match: match.group(1).upper(), key)


def camel_case_keys(value: Any) -> Any:
    """``value`` with every mapping key camelCase (proto3 JSON's style), except inside the
    user's own maps (:data:`FREE_FORM_KEYS`: labels, metadata)."""
    if isinstance(value, dict):
        converted: dict[str, Any] = {}
        for key, item in value.items():
            name = camel_case(str(key))
            if name in converted:
                raise UsageError(f"--config: {key!r} is given twice (as {name!r} too)")
            converted[name] = item if name in FREE_FORM_KEYS else camel_case_keys(item)
        return converted
    if isinstance(value, list):
        return [camel_case_keys(item) for item in value]
    return value


def mapping(body: JsonObject, key: str, where: str) -> JsonObject:
    """``body[key]`` when it is a mapping (a copy), else a usage error naming ``where``."""
    value = body.get(key)
    if not isinstance(value, dict):
        raise UsageError(f"{where}: {key} must be a mapping, got {_kind(value)}")
    return dict(value)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def resource_id(resource: JsonObject) -> str:
    """The last segment of a resource's ``name`` (its id)."""
    return str(resource.get("name", "")).rsplit("/", 1)[-1]


def number(value: Any) -> str:
    """A parameter or metric value for a table: integral numbers without ``.0``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)


def list_all(items: Any, limit: int | None) -> list[JsonObject]:
    """Up to ``limit`` items of an iterator of pages' items (all without a limit)."""
    found: list[JsonObject] = []
    for item in items:
        found.append(item)
        if limit and len(found) >= limit:
            break
    return found


def final_status(resource: JsonObject, what: str, succeeded: str) -> int:
    """Say how ``resource`` ended (on stderr); 0 when its state is ``succeeded``, else 1."""
    state = resource.get("state", "")
    line = f"{what} {resource_id(resource)} ended: {state}"
    if state == succeeded:
        print(line, file=sys.stderr)
        return 0
    message = (resource.get("error") or {}).get("message", "")
    print(line + (f": {message}" if message else ""), file=sys.stderr)
    return 1


def emit_cancelled(
    ctx: Context, answer: JsonObject, reference: str, collection: str, what: str, group: str
) -> int:
    """Say that ``reference`` (a ``what`` of ``collection``, shown by ``mldiag <group>
    describe``) was asked to cancel; 0."""
    _, _, resource = parse_resource_name(reference, collection)
    ctx.emit(
        answer,
        lambda: (
            f"asked {what} {resource} to cancel; see it with: mldiag {group} describe {resource}"
        ),
    )
    return 0


def emit_deleted(
    ctx: Context, answer: JsonObject, reference: str, collection: str, what: str
) -> int:
    """Say that ``reference`` (a ``what`` of ``collection``) was deleted; 0."""
    _, _, resource = parse_resource_name(reference, collection)
    ctx.emit(answer, lambda: f"deleted {what} {resource}")
    return 0


def list_flagged(
    iterate: Callable[..., Iterator[JsonObject]], args: argparse.Namespace
) -> list[JsonObject]:
    """Up to ``--limit`` items of a client's ``iter_*`` method, called with the list flags
    (``--filter``, ``--sort-by``, ``--page-size``; :func:`add_list_flags`)."""
    return list_all(
        iterate(filter=args.filter, order_by=order_by(args.sort_by), page_size=args.page_size),
        args.limit,
    )


def emit_list(
    ctx: Context,
    key: str,
    items: list[JsonObject],
    columns: Sequence[str],
    row: Callable[[JsonObject], Sequence[str]],
    empty: str,
) -> int:
    """Show ``items`` as a list page (``{key: items}``) or a table of ``row``s (``empty``
    when there are none); 0."""
    ctx.emit({key: items}, lambda: render_table(columns, map(row, items)) if items else empty)
    return 0


def emit_fields(ctx: Context, resource: JsonObject) -> int:
    """Show ``resource`` as it is, or as a table of its flattened fields; 0."""
    ctx.emit(
        resource,
        lambda: render_fields((key, cell(value)) for key, value in flatten(resource).items()),
    )
    return 0
