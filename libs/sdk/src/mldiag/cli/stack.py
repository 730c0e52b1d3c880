"""``mldiag up`` runs the embedded stack, ``status`` and ``down`` look after it. They talk to
a person, so they print plain text, not log events.
"""

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from mldiag.credentials import LOCAL_TOKEN_FILE, default_home
from mldiag.local.errors import LocalStackError
from mldiag.local.restarts import describe_exit
from mldiag.local.stack import (
    DEFAULT_HEALTH_TIMEOUT,
    SERVICES,
    Component,
    ComponentHealth,
    StackConfig,
    StackReport,
    StackState,
    Supervisor,
    preflight,
    resolve_config,
    service_spec,
    stack_status,
    start_detached,
    stop_stack,
)

PORT_FLAGS: tuple[tuple[str, str, str], ...] = (
    # (flag, key in resolve_config's ports, what it is)
    ("--api-port", "edge", "the API: the one base URL (the edge) [8080]"),
    ("--run-registry-port", "run-registry", "run-registry, behind the edge [8090]"),
    ("--ingestion-port", "ingestion", "ingestion [8081]"),
    ("--ingestion-otlp-grpc-port", "ingestion-otlp-grpc", "ingestion's OTLP/gRPC receiver [4317]"),
    ("--ingestion-otlp-http-port", "ingestion-otlp-http", "ingestion's OTLP/HTTP receiver [4318]"),
    ("--event-detector-port", "event-detector", "event-detector [8082]"),
    ("--analyzer-port", "analyzer", "analyzer [8083]"),
    ("--xprof-provisioner-port", "xprof-provisioner", "xprof-provisioner [8084]"),
    ("--training-port", "training", "training, behind the edge [8085]"),
    ("--executor-port", "executor", "the local executor's health and metrics [8086]"),
    ("--notifier-port", "notifier", "notifier (alerts), behind the edge [8087]"),
    ("--nats-port", "nats", "the embedded NATS server [14222]"),
    ("--nats-monitor-port", "nats-monitor", "NATS monitoring [18222]"),
    ("--postgres-port", "postgres", "the embedded PostgreSQL [15432]"),
    ("--xprof-instance-port", "xprof-instances", "the first XProf instance (loopback) [9100]"),
    (
        "--replica-port",
        "replicas",
        "the first of 1000 ports the local executor gives training replicas [20000]",
    ),
)


def _services_list(text: str) -> list[str]:
    names = [part for part in text.replace(" ", ",").split(",") if part]
    try:
        return [service_spec(name).name for name in names]
    except LocalStackError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_stack_commands(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``up``, ``status`` and ``down`` to ``mldiag``'s subcommands."""
    home = argparse.ArgumentParser(add_help=False)
    home.add_argument(
        "--home",
        help="where the stack keeps data, logs, state and the admin token "
        f"[$MLDIAG_HOME or {default_home({})}]",
    )
    home.add_argument("-v", "--verbose", action="store_true", help="log what happens in detail")

    up = commands.add_parser(
        "up",
        parents=[home],
        help="run NATS, PostgreSQL, storage and the services on this machine",
        description="Run the embedded stack (no Docker): NATS, PostgreSQL, local object "
        "storage and the services, each on its own port of 127.0.0.1. Runs in the "
        "foreground until Ctrl-C unless --detach is given. Every port also reads its "
        "environment variable (MLDIAG_<SERVICE>_PORT, MLDIAG_EMBEDDED_NATS_PORT, "
        "MLDIAG_EMBEDDED_NATS_MONITOR_PORT, MLDIAG_EMBEDDED_POSTGRES_PORT, MLDIAG_PORT_OFFSET).",
    )
    up.add_argument(
        "-d", "--detach", action="store_true", help="run in the background; return once healthy"
    )
    up.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no line per start-up stage (they are only printed on a terminal anyway)",
    )
    for flag, _key, what in PORT_FLAGS:
        up.add_argument(flag, type=int, metavar="PORT", help=f"port of {what}")
    up.add_argument(
        "--port-offset", type=int, metavar="N", help="add N to every port (run a second stack)"
    )
    up.add_argument(
        "--host", help="address the services listen on [$MLDIAG_<SERVICE>_HOST or 127.0.0.1]"
    )
    up.add_argument(
        "--services",
        type=_services_list,
        metavar="LIST",
        help=f"comma-separated services to start [all: {','.join(s.name for s in SERVICES)}]",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_HEALTH_TIMEOUT,
        metavar="SECONDS",
        help=f"how long services may take to become healthy [{DEFAULT_HEALTH_TIMEOUT:.0f}]",
    )
    up.set_defaults(handler=_up)

    status = commands.add_parser(
        "status",
        parents=[home],
        help="show the embedded stack and check its health",
        description="Exit status 0 when the stack is running and healthy, 1 otherwise.",
    )
    status.set_defaults(handler=_status)

    down = commands.add_parser("down", parents=[home], help="stop the embedded stack")
    down.add_argument(
        "--timeout",
        type=float,
        default=45.0,
        metavar="SECONDS",
        help="how long to wait before killing what has not stopped [45]",
    )
    down.set_defaults(handler=_down)


