"""Profiles on the command line: ``profiles list|describe|capture``, ``targets list`` and
``xprof deploy|list|delete|open``.

``profiles`` and ``targets`` talk to the run-registry; ``xprof`` talks to the
xprof-provisioner (``--xprof-url``, else ``$MLDIAG_XPROF_URL``, else the API URL, whose
edge routes XProf's paths to it), which serves sessions in XProf behind its authenticating proxy.
Tables for people, the APIs' bodies with ``--format json|yaml``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import webbrowser
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from mldiag.api_client import ApiError, JsonObject, XProfClient, xprof_link
from mldiag.cli.common import (
    RUNS,
    api_command_group,
    api_verb,
    resource_argument,
    run_argument,
    same_parent,
)
from mldiag.cli.events import duration
from mldiag.cli.output import add_json_flag, cell, render_fields, render_table, short_time
from mldiag.cli.progress import Progress
from mldiag.credentials import resolve_api_url, resolve_token

if TYPE_CHECKING:
    from collections.abc import Callable

    from mldiag.cli.common import Context

    Verb = Callable[..., argparse.ArgumentParser]

SESSION = resource_argument("profilerSessions", parent=RUNS)
"""An argparse type: a profiler session's id, or its full name (under its run)."""

MAX_CAPTURE_SECONDS = 300.0
"""The longest capture the API takes (``CaptureProfileRequest.durationSeconds``)."""

WAIT_SLICE_SECONDS = 20
"""One ``:wait`` call's timeout: the server holds it that long, under the client's timeout."""

PROGRESS_SLICE_SECONDS = 2
"""One :wait call's timeout while a progress line is shown (it refreshes after each)."""

SESSION_COLUMNS = ("SESSION ID", "KIND", "PHASE", "HOSTS", "DURATION", "CREATED", "DASHBOARD")
"""The columns of ``mldiag profiles list``."""

TARGET_COLUMNS = ("TARGET ID", "HOST", "PROCESS", "ADDRESS", "PID", "REGISTERED", "UPDATED")
"""The columns of ``mldiag targets list``."""

INSTANCE_COLUMNS = ("INSTANCE ID", "STATE", "RUNS", "MEMORY", "LAST ACCESS", "URL")
"""The columns of ``mldiag xprof list``."""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_EXIT_FAILED = 1


# argument types


def duration_argument(text: str) -> float:
    """A duration such as ``2s``, ``500ms``, ``1m`` or ``1.5h`` (a bare number: seconds), as
    a positive number of seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 2s, 500ms or 1m, got {text!r}"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be more than 0, got {text!r}")
    return seconds


def capture_duration(text: str) -> float:
    """``--duration``: a duration of at most 5 minutes (what the API takes)."""
    seconds = duration_argument(text)
    if seconds > MAX_CAPTURE_SECONDS:
        raise argparse.ArgumentTypeError(f"a capture lasts at most 5m, got {text!r}")
    return seconds


def _level(highest: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if not 0 <= value <= highest:
            raise argparse.ArgumentTypeError(f"expected 0 to {highest}, got {text!r}")
        return value

    return parse


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected host names separated by commas, got {text!r}")
    return names


def capture_body(args: argparse.Namespace) -> JsonObject:
    """The ``CaptureProfileRequest`` the ``profiles capture`` options describe."""
    body: JsonObject = {
        "durationSeconds": args.duration,
        "targets": list(args.targets),
        "tracerLevels": {
            "hostTracerLevel": args.host_tracer_level,
            "deviceTracerLevel": args.device_tracer_level,
            "pythonTracerLevel": args.python_tracer_level,
        },
    }
    if args.session_id:
        body["sessionId"] = args.session_id
    return body


# building the parser


def _add_xprof_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--xprof-url",
        metavar="URL",
        help="the xprof-provisioner [$MLDIAG_XPROF_URL, else the API URL]",
    )


def add_profiles_commands(commands: Any) -> None:
    """Add ``profiles`` (also ``profiler-sessions``), ``targets`` (also ``profiler-targets``)
    and ``xprof`` to ``mldiag``'s commands."""
    profiles = api_command_group(
        commands,
        "profiles",
        "list, describe and capture profiles",
        aliases=("profiler-sessions",),
    )
    _add_profiles_verbs(profiles, api_verb)
    targets = api_command_group(
        commands, "targets", "list runs' profiler targets", aliases=("profiler-targets",)
    )
    _add_targets_verbs(targets, api_verb)
    xprof = api_command_group(commands, "xprof", "serve profiles in managed XProf instances")
    _add_xprof_verbs(xprof, api_verb)


