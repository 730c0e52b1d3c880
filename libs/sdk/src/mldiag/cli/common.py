"""What every API command group of ``mldiag`` shares: the context a handler gets
(:class:`Context`), :class:`UsageError`, the global API options, the client they describe,
the argument types, and the functions that add a command group and its verbs.

The group modules (:mod:`mldiag.cli.runs`, :mod:`mldiag.cli.metrics`, ...) import from here
and never from one another's private names; :func:`mldiag.cli.build_parser` assembles them.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mldiag.api_client import DEFAULT_API_URL, RegistryClient
from mldiag.cli.output import (
    FORMAT_HELP,
    Format,
    dump,
    field_value,
    parse_format,
    projection,
    render_records,
)
from mldiag.credentials import resolve_connection


class UsageError(Exception):
    """The arguments make no sense together (exit status 2)."""


@dataclass(frozen=True, slots=True)
class Listing:
    """A ``list`` verb's output flags: ``--limit``, ``--sort-by`` and ``--uri``."""

    limit: int | None = None
    """Show at most this many items."""
    sort_by: str = ""
    """gcloud's sort keys: dotted fields separated by commas, ``~`` before one for
    descending."""
    uri: bool = False
    """Print each item's full resource name instead of the item."""


@dataclass(frozen=True, slots=True)
class Context:
    """What every API command gets: the client and how to print."""

    client: RegistryClient
    output_format: Format
    listing: Listing | None = None
    """Set for ``list`` verbs: how :meth:`emit` orders, cuts and names the items."""

    def emit(self, body: Any, table: Callable[[], str]) -> None:
        """Print ``body`` in a machine format, or ``table()`` for a person.

        For a ``list`` verb the page's items (its one list) are first sorted and cut to
        ``--sort-by`` and ``--limit`` in place, so that ``table()``, which reads the same
        list, shows them so too; with ``--uri`` only their names are printed.
        """
        items = list_items(body) if self.listing is not None else None
        if items is not None and self.listing is not None:
            items[:] = sort_items(items, self.listing.sort_by)[: self.listing.limit]
            if self.listing.uri:
                for item in items:
                    print(resource_uri(item))
                return
        if self.output_format == "table":
            text = table()
            if text:
                print(text)
        elif projection(self.output_format) is not None:
            text = render_records(items if items is not None else [body], self.output_format)
            if text:
                print(text)
        else:
            print(dump(body, self.output_format))

    @property
    def quiet(self) -> bool:
        """Whether the output is for a program (not ``table``): say nothing else on stdout."""
        return self.output_format != "table"


def list_items(body: Any) -> list[Any] | None:
    """The items of a list answer: the body's one list (``{"runs": [...],
    "nextPageToken": ...}``), or the body when it is a list; ``None`` otherwise."""
    if isinstance(body, list):
        return body
    if not isinstance(body, dict):
        return None
    lists = [value for value in body.values() if isinstance(value, list)]
    return lists[0] if len(lists) == 1 else None


def sort_items(items: list[Any], sort_by: str) -> list[Any]:
    """``items`` ordered by gcloud's ``--sort-by`` keys (``~createTime,displayName``):
    missing values first (last when descending), and a key's values of different kinds
    kept apart rather than compared."""
    ordered = list(items)
    for key in reversed([k.strip() for k in sort_by.split(",") if k.strip()]):
        descending = key.startswith("~")
        path = key.removeprefix("~")
        ordered.sort(key=functools.partial(_sort_key, path), reverse=descending)
    return ordered


def _sort_key(path: str, item: Any) -> tuple[int, str, Any]:
    value = field_value(item, path)
    if value is None:
        return (0, "", 0)
    if isinstance(value, bool | int | float):
        return (1, "number", float(value))
    if isinstance(value, str):
        return (1, "string", value)
    return (1, "other", json.dumps(value, sort_keys=True))


def resource_uri(item: Any) -> str:
    """What ``--uri`` prints for a listed item: its full resource ``name`` (else its
    ``uri``, else the item as JSON)."""
    if isinstance(item, dict):
        for key in ("name", "uri"):
            if isinstance(item.get(key), str) and item[key]:
                return str(item[key])
    return json.dumps(item, sort_keys=True)