def config_from_args(args: argparse.Namespace) -> StackConfig:
    """The stack configuration ``mldiag up`` arguments (plus the environment) describe."""
    ports = {key: getattr(args, _dest(flag)) for flag, key, _what in PORT_FLAGS}
    return resolve_config(
        args.home,
        ports=ports,
        port_offset=args.port_offset,
        host=args.host,
        services=args.services,
        health_timeout=args.timeout,
    )


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def supervisor_command(config: StackConfig, verbose: bool = False) -> list[str]:
    """The command that runs ``config``'s supervisor in the foreground, with every value
    spelt out, so the background process does not depend on the caller's environment.
    """
    command = [sys.executable, "-m", "mldiag.cli", "up", "--home", str(config.home)]
    for flag, key, _what in PORT_FLAGS:
        command += [flag, str(config.port_of(key))]
    command += ["--port-offset", "0", "--timeout", str(config.health_timeout)]
    hosts = set(config.service_hosts.values())
    if len(hosts) == 1:
        command += ["--host", hosts.pop()]
    # Otherwise each service keeps its MLDIAG_<SERVICE>_HOST, inherited from this environment.
    if config.services_chosen:
        command += ["--services", ",".join(config.services)]
    if verbose:
        command.append("--verbose")
    return command


def _progress_printer(args: argparse.Namespace) -> Callable[[str], None] | None:
    """Where start-up stages go: the terminal, unless ``--quiet`` or stdout is not one (a
    script or a log gets the ready table alone)."""
    if getattr(args, "quiet", False) or not sys.stdout.isatty():
        return None
    return lambda line: print(line, flush=True)