def _add_profiles_verbs(verbs: Any, verb: Verb) -> None:
    """``profiles list``, ``profiles describe`` and ``profiles capture``."""
    listing = verb(verbs, "list", _profiles_list, "list a run's profiler sessions (newest first)")
    listing.add_argument("run", metavar="RUN", type=run_argument)
    listing.add_argument("--page-size", type=int, help="sessions per page")
    listing.add_argument("--page-token", default="", help="continue from a page")
    listing.add_argument("--all", action="store_true", help="follow every page")
    add_json_flag(listing)

    describe = verb(
        verbs,
        "describe",
        _profiles_describe,
        "show one session: its hosts with their phases and files, and its link",
    )
    describe.add_argument("run", metavar="RUN", type=run_argument)
    describe.add_argument("session", metavar="SESSION", type=SESSION)
    _add_xprof_url(describe)
    add_json_flag(describe)

    capture = verb(
        verbs,
        "capture",
        _profiles_capture,
        "capture a profile of a running workload now",
        "Trace the run's profiler targets (processes started with a profiler port) for "
        "--duration into a new ON_DEMAND session. Prints the capture's operation; with "
        "--wait, waits for it and prints the session (exit 1 if the capture failed).",
    )
    capture.add_argument("run", metavar="RUN", type=run_argument)
    capture.add_argument(
        "--duration", type=capture_duration, default=2.0, help="e.g. 2s, 500ms, 1m [2s]"
    )
    capture.add_argument(
        "--targets",
        type=_names,
        action="extend",
        default=[],
        metavar="HOST[,HOST...]",
        help="hosts (or target ids) to capture [every registered target]",
    )
    capture.add_argument("--host-tracer-level", type=_level(3), default=2, metavar="0-3")
    capture.add_argument("--device-tracer-level", type=_level(1), default=1, metavar="0-1")
    capture.add_argument(
        "--python-tracer-level",
        type=_level(1),
        default=0,
        metavar="0-1",
        help="1 traces Python calls (much larger profiles) [0]",
    )
    capture.add_argument("--session-id", help="name the session [ondemand-<time>]")
    capture.add_argument("--wait", action="store_true", help="wait until the capture is done")
    capture.add_argument(
        "--timeout",
        type=duration_argument,
        default=300.0,
        metavar="DURATION",
        help="most time --wait waits [5m]",
    )
    _add_xprof_url(capture)
    add_json_flag(capture)


def _add_targets_verbs(verbs: Any, verb: Verb) -> None:
    """``targets list``."""
    listing = verb(
        verbs,
        "list",
        _targets_list,
        "list a run's profiler targets (its processes' profiler servers)",
    )
    listing.add_argument("run", metavar="RUN", type=run_argument)
    add_json_flag(listing)


def _add_xprof_verbs(verbs: Any, verb: Verb) -> None:
    """``xprof deploy``, ``xprof list``, ``xprof delete`` and ``xprof open``."""
    deploy = verb(
        verbs,
        "deploy",
        _xprof_deploy,
        "serve runs' profiles in an XProf instance",
        "Start (or reuse) an XProf instance serving every session of the runs given, "
        "reached through the provisioner's proxy.",
    )
    deploy.add_argument("runs", metavar="RUN", nargs="+", type=run_argument)
    listing = verb(verbs, "list", _xprof_list, "list XProf instances")
    delete = verb(verbs, "delete", _xprof_delete, "stop an XProf instance")
    delete.add_argument("instance", metavar="INSTANCE", help="instance id, or its name")
    opening = verb(
        verbs,
        "open",
        _xprof_open,
        "open a session (default: the run's newest with a file) in XProf in a browser",
        "Print the provisioner's link to a session of the run (the newest one with a file "
        "unless SESSION is given) and open it in a browser. The browser gets the link with "
        "your API token (the provisioner turns it into a cookie); the printed link carries "
        "none.",
    )
    opening.add_argument("run", metavar="RUN", type=run_argument)
    opening.add_argument("session", metavar="SESSION", nargs="?", type=SESSION)
    opening.add_argument("--no-browser", action="store_true", help="only print the link")
    for parser in (deploy, listing, delete, opening):
        _add_xprof_url(parser)
        add_json_flag(parser)


# profiler sessions