def listing_from_args(args: argparse.Namespace) -> Listing | None:
    """The :class:`Listing` of a ``list`` verb's arguments; ``None`` for other verbs."""
    if not getattr(args, "is_listing", False):
        return None
    return Listing(
        limit=getattr(args, "limit", None),
        sort_by=getattr(args, "sort_by", "") or "",
        uri=getattr(args, "uri", False),
    )


Handler = Callable[[Context, argparse.Namespace], int]
"""An API command's handler: the context and the parsed arguments in, the exit status out."""

Verb = Callable[..., argparse.ArgumentParser]
"""Adds one verb to a command group: ``verb(verbs, name, handler, help, description="")``."""


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
        help=f"the platform's API [$MLDIAG_API_URL, else the login's, else {DEFAULT_API_URL}]",
    )
    group.add_argument(
        "--token",
        default=default(None),
        help="API token sent with every request [$MLDIAG_TOKEN, else `mldiag login`'s for"
        " its URL, else the admin token `mldiag up` keeps in $MLDIAG_HOME]",
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
        type=parse_format,
        metavar="FORMAT",
        default=default("table"),
        help=FORMAT_HELP,
    )


def client_from_args(args: argparse.Namespace) -> RegistryClient:
    """The API client the global options describe, else ``MLDIAG_API_URL``/``MLDIAG_TOKEN``,
    else the stored login, else the local stack (:func:`mldiag.credentials.resolve_connection`)."""
    connection = resolve_connection(args.api_url, args.token)
    url, token = connection.api_url, connection.token or None
    return RegistryClient(url, token=token, project=args.project, location=args.location)


LIST_VERBS = frozenset({"list", "versions", "list-version"})
"""The verbs that list resources and so take ``--limit``, ``--sort-by`` and ``--uri``."""


def add_listing_flags(parser: argparse.ArgumentParser) -> None:
    """Give every ``list`` verb under ``parser`` gcloud's ``--limit``, ``--sort-by`` and
    ``--uri`` (each one it does not define itself), and mark it a listing.

    Called once the whole parser is built, so that a group's own ``--limit`` (which stops
    paging at the API) or ``--sort-by`` (sent as the API's ``orderBy``) keeps its meaning;
    :meth:`Context.emit` then applies both to what is shown.
    """
    for name, verb in _verb_parsers(parser):
        if name not in LIST_VERBS or verb.get_default("api_handler") is None:
            continue
        known = verb._option_string_actions  # argparse has no public view
        if "--limit" not in known:
            verb.add_argument("--limit", type=positive, help="show at most this many [all]")
        if "--sort-by" not in known:
            verb.add_argument(
                "--sort-by",
                default="",
                metavar="FIELD,...",
                help="sort by these (dotted) fields, ~ before one for descending,"
                " e.g. '~createTime'",
            )
        verb.add_argument(
            "--uri", action="store_true", help="print each item's full resource name only"
        )
        verb.set_defaults(is_listing=True)


def _verb_parsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every (name, parser) below ``parser``, each once (an alias is not a second one)."""
    found: list[tuple[str, argparse.ArgumentParser]] = []
    seen: set[int] = set()
    for action in parser._actions:  # argparse has no public view
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, child in action.choices.items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            found.append((name, child))
            found += _verb_parsers(child)
    return found


def api_command_group(commands: Any, name: str, help_text: str, aliases: Sequence[str] = ()) -> Any:
    """Add the API command group ``name`` (also reachable as each of ``aliases``) to
    ``mldiag``'s commands; answer its verbs (argparse sub-parsers) for :func:`api_verb`."""
    parser = commands.add_parser(name, help=help_text, description=help_text, aliases=list(aliases))
    return parser.add_subparsers(dest="verb", required=True, metavar="VERB")


def api_verb(
    verbs: Any, name: str, handler: Handler, help_text: str, description: str = ""
) -> argparse.ArgumentParser:
    """Add the verb ``name`` to a group's ``verbs``: it takes the API options after its name
    too, and runs ``handler`` with a :class:`Context`."""
    options = argparse.ArgumentParser(add_help=False)
    add_global_options(options, suppress=True)
    parser: argparse.ArgumentParser = verbs.add_parser(
        name, parents=[options], help=help_text, description=description or help_text
    )
    parser.set_defaults(api_handler=handler)
    return parser