def _up(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    progress = _progress_printer(args)
    if args.detach:
        preflight(config)  # fail fast here rather than in the background
        print(f"starting the mldiag stack in the background (home {config.home}) ...", flush=True)
        # Verbose: up.log is read only when something went wrong, so make it say everything.
        state = start_detached(config, supervisor_command(config, verbose=True), progress=progress)
        print(_ready_table(state, config))
        print(f"\nStop it with: mldiag down --home {config.home}")
        return 0

    def on_ready(state: StackState) -> None:
        print(_ready_table(state, config))
        print("\nPress Ctrl-C to stop.", flush=True)

    code = Supervisor(
        config,
        notify=lambda line: print(line, flush=True),
        progress=progress or (lambda _line: None),
    ).run(on_ready)
    print("stopped." if code == 0 else "stopped after a failure.", flush=True)
    return code


def _ready_table(state: StackState, config: StackConfig) -> str:
    seconds = f"{state.ready_seconds:.1f}s" if state.ready_seconds is not None else "?"
    rows = [
        (c.label, c.url, f"pid {c.pid}" if c.pid else "", _short(c.log, config.home))
        for c in state.components
    ]
    rows.append(("logs", str(config.logs_dir), "", ""))
    # Where the token is, never the token: `mldiag login --local` or the console reads it.
    rows.append(("admin token", str(config.home / LOCAL_TOKEN_FILE), "", ""))
    # The console is on the API address: the edge's, or the registry's own without an edge.
    urls = {c.name: c.url for c in state.components}
    api = urls.get("edge") or urls.get("run-registry")
    if api:
        rows.insert(0, ("console", f"{api.rstrip('/')}/console/", "", "sign in: admin-token"))
    lines = [f"mldiag is up in {seconds} (supervisor pid {state.supervisor_pid})", ""]
    lines += _table(rows)
    for name in state.skipped:
        lines.append(f"  (not started: {name}, not installed)")
    return "\n".join(lines)


def _short(path: str | None, home: Path) -> str:
    if not path:
        return ""
    try:
        return str(Path(path).relative_to(home))
    except ValueError:
        return path


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def _status(args: argparse.Namespace) -> int:
    home = resolve_config(args.home).home
    report = stack_status(home)
    if report.state is None:
        print(f"not running (no stack recorded in {home})")
        return 1
    if not report.running:
        print(f"not running: the supervisor (pid {report.state.supervisor_pid}) is gone")
        if any(health.alive for health in report.components):
            print(f"some of its processes still run; `mldiag down --home {home}` stops them")
        return 1
    print(_status_table(report, report.state, home))
    return 0 if report.healthy else 1


def _status_table(report: StackReport, state: StackState, home: Path) -> str:
    failed = [c.name for c in state.components if c.state == "failed"]
    if report.healthy:
        headline = f"healthy (supervisor pid {state.supervisor_pid}, up since {state.started_at})"
    elif state.status != "healthy":
        headline = f"{state.status} (supervisor pid {state.supervisor_pid})"
    elif failed:
        headline = (
            f"degraded: {', '.join(failed)} failed (crash loop); the rest keeps running "
            f"(supervisor pid {state.supervisor_pid})"
        )
    else:
        sick = [h.component.name for h in report.components if not h.healthy]
        headline = f"unhealthy: {', '.join(sick)} (supervisor pid {state.supervisor_pid})"
    rows = [("COMPONENT", "STATE", "URL", "PID", "RESTARTS", "LOG")]
    for health in report.components:
        c = health.component
        restarts = str(c.restarts) if c.kind != "storage" else ""
        pid = str(c.pid or "") if c.state != "failed" else ""
        rows.append((c.label, _condition(health), c.url, pid, restarts, _short(c.log, home)))
    lines = [f"mldiag stack in {home}: {headline}", "", *_table(rows)]
    notes = [_restart_note(c) for c in state.components if c.restarts or c.state != "running"]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def _condition(health: ComponentHealth) -> str:
    state = health.component.state
    if state == "failed":
        return "failed"
    if state == "restarting":
        return "restarting"
    return "healthy" if health.healthy else ("unhealthy" if health.alive else "exited")


def _restart_note(component: Component) -> str:
    """One line on a component's restarts: how many, when, after what exit."""
    count = component.restarts
    restarted = (
        f"restarted {count} time{'s' if count != 1 else ''}, last at {component.last_restart_at}"
        if count
        else "not restarted yet"
    )
    last_exit = describe_exit(component.last_exit_status)
    if component.state == "failed":
        return (
            f"  {component.name}: failed in a crash loop ({restarted}; last exit: {last_exit}); "
            "the supervisor gave up on it: read its log, then `mldiag down` and `mldiag up`"
        )
    return f"  {component.name}: {restarted}; last exit: {last_exit}"


def _down(args: argparse.Namespace) -> int:
    home = resolve_config(args.home).home
    result = stop_stack(home, timeout=args.timeout, notify=print)
    print("stopped." if result.was_running else f"not running (nothing to stop in {home})")
    return 0