def _xprof_url(args: argparse.Namespace) -> str:
    # One base URL: the API's address serves XProf's routes too, unless one is named.
    url: str = (
        getattr(args, "xprof_url", None)
        or os.environ.get("MLDIAG_XPROF_URL")
        or resolve_api_url(getattr(args, "api_url", None))
    )
    return url.rstrip("/")


def _xprof_client(args: argparse.Namespace) -> XProfClient:
    url = _xprof_url(args)
    return XProfClient(url, token=resolve_token(args.token, api_url=url) or None)


def _last_segment(name: Any) -> str:
    return str(name or "").rstrip("/").rsplit("/", 1)[-1]


def _size(value: Any) -> str:
    """Bytes for a person: ``512 B``, ``24.1 KiB``, ``3.2 MiB``."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return ""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""  # unreachable: the loop returns at GiB


def hosts_cell(session: JsonObject) -> str:
    """How many hosts a session has, and how many are not done or failed: ``2``,
    ``3 (1 failed)``, ``2 (1 active)``."""
    hosts = session.get("hosts") or []
    text = str(len(hosts))
    notes = []
    for phase in ("FAILED", "ACTIVE"):
        count = sum(1 for host in hosts if host.get("phase") == phase)
        if count:
            notes.append(f"{count} {phase.lower()}")
    return f"{text} ({', '.join(notes)})" if notes else text


def session_row(session: JsonObject) -> tuple[str, ...]:
    """One session as a row of ``mldiag profiles list``."""
    return (
        cell(session.get("sessionId")),
        cell(session.get("kind")),
        cell(session.get("phase")),
        hosts_cell(session),
        duration(session.get("durationSeconds")),
        short_time(session.get("createTime")),
        cell(session.get("dashboardUri")),
    )


def _levels(levels: Any) -> str:
    if not isinstance(levels, dict):
        return ""
    return (
        f"host {cell(levels.get('hostTracerLevel'))}, "
        f"device {cell(levels.get('deviceTracerLevel'))}, "
        f"python {cell(levels.get('pythonTracerLevel'))}"
    )


def describe_session(session: JsonObject, link: str = "") -> str:
    """A session for a person: its fields, then its hosts with phases and files, then any
    host's error. ``link`` stands in for a session without a ``dashboardUri``."""
    events = session.get("monitoredEvents") or []
    fields = [
        ("name", cell(session.get("name"))),
        ("session", cell(session.get("sessionId"))),
        ("run", cell(session.get("runId"))),
        ("kind", cell(session.get("kind"))),
        ("phase", cell(session.get("phase"))),
        ("duration", duration(session.get("durationSeconds"))),
        ("tracer levels", _levels(session.get("tracerLevels"))),
        ("storage folder", cell(session.get("storageFolderUri"))),
        ("dashboard", cell(session.get("dashboardUri")) or link),
        ("operation", cell(session.get("operation"))),
        ("auto-captured", "yes" if session.get("autoCaptured") else ""),
        ("events", ", ".join(str(event) for event in events)),
        ("caches warmed", "yes" if session.get("prewarmed") else ""),
        ("created", short_time(session.get("createTime"))),
        ("updated", short_time(session.get("updateTime"))),
        ("ended", short_time(session.get("endTime"))),
    ]
    lines = render_fields((key, value) for key, value in fields if value).splitlines()
    hosts = session.get("hosts") or []
    if not hosts:
        return "\n".join([*lines, "", "hosts: none yet"])
    rows = [
        (
            cell(host.get("host")),
            cell(host.get("phase")),
            _size(host.get("sizeBytes")),
            short_time(host.get("startTime")),
            cell(host.get("fileUri")),
        )
        for host in hosts
    ]
    table = render_table(("HOST", "PHASE", "SIZE", "STARTED", "FILE"), rows)
    lines += ["", "hosts", *("  " + line for line in table.splitlines())]
    failed = [host for host in hosts if host.get("error")]
    if failed:
        lines += ["", "errors", *(f"  {host.get('host')}: {host['error']}" for host in failed)]
    return "\n".join(lines)


def _profiles_list(ctx: Context, args: argparse.Namespace) -> int:
    if args.all:
        sessions = list(ctx.client.iter_profiler_sessions(args.run, page_size=args.page_size))
        page: JsonObject = {"profilerSessions": sessions, "nextPageToken": ""}
    else:
        page = ctx.client.list_profiler_sessions(
            args.run, page_size=args.page_size, page_token=args.page_token
        )
    sessions = page.get("profilerSessions", [])

    def table() -> str:
        if not sessions:
            return f"no profiler sessions in run {args.run}"
        text = render_table(SESSION_COLUMNS, (session_row(s) for s in sessions))
        if token := page.get("nextPageToken"):
            text += f"\n\nmore sessions: --page-token {token} (or --all)"
        return text

    ctx.emit(page, table)
    return 0


