"""What every API command group of ``mldiag`` shares: the context a handler gets
(:class:`Context`), :class:`UsageError`, the global API options, the client they describe,
the argument types, and the functions that add a command group and its verbs.

The group modules (:mod:`mldiag.cli.runs`, :mod:`mldiag.cli.metrics`, ...) import from here
and never from one another's private names; :func:`mldiag.cli.build_parser` assembles them.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mldiag.api_client import DEFAULT_API_URL, RegistryClient
from mldiag.cli.output import FORMATS, Format, dump
from mldiag.credentials import resolve_token


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
