"""The ``mldiag`` command line.

``up``, ``status`` and ``down`` look after the embedded stack (:mod:`mldiag.cli.stack`);
``runs``, ``metrics``, ``operations``, ``configs``, ``events``, ``rules`` and ``auth`` talk to
the run-registry API (one module each, sharing :mod:`mldiag.cli.common`); ``profiles``,
``targets`` and ``xprof`` to the registry and the xprof-provisioner
(:mod:`mldiag.cli.profiles`); ``jobs``, ``hp-tuning-jobs``,
``training-pipelines`` and ``models`` to the training API (:mod:`mldiag.cli.jobs`,
:mod:`mldiag.cli.tuning`, :mod:`mldiag.cli.pipelines`, :mod:`mldiag.cli.models`); ``alerts``
to the notifier (:mod:`mldiag.cli.alerts`). It talks to a person, so it prints plain text,
not log events.

Exit status: 0 done, 1 the API (or the stack) refused (``error: <code>: <message>``),
2 a usage error, 3 the API did not answer.
"""

import argparse
import importlib.metadata
import logging
import sys
from collections.abc import Sequence

import mldiag
from mldiag.api_client import ApiError, ApiUnreachable
from mldiag.cli.agent import add_agent_command
from mldiag.cli.alerts import add_alerts_commands
from mldiag.cli.auth import add_auth_commands
from mldiag.cli.common import (
    Context,
    UsageError,
    add_global_options,
    add_listing_flags,
    apply_resource_scope,
    client_from_args,
    listing_from_args,
)
from mldiag.cli.completion import add_completion_command
from mldiag.cli.configs import add_configs_commands
from mldiag.cli.events import add_events_commands
from mldiag.cli.imports import add_import_commands
from mldiag.cli.jobs import add_jobs_commands
from mldiag.cli.login import add_login_commands
from mldiag.cli.logs import add_logs_command
from mldiag.cli.metrics import add_metrics_commands
from mldiag.cli.models import add_models_commands
from mldiag.cli.operations import add_operations_commands
from mldiag.cli.output import Format
from mldiag.cli.pipelines import add_pipelines_commands
from mldiag.cli.profiles import add_profiles_commands
from mldiag.cli.rules import add_rules_commands
from mldiag.cli.runs import add_runs_commands
from mldiag.cli.stack import add_stack_commands, config_from_args, supervisor_command
from mldiag.cli.substrate import add_substrate_command
from mldiag.cli.supervise import add_run_command
from mldiag.cli.sync import add_sync_command
from mldiag.cli.tuning import add_tuning_commands
from mldiag.local.errors import LocalStackError
from mldiag.login import LoginFileError

__all__ = ["build_parser", "config_from_args", "main", "supervisor_command"]

EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mldiag`` (exposed for tests and documentation)."""
    parser = argparse.ArgumentParser(
        prog="mldiag", description="Monitor, profile and diagnose ML workloads."
    )
    add_global_options(parser, suppress=False)
    parser.add_argument("--version", action="version", version=f"mldiag {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_stack_commands(commands)
    add_login_commands(commands)
    add_runs_commands(commands)
    add_metrics_commands(commands)
    add_operations_commands(commands)
    add_configs_commands(commands)
    add_events_commands(commands)
    add_rules_commands(commands)
    add_profiles_commands(commands)
    add_auth_commands(commands)
    add_logs_command(commands)
    add_import_commands(commands)
    add_jobs_commands(commands)
    add_tuning_commands(commands)
    add_pipelines_commands(commands)
    add_models_commands(commands)
    add_alerts_commands(commands)
    add_run_command(commands)
    add_agent_command(commands)
    add_substrate_command(commands)
    add_sync_command(commands)
    add_completion_command(commands, parser)
    add_listing_flags(parser)  # last: every group's list verbs exist by now
    return parser


def installed_version() -> str:
    """The installed distribution's version (``mldiag-sdk``, formerly ``mldiag``), else
    ``mldiag.__version__``, else ``unknown``."""
    for distribution in ("mldiag-sdk", "mldiag"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return str(getattr(mldiag, "__version__", "unknown"))


def _run_api_command(args: argparse.Namespace) -> int:
    output_format: Format = args.output_format
    try:
        apply_resource_scope(args)
        with client_from_args(args) as client:
            context = Context(client, output_format, listing_from_args(args))
            code: int = args.api_handler(context, args)
            return code
    except UsageError as error:
        print(f"mldiag {args.command} {args.verb}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except ApiUnreachable as error:
        if error.service == "xprof-provisioner":
            what, option = "the xprof-provisioner", "--xprof-url / MLDIAG_XPROF_URL"
        else:
            what, option = "the mldiag API", "--api-url / MLDIAG_API_URL"
        print(
            f"error: cannot reach {what} at {error.url} ({error.detail}); "
            f"start it with `mldiag up`, or point {option} at it",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE
    except ApiError as error:
        print(f"error: {error.code}: {error.message}", file=sys.stderr)
        return EXIT_API_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mldiag`` with ``argv`` (default: the process's arguments); return the exit status.

    Usage errors found by the parser exit with status 2 (``SystemExit``), as argparse does.
    """
    args = build_parser().parse_args(argv)
    if getattr(args, "verbose", False):
        logging.basicConfig(
            level=logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s %(message)s",
            stream=sys.stderr,
        )
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per health poll
    try:
        if hasattr(args, "api_handler"):
            return _run_api_command(args)
        code: int = args.handler(args)
    except LocalStackError as error:
        print(f"mldiag {args.command}: {error}", file=sys.stderr)
        return 1
    except LoginFileError as error:  # a broken stored login, met while resolving the URL
        print(f"mldiag {args.command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`mldiag status | head`); not worth a traceback.
        sys.stderr.close()
        return 1
    return code