def _session_link(args: argparse.Namespace, run_id: str, session_id: str) -> str:
    return xprof_link(_xprof_url(args), run_id, session_id)


def _profiles_describe(ctx: Context, args: argparse.Namespace) -> int:
    same_parent(args.session, args.run, "RUN")
    session = ctx.client.get_profiler_session(args.run, args.session)
    link = _session_link(args, args.run, args.session)
    ctx.emit(session, lambda: describe_session(session, link))
    return 0


def _capture_session_id(operation: JsonObject) -> str:
    response = operation.get("response") or {}
    if isinstance(response, dict) and response.get("sessionId"):
        return str(response["sessionId"])
    target = str((operation.get("metadata") or {}).get("target", ""))
    return _last_segment(target) if "/profilerSessions/" in target else ""


def _capture_started(operation: JsonObject, args: argparse.Namespace) -> str:
    operation_id = _last_segment(operation.get("name"))
    session = _capture_session_id(operation)
    what = f"session {session}, " if session else ""
    targets = ", ".join(args.targets) if args.targets else "every target"
    return (
        f"capture started: operation {operation_id} ({what}{duration(args.duration)} on "
        f"{targets})\nfollow it: mldiag operations wait {operation_id}  (or capture with --wait)"
    )


def _wait_until_done(ctx: Context, operation: JsonObject, timeout: float, run: str) -> JsonObject:
    """The operation once done, or as it stands after ``timeout`` seconds; on the way, a
    progress line with the session's per-host phases (for ``table`` output only)."""
    operation_id = _last_segment(operation.get("name"))
    session_id = _last_segment((operation.get("metadata") or {}).get("target"))
    deadline = time.monotonic() + timeout
    with Progress(f"capture {operation_id}", enabled=not ctx.quiet) as progress:
        # A line rewritten in place is kept fresh by shorter :wait calls.
        slice_seconds = PROGRESS_SLICE_SECONDS if progress.in_place else WAIT_SLICE_SECONDS
        while not operation.get("done"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if progress.due():
                progress.update(_capture_status(ctx, run, session_id))
            # One :wait at a time, each shorter than the client's own timeout.
            wait = f"{max(1, min(slice_seconds, int(remaining)))}s"
            operation = ctx.client.wait_operation(operation_id, timeout=wait)
    return operation


def _capture_status(ctx: Context, run: str, session_id: str) -> str:
    """``RUNNING``, with each host's phase once the session lists them (``host-a ACTIVE,
    host-b SUCCEEDED``)."""
    if not session_id:
        return "RUNNING"
    try:
        session = ctx.client.get_profiler_session(run, session_id)
    except ApiError:
        return "RUNNING"  # not written yet: the provisioner is still starting it
    hosts = ", ".join(
        f"{host.get('host', '?')} {host.get('phase', '?')}" for host in session.get("hosts", [])
    )
    return f"{session.get('phase', 'RUNNING')}; {hosts}" if hosts else "RUNNING"


def _profiles_capture(ctx: Context, args: argparse.Namespace) -> int:
    started = ctx.client.capture_profile(args.run, capture_body(args))
    if not args.wait:
        ctx.emit(started, lambda: _capture_started(started, args))
        return 0
    operation = _wait_until_done(ctx, started, args.timeout, args.run)
    operation_id = _last_segment(operation.get("name"))
    if not operation.get("done"):
        ctx.emit(operation, lambda: _capture_started(operation, args))
        print(
            f"error: not_done: capture {operation_id} is still running after "
            f"{duration(args.timeout)}",
            file=sys.stderr,
        )
        return _EXIT_FAILED
    error = operation.get("error")
    if error:
        session_id = _capture_session_id(operation)
        about = f" (session {session_id})" if session_id else ""
        ctx.emit(operation, lambda: f"capture failed: operation {operation_id}{about}")
        print(f"error: {error.get('code', '')}: {error.get('message', '')}", file=sys.stderr)
        return _EXIT_FAILED
    session = operation.get("response") or {}
    link = _session_link(args, args.run, str(session.get("sessionId", "")))
    ctx.emit(operation, lambda: describe_session(session, link))
    return 0


# profiler targets


def target_row(target: JsonObject) -> tuple[str, ...]:
    """One target as a row of ``mldiag targets list``."""
    return (
        cell(target.get("targetId")),
        cell(target.get("host")),
        cell(target.get("processIndex")),
        cell(target.get("address")),
        cell(target.get("pid")),
        short_time(target.get("registerTime")),
        short_time(target.get("updateTime")),
    )


def _targets_list(ctx: Context, args: argparse.Namespace) -> int:
    answer = ctx.client.list_profiler_targets(args.run)
    targets = answer.get("profilerTargets", [])

    def table() -> str:
        if not targets:
            return (
                f"no profiler targets in run {args.run} (start the workload with "
                "mldiag.init(profiler_port=...) or MLDIAG_PROFILER_PORT)"
            )
        return render_table(TARGET_COLUMNS, (target_row(t) for t in targets))

    ctx.emit(answer, table)
    return 0


# XProf instances


def _instance_url(instance: JsonObject, base_url: str) -> str:
    url = str(instance.get("url") or "")
    return f"{base_url}{url}" if url.startswith("/") else url


def instance_row(instance: JsonObject, base_url: str) -> tuple[str, ...]:
    """One instance as a row of ``mldiag xprof list``."""
    return (
        cell(instance.get("instanceId")),
        cell(instance.get("state")),
        ",".join(instance.get("runIds") or []),
        _size(instance.get("memoryBytes")),
        short_time(instance.get("lastAccessTime")),
        _instance_url(instance, base_url),
    )


def describe_instance(instance: JsonObject, base_url: str) -> str:
    """An instance for a person: id, state, runs, where to open it, and any error."""
    head = (
        f"xprof instance {instance.get('instanceId', '?')} {instance.get('state', '')}, "
        f"serving runs {', '.join(instance.get('runIds') or [])}"
    )
    lines = [head]
    if url := _instance_url(instance, base_url):
        lines.append(f"open: {url}")
    if instance.get("error"):
        lines.append(f"error: {instance['error']}")
    return "\n".join(lines)


def _xprof_deploy(ctx: Context, args: argparse.Namespace) -> int:
    with _xprof_client(args) as client:
        instance = client.create_instance(list(dict.fromkeys(args.runs)))
    ctx.emit(instance, lambda: describe_instance(instance, client.base_url))
    return 0


def _xprof_list(ctx: Context, args: argparse.Namespace) -> int:
    with _xprof_client(args) as client:
        answer = client.list_instances()
    instances = answer.get("xprofInstances", [])

    def table() -> str:
        if not instances:
            return "no xprof instances"
        return render_table(INSTANCE_COLUMNS, (instance_row(i, client.base_url) for i in instances))

    ctx.emit(answer, table)
    return 0


def _xprof_delete(ctx: Context, args: argparse.Namespace) -> int:
    instance_id = _last_segment(args.instance)
    with _xprof_client(args) as client:
        answer = client.delete_instance(instance_id)
    state = answer.get("state")
    ctx.emit(
        answer,
        lambda: f"deleted xprof instance {instance_id}" + (f" ({state})" if state else ""),
    )
    return 0


def _newest_landed_session(ctx: Context, run_id: str) -> str | None:
    """The newest session of the run with at least one host's file (sessions come newest
    first)."""
    for session in ctx.client.iter_profiler_sessions(run_id):
        if any(host.get("phase") == "SUCCEEDED" for host in session.get("hosts", [])):
            return str(session["sessionId"])
    return None


def _xprof_open(ctx: Context, args: argparse.Namespace) -> int:
    if args.session:
        same_parent(args.session, args.run, "RUN")
    session = args.session or _newest_landed_session(ctx, args.run)
    if session is None:
        print(
            f"error: no_sessions: run {args.run} has no profile with a file yet"
            f" (mldiag profiles list {args.run})",
            file=sys.stderr,
        )
        return 1
    link = xprof_link(_xprof_url(args), args.run, session)
    ctx.emit({"url": link}, lambda: link)
    if args.no_browser:
        return 0
    # A browser sends no Authorization header: the provisioner takes the token once from
    # the link, keeps it as a cookie and redirects to a URL without it. Never printed.
    token = resolve_token(args.token, api_url=_xprof_url(args))
    opened = f"{link}&{urlencode({'token': token})}" if token else link
    if not webbrowser.open(opened):
        print("no browser to open here: copy the link above", file=sys.stderr)
    return 0