# argument types


def key_value(text: str) -> tuple[str, str]:
    """An argparse type: ``KEY=VALUE`` as a pair."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def config_value(text: str) -> tuple[str, Any]:
    """An argparse type: ``KEY=VALUE`` with VALUE parsed as JSON when it is JSON."""
    key, value = key_value(text)
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value  # not JSON: a string


def positive(text: str) -> int:
    """An argparse type: a positive integer."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return number


def nest(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
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


# resource names


class ResourceRef(str):
    """A resource argument as the id the API paths take (a model's keeps its ``@version``
    or ``@alias``), remembering the project and location of the full name it was given
    (``None`` for a bare id) and, for a nested resource, its parent's id."""

    project: str | None
    location: str | None
    parent: str | None
    full_name: str | None

    def __new__(
        cls,
        resource_id: str,
        project: str | None = None,
        location: str | None = None,
        parent: str | None = None,
        full_name: str | None = None,
    ) -> ResourceRef:
        """The id ``resource_id``, of ``project``/``location`` when ``full_name`` gave them."""
        ref = super().__new__(cls, resource_id)
        ref.project, ref.location, ref.parent = project, location, parent
        ref.full_name = full_name
        return ref


def resource_argument(collection: str, parent: str | None = None) -> Callable[[str], ResourceRef]:
    """An argparse type: an id, or the full name ``projects/P/locations/L/<collection>/ID``
    (``.../<parent>/PID/<collection>/ID`` for a nested resource), as a :class:`ResourceRef`.

    A full name of another collection is a usage error (exit status 2)."""
    shape = (
        f"projects/P/locations/L/{parent}/ID/{collection}/ID"
        if parent
        else (f"projects/P/locations/L/{collection}/ID")
    )

    def parse(text: str) -> ResourceRef:
        parts = text.strip().strip("/").split("/")
        if len(parts) == 1:  # an id ("" too: an option's default, which argparse converts)
            return ResourceRef(parts[0])
        expected = ["projects", "locations", *([parent] if parent else []), collection]
        if len(parts) == 2 * len(expected) and parts[0::2] == expected and all(parts[1::2]):
            return ResourceRef(
                parts[-1],
                project=parts[1],
                location=parts[3],
                parent=parts[5] if parent else None,
                full_name="/".join(parts),
            )
        raise argparse.ArgumentTypeError(f"expected an id or a full name {shape}, got {text!r}")

    parse.__name__ = collection  # argparse names the type in its errors
    return parse


def apply_resource_scope(args: argparse.Namespace) -> None:
    """Set ``args.project`` and ``args.location`` from the full names among the resource
    arguments (:class:`ResourceRef`): a full name's project and location win over the
    options' defaults; one that differs from ``--project``/``--location``, or from another
    full name, is a :class:`UsageError` naming both."""
    refs = [
        value
        for values in vars(args).values()
        for value in (values if isinstance(values, list) else [values])
        if isinstance(value, ResourceRef) and value.project is not None
    ]
    for option in ("project", "location"):
        chosen: str | None = getattr(args, option, None)
        source = f"--{option} {chosen}"
        for ref in refs:
            wanted = getattr(ref, option)
            if chosen is not None and wanted != chosen:
                raise UsageError(
                    f"{source} conflicts with the {option} of {ref.full_name}: give one of them"
                )
            chosen, source = wanted, str(ref.full_name)
        setattr(args, option, chosen)


RUNS = "machineLearningRuns"
"""The collection of runs in full resource names."""

run_argument = resource_argument(RUNS)
"""An argparse type: a run's id or full name (``projects/P/locations/L/machineLearningRuns/ID``)."""


def same_parent(ref: str, parent: str | None, option: str) -> str | None:
    """The parent (run) of a nested resource argument: ``parent`` as given (by ``option``),
    else the one in ``ref``'s full name; a :class:`UsageError` when both name one and they
    differ."""
    if not isinstance(ref, ResourceRef) or ref.parent is None:
        return str(parent) if parent else None
    if parent and str(parent) != ref.parent:
        raise UsageError(f"{option} {parent} is not the run of {ref.full_name}")
    return ref.parent
