"""``mldiag run -- COMMAND``: any program as a monitored run, without the SDK in it.

The wrapper creates the run through the SDK (the same settings, spool, retries and
credentials as ``mldiag.init``), starts the program with the run id in its environment,
samples its process tree and the host, passes its output through while keeping the last
lines, and at the end turns the exit status into the run's final state: COMPLETED on 0,
else a ``PROCESS_EXITED`` signal and FAILED with the error code (``exit_<n>`` or the
signal's name) and the last lines of stderr. It exits with the program's status (128 + the
signal for a signal, as a shell does).

An SDK inside the program attaches to the same run (``MLDIAG_RUN_ID``) and is told the run
is not its own to create or end (``MLDIAG_CREATE_RUN=0``): the wrapper, which outlives the
program, decides the final state.

``--replica NAME`` is the launcher of a training job's replica (an executor starts it): it
attaches to the job's run (``MLDIAG_RUN_ID``) without creating or ending it (the training
service owns the run's state), sends heartbeats and system metrics with NAME as the host,
reports a failed exit as a signal, writes ``--exit-file`` atomically for the executor and
exits with the program's status. It points ``$CLOUD_ML_HP_METRIC_FILE`` (unless set) at a
file beside the exit file and, on the chief, forwards each ``cloudml-hypertune`` report
written there as a run metric (:mod:`mldiag.hypertune`). A platform that cannot be reached
never holds or fails the replica: telemetry is spooled and the final flush is short.

Every line the program writes (stdout and stderr) is also shipped to the run's logs
(:class:`mldiag.logs.LogShipper`) with the host, the pid and the stream, beside two lines of
mldiag's own (``SYSTEM``): ``started pid …`` and ``exited with status …`` (or ``killed by
…``). A line redrawn with carriage returns (a progress bar) is shipped as a terminal shows
it. The lines are flushed before the run's final state is set (and before a replica's exit
file is written), bounded, so a run that has ended has its lines stored. ``--no-logs`` or
``MLDIAG_LOGS=0`` turns shipping off.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import FrameType
from typing import IO, Any, TextIO

import mldiag
from mldiag.cli.common import config_value as _config_value
from mldiag.cli.common import key_value as _key_value
from mldiag.cli.common import nest as _nest
from mldiag.config import Settings, contention_interval, env_seconds
from mldiag.control import ControlStatus, HttpRunControl, RunControl, RunPhase, RunSpec
from mldiag.hypertune import METRIC_FILE_ENV, MetricFileForwarder, attempt_metric_file
from mldiag.logs import STDERR, STDOUT, SYSTEM, LogShipper, ship_enabled
from mldiag.process_tree import (
    PROCESS_RSS,
    RUN_ID_ENV,
    host_only_source,
    memory_limit_bytes,
    oom_kill_count,
    process_tree_source,
)
from mldiag.run import Run
from mldiag.signals import SignalKind
from mldiag.system import (
    Sample,
    SystemSampler,
    contention_source,
    gpu_source,
    point_labels,
)
from mldiag.transport import client

logger = logging.getLogger("mldiag")

CREATE_RUN_ENV = "MLDIAG_CREATE_RUN"
"""Set to ``0`` in the program's environment: an SDK there records into the run but neither
creates nor ends it (the wrapper does)."""

DEFAULT_TAIL_LINES = 200
MAX_MESSAGE_CHARS = 8000
"""How much of the output's tail a signal and the run's error details carry."""

_READ_CHUNK = 64 * 1024
_MAX_LINE = 4096
"""Bytes kept of one line: a line that never ends must not grow the tail without bound."""
_POLL_SECONDS = 0.25
_DRAIN_SECONDS = 2.0
"""How long the output may keep flowing after the program ended (a process it left behind
may hold the pipe open for ever)."""
_CREATE_WAIT_SECONDS = 5.0
_REPLICA_SHUTDOWN_SECONDS = 5.0
"""Most seconds a replica's launcher spends flushing telemetry after the program ended."""
_REPLICA_HEARTBEAT_SECONDS = 10.0
_REPORTS_FLUSH_SECONDS = 2.0
"""Most seconds a replica's forwarded tuning reports may hold its exit file back."""
_REPLICA_LOGS_FLUSH_SECONDS = 2.0
"""Most seconds a replica's last lines may hold its exit file back (the executor reports
the replica's end, and the job may end, once it is written)."""
_SHIPPED_LINE_BYTES = 4 * 16_384
"""Bytes kept of an unfinished line for shipping: enough for the longest line the platform
takes (16,384 characters of up to 4 bytes); the shipper cuts what is longer."""
_NEAR_LIMIT = 0.9
_OOM_MARKERS = (
    "MemoryError",
    "out of memory",
    "Out of memory",
    "OOM",
    "oom-kill",
    "oom_kill",
    "Cannot allocate memory",
)
"""Words in the output that, with a SIGKILL, say the kernel's OOM killer struck."""


# --- the command line -------------------------------------------------------------------


def add_run_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``run`` to ``mldiag``'s subcommands."""
    parser = commands.add_parser(
        "run",
        help="run a program as a monitored run (no SDK needed)",
        description="Run COMMAND as a monitored run: create the run, sample the program's "
        "process tree and the host, pass its output through, and record how it ended. "
        "The run id reaches the program as $MLDIAG_RUN_ID, so an SDK inside attaches to "
        "the same run. Exits with the program's status (128+N when signal N ended it).",
        usage="mldiag run [options] -- COMMAND [ARG ...]",
    )
    parser.add_argument("--name", default="", help="display name [the run id]")
    parser.add_argument(
        "--run-id", help="the run's id [$MLDIAG_RUN_ID, else derived from the workload]"
    )
    parser.add_argument("--run-set", default="default", help="group of related runs [default]")
    parser.add_argument(
        "--label",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label of the run",
    )
    parser.add_argument(
        "--config",
        type=_config_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a user config (VALUE read as JSON when it parses; a.b=1 nests)",
    )
    parser.add_argument(
        "--tail-lines",
        type=_non_negative_int,
        default=DEFAULT_TAIL_LINES,
        metavar="N",
        help=f"lines of stdout and of stderr kept for the failure report [{DEFAULT_TAIL_LINES}]",
    )
    parser.add_argument(
        "--interval",
        type=seconds_argument,
        metavar="SECONDS",
        help="seconds between system samples, 0 for none [$MLDIAG_SYSTEM_METRICS_INTERVAL or 10]",
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=seconds_argument,
        default=None,
        metavar="SECONDS",
        help="heartbeats of the wrapper itself, 0 for none [0: an SDK in the program sends its"
        " own; with --replica $MLDIAG_HEARTBEAT_INTERVAL or 10]",
    )
    parser.add_argument(
        "--replica",
        metavar="NAME",
        help="launch a training job's replica NAME (e.g. workerpool0-0): attach to the run "
        "$MLDIAG_RUN_ID without creating or ending it, with NAME as the host",
    )
    parser.add_argument(
        "--exit-file",
        type=Path,
        metavar="PATH",
        help="write how the program ended here (JSON, atomically) when it ends",
    )
    parser.add_argument(
        "--no-logs",
        action="store_true",
        help="do not ship the program's output to the run's logs [shipped unless $MLDIAG_LOGS=0]",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print the run id")
    add_platform_options(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    parser.set_defaults(handler=run_command)


def add_platform_options(parser: argparse.ArgumentParser, *, api: bool = True) -> None:
    """``--api-url`` (with ``api``), ``--ingestion-url`` and ``--token``; ``mldiag`` accepts
    the first and the last before the command's name too."""
    if api:
        parser.add_argument(
            "--api-url",
            default=argparse.SUPPRESS,
            metavar="URL",
            help="the run-registry API [$MLDIAG_API_URL]",
        )
    parser.add_argument(
        "--ingestion-url",
        metavar="URL",
        help="where writes go [$MLDIAG_INGESTION_URL, else the API URL]",
    )
    parser.add_argument("--token", default=argparse.SUPPRESS, help="API token [$MLDIAG_TOKEN]")


def run_command(args: argparse.Namespace) -> int:
    """``mldiag run``: supervise ``args.command``; the program's exit status."""
    command: list[str] = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    exit_file: Path | None = args.exit_file
    if not command:
        message = "mldiag run: error: no command given (mldiag run -- COMMAND ...)"
        print(message, file=sys.stderr)
        write_exit_file(exit_file, 2, message)
        return 2
    if args.replica is not None:
        return _run_replica(args, command, exit_file)
    interval = args.interval
    if interval is None:
        interval = env_seconds(os.environ, "MLDIAG_SYSTEM_METRICS_INTERVAL", 10.0)
    settings = Settings.resolve(
        api_url=args.api_url, ingestion_url=args.ingestion_url, token=args.token
    )
    control = WatchedControl(
        HttpRunControl(client(settings.token, settings.request_timeout), settings.api_url)
    )
    run = mldiag.init(
        name=args.name,
        run_set=args.run_set,
        configs=_nest(args.config),
        labels=dict(args.label),
        run_id=args.run_id,
        api_url=args.api_url,
        ingestion_url=args.ingestion_url,
        token=args.token,
        handle_exit=False,  # the wrapper ends the run itself, from the program's exit
        log_system_metrics=False,  # sampled below: the program's tree, not this process
        heartbeat_interval=args.heartbeat_interval or 0.0,
        control=control,
    )
    if not args.quiet:
        print(f"mldiag run: run {run.run_id}", file=sys.stderr, flush=True)
    supervisor = Supervisor(
        run,
        command,
        environment=child_environment(run, token=args.token, sampled=interval > 0),
        tail_lines=args.tail_lines,
        interval=interval,
        created=control.answered if run.is_primary else None,
        exit_file=exit_file,
        ship_logs=not args.no_logs and ship_enabled(os.environ),
    )
    return supervisor.run()


def _run_replica(args: argparse.Namespace, command: list[str], exit_file: Path | None) -> int:
    """``mldiag run --replica NAME``: a job's replica, in the job's run (see the module)."""
    return _replica(
        args.replica,
        command,
        exit_file,
        run_id=args.run_id,
        name=args.name,
        interval=args.interval,
        heartbeat=args.heartbeat_interval,
        tail_lines=args.tail_lines,
        api_url=args.api_url,
        ingestion_url=args.ingestion_url,
        token=args.token,
        ship_logs=not args.no_logs,
    )


def supervise_replica(
    replica: str,
    command: list[str],
    exit_file: Path | None,
    started: subprocess.Popen[bytes] | OSError,
    *,
    launched_at: float | None = None,
) -> int:
    """Supervise a replica's program that ``replica_launcher`` already started (or failed to
    start), exactly as ``mldiag run --replica`` would; settings from the environment.
    ``launched_at`` (``time.time()`` before the start): older tuning reports are not this
    attempt's."""
    return _replica(replica, command, exit_file, started=started, launched_at=launched_at)


def _replica(
    replica: str,
    command: list[str],
    exit_file: Path | None,
    *,
    started: subprocess.Popen[bytes] | OSError | None = None,
    launched_at: float | None = None,
    run_id: str | None = None,
    name: str = "",
    interval: float | None = None,
    heartbeat: float | None = None,
    tail_lines: int = DEFAULT_TAIL_LINES,
    api_url: str | None = None,
    ingestion_url: str | None = None,
    token: str | None = None,
    ship_logs: bool = True,
) -> int:
    run_id = run_id or os.environ.get(RUN_ID_ENV, "")
    if not replica or not run_id:
        message = "mldiag run: error: --replica needs a NAME and the run ($MLDIAG_RUN_ID)"
        print(message, file=sys.stderr)
        write_exit_file(exit_file, 2, message)
        if isinstance(started, subprocess.Popen):
            started.kill()
        return 2
    # The replica is the host of everything recorded, here and in an SDK in the program;
    # the run is the training service's to create and end.
    os.environ["MLDIAG_HOST"] = replica
    os.environ[CREATE_RUN_ENV] = "0"
    # cloudml-hypertune's reports: a file of this attempt unless the user chose one (the
    # library's default is shared by every trial on the machine). The launcher set it already.
    if not os.environ.get(METRIC_FILE_ENV):
        metric_file = attempt_metric_file(exit_file)
        with contextlib.suppress(OSError):  # the library makes it too
            metric_file.parent.mkdir(parents=True, exist_ok=True)
        os.environ[METRIC_FILE_ENV] = str(metric_file)
    launched_at = time.time() if launched_at is None else launched_at
    if interval is None:
        interval = env_seconds(os.environ, "MLDIAG_SYSTEM_METRICS_INTERVAL", 10.0)
    if heartbeat is None:
        heartbeat = env_seconds(os.environ, "MLDIAG_HEARTBEAT_INTERVAL", _REPLICA_HEARTBEAT_SECONDS)
    run = mldiag.init(
        name=name,
        run_id=run_id,
        api_url=api_url,
        ingestion_url=ingestion_url,
        token=token,
        create_run=False,
        handle_exit=False,
        replay_all=False,  # a replica replays its own run's spool, not the machine's
        log_system_metrics=False,
        heartbeat_interval=heartbeat,
        shutdown_timeout=_REPLICA_SHUTDOWN_SECONDS,
    )
    supervisor = Supervisor(
        run,
        command,
        environment=child_environment(run, token=token, sampled=interval > 0),
        tail_lines=tail_lines,
        interval=interval,
        exit_file=exit_file,
        started=started,
        hypertune=MetricFileForwarder(
            Path(os.environ[METRIC_FILE_ENV]), run.record, replica=replica, since=launched_at
        ),
        ship_logs=ship_logs and ship_enabled(os.environ),
    )
    return supervisor.run()


def write_exit_file(path: Path | None, status: int, message: str) -> None:
    """Write ``{exit_code, ended_at, message}`` to ``path`` through a temporary name beside
    it, so a reader (the executor) never sees half of it; nothing when ``path`` is None."""
    if path is None:
        return
    record = {
        "exit_code": status,
        "ended_at": datetime.now(UTC).isoformat(),
        "message": message[-MAX_MESSAGE_CHARS:],
    }
    temporary = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(record))
        temporary.replace(path)
    except OSError as error:
        logger.warning("mldiag.run.exit_file_failed path=%s error=%r", path, error)


def child_environment(run: Run, *, token: str | None, sampled: bool) -> dict[str, str]:
    """The program's environment: ours, plus what an SDK inside needs to join the run."""
    environment = dict(os.environ)
    environment[RUN_ID_ENV] = run.run_id
    environment[CREATE_RUN_ENV] = "0"
    environment["MLDIAG_API_URL"] = run.settings.api_url
    environment["MLDIAG_INGESTION_URL"] = run.settings.ingestion_url
    if token:  # given on the command line: the program would not find it otherwise
        environment["MLDIAG_TOKEN"] = token
    if sampled:
        # The wrapper samples the host and the whole tree, the program included: a second
        # sampler in the program would write the same series of this host again.
        environment["MLDIAG_SYSTEM_METRICS_INTERVAL"] = "0"
    # Output that a Python program holds in its buffers when it is killed is lost to the
    # tail (and to the person watching): unbuffered unless the caller chose otherwise.
    environment.setdefault("PYTHONUNBUFFERED", "1")
    return environment


# --- supervising ------------------------------------------------------------------------


class WatchedControl:
    """The SDK's run control, telling when the first create attempt has been answered and
    saying so when the final phase is refused (an SDK in the program ended the run)."""

    def __init__(self, inner: RunControl) -> None:
        self._inner = inner
        self.answered = threading.Event()

    def ensure_run(self, spec: RunSpec, timeout: float) -> ControlStatus:
        """Create the run, or attach to it (see :class:`~mldiag.control.RunControl`)."""
        try:
            return self._inner.ensure_run(spec, timeout)
        finally:
            self.answered.set()

    def set_phase(
        self,
        run_id: str,
        phase: RunPhase,
        error: str | None,
        timeout: float,
        *,
        code: str | None = None,
    ) -> ControlStatus:
        """Move the run to ``phase`` (see :class:`~mldiag.control.RunControl`)."""
        status = self._inner.set_phase(run_id, phase, error, timeout, code=code)
        if status is ControlStatus.GIVE_UP and phase is not RunPhase.ACTIVE:
            logger.warning(
                "mldiag.run.final_phase_refused run=%s phase=%s (ended already?)",
                run_id,
                phase.value,
            )
        return status


@dataclass(frozen=True, slots=True)
class ExitReport:
    """How the program ended, in the words of the run and of the shell."""

    status: int
    """The wrapper's exit status: the program's, or 128 + the signal that killed it."""
    exit_code: int | None
    """The program's exit code; None when a signal ended it."""
    signal: str | None
    """The signal that ended it (``SIGKILL``), if one did."""
    reason: str
    """``""`` on success, else ``oom_killed``, ``killed`` or ``exit_code``."""
    code: str
    """The run's ``errorDetails.code``: the signal's name or ``exit_<n>``."""

    @property
    def succeeded(self) -> bool:
        """Whether the program exited with status 0."""
        return self.status == 0


def classify_exit(returncode: int, *, oom_evidence: bool) -> ExitReport:
    """The report of a ``Popen.returncode`` (negative: killed by that signal).

    ``oom_killed`` needs a SIGKILL (or a shell's 137 for one) and ``oom_evidence``: a
    SIGKILL alone is also what ``kill -9`` and schedulers send.
    """
    if returncode < 0:
        name = _signal_name(-returncode)
        sigkill = -returncode == signal.SIGKILL
        reason = "oom_killed" if sigkill and oom_evidence else "killed"
        return ExitReport(128 - returncode, None, name, reason, name)
    if returncode == 0:
        return ExitReport(0, 0, None, "", "")
    reason = "oom_killed" if returncode == 128 + signal.SIGKILL and oom_evidence else "exit_code"
    return ExitReport(returncode, returncode, None, reason, f"exit_{returncode}")


def oom_in_output(text: str) -> bool:
    """Whether the output's tail names an out-of-memory failure."""
    return any(marker in text for marker in _OOM_MARKERS)


class Supervisor:
    """Runs one program under one run, from start to the run's final state."""

    def __init__(
        self,
        run: Run,
        command: list[str],
        *,
        environment: dict[str, str],
        tail_lines: int,
        interval: float,
        created: threading.Event | None = None,
        exit_file: Path | None = None,
        started: subprocess.Popen[bytes] | OSError | None = None,
        hypertune: MetricFileForwarder | None = None,
        ship_logs: bool = False,
    ) -> None:
        self._run = run
        self._ship_logs = ship_logs
        self._logs: LogShipper | None = None
        """The program's lines on their way to the run's logs (while it runs)."""
        self._hypertune = hypertune
        """A replica's tuning reports, forwarded while the program runs and once after."""
        self._started = started
        """The program, when a launcher started it before this (or why it could not)."""
        self._exit_file = exit_file
        self._created = created
        self._command = command
        self._environment = environment
        self._tail_lines = tail_lines
        self._interval = interval
        self._process: subprocess.Popen[bytes] | None = None
        self._received: list[str] = []
        """Signals received and forwarded, not yet reported (handlers only append)."""
        self._stop_before_start: int | None = None
        self._peak_rss = 0.0
        self._previous_handlers: dict[int, Any] = {}

    def run(self) -> int:
        """Start the program, wait for it, end the run; the wrapper's exit status."""
        self._install_handlers()
        try:
            return self._supervise()
        except BaseException as error:  # a wrapper that breaks must not leave the run ACTIVE
            self._run.finish("FAILED", error=f"mldiag run failed: {error!r}", error_code="internal")
            raise
        finally:
            self._restore_handlers()

    def _supervise(self) -> int:
        if self._created is not None:
            # The run carries the wrapper's name and configs, not those of an SDK inside the
            # program that would otherwise race to create it. One answer (even
            # "unreachable") is enough: a platform that is down must not hold the program.
            self._created.wait(_CREATE_WAIT_SECONDS)
        if self._stop_before_start is not None:
            name = _signal_name(self._stop_before_start)
            write_exit_file(
                self._exit_file, 128 + self._stop_before_start, f"{name} before the program started"
            )
            self._report_received()
            self._run.finish("FAILED", error=f"{name} before the program started", error_code=name)
            return 128 + self._stop_before_start
        oom_kills = oom_kill_count()
        if self._ship_logs:
            self._logs = self._open_logs()
        try:
            process = self._start()
        except OSError as error:
            print(f"mldiag run: cannot start {self._command[0]!r}: {error}", file=sys.stderr)
            status = 126 if isinstance(error, PermissionError) else 127
            self._system_line(f"cannot start {self._command[0]!r}: {error}", None)
            self._close_logs()
            write_exit_file(self._exit_file, status, f"cannot start {self._command[0]!r}: {error}")
            self._run.finish("FAILED", error=f"cannot start: {error}", error_code="exec_failed")
            return status
        self._process = process
        if (late := self._early_stop()) is not None:  # it came while the program started
            with contextlib.suppress(OSError):
                process.send_signal(late)
        assert process.stdout is not None  # noqa: S101  # both are pipes
        assert process.stderr is not None  # noqa: S101
        self._system_line(f"started pid {process.pid}: {shlex.join(self._command)}", process.pid)
        pumps = (
            OutputPump(
                process.stdout,
                sys.stdout,
                self._tail_lines,
                "stdout",
                ship=self._shipping(STDOUT, process.pid),
            ),
            OutputPump(
                process.stderr,
                sys.stderr,
                self._tail_lines,
                "stderr",
                ship=self._shipping(STDERR, process.pid),
            ),
        )
        for pump in pumps:
            pump.start()
        sampler = self._start_sampler(process.pid)
        returncode = self._wait(process)
        self._forward_reports(final=True)  # before _end_run flushes the run's metrics
        if self._hypertune is not None and self._hypertune.forwarded:
            # The tuning controller finalises a trial once its job ended: the trial's reports
            # should reach the run before the exit file tells the executor (bounded: an
            # unreachable platform gets them from the spool later).
            self._run.flush(_REPORTS_FLUSH_SECONDS)
        if sampler is not None:
            sampler.stop()
        deadline = time.monotonic() + _DRAIN_SECONDS
        for pump in pumps:
            pump.join(max(deadline - time.monotonic(), 0.0))
        return self._end_run(
            returncode, stdout=pumps[0].tail(), stderr=pumps[1].tail(), oom_kills_before=oom_kills
        )

    def _start(self) -> subprocess.Popen[bytes]:
        """The program: started now, or by the launcher before this supervisor existed."""
        if isinstance(self._started, OSError):
            raise self._started
        if self._started is not None:
            return self._started
        return subprocess.Popen(  # the user's own command, no shell
            self._command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._environment
        )

    def _end_run(
        self, returncode: int, *, stdout: str, stderr: str, oom_kills_before: int | None
    ) -> int:
        """Report how the program ended and set the run's final state; the exit status."""
        report = classify_exit(
            returncode, oom_evidence=self._oom_evidence(oom_kills_before, stdout + stderr)
        )
        message = _last_chars(stderr or stdout, MAX_MESSAGE_CHARS) or _summary(report)
        pid = self._process.pid if self._process is not None else None
        self._system_line(_summary(report), pid)
        self._close_logs()  # the lines are stored before anyone learns the program ended
        # First, so that whoever waits on it learns at once, however long the flush below.
        write_exit_file(self._exit_file, report.status, "" if report.succeeded else message)
        if report.succeeded:
            self._run.finish("COMPLETED")
            return 0
        self._run.report_signal(
            SignalKind.PROCESS_EXITED,
            exit_code=report.exit_code,
            signal=report.signal,
            reason=report.reason,
            message=message,
        )
        self._run.finish("FAILED", error=message, error_code=report.code)
        return report.status

    def _open_logs(self) -> LogShipper:
        settings = self._run.settings
        return LogShipper(
            settings.ingestion_url,
            self._run.run_id,
            settings.token,
            host=self._run.host,
            request_timeout=settings.request_timeout,
            max_backoff=min(settings.max_backoff, 10.0),
        )

    def _shipping(self, stream: str, pid: int) -> ShipLines | None:
        """What a pump hands each batch of complete lines to (None: not shipping)."""
        logs = self._logs
        if logs is None:
            return None
        return partial(logs.write_many, stream=stream, pid=pid)

    def _system_line(self, text: str, pid: int | None) -> None:
        if self._logs is not None:
            self._logs.write(text, SYSTEM, pid=pid)

    def _close_logs(self) -> None:
        """Flush the lines, bounded: a replica's executor waits on its exit file, and a
        platform found unavailable is not waited for at all (the lines are lost, counted)."""
        logs, self._logs = self._logs, None
        if logs is None:
            return
        limit = self._run.settings.shutdown_timeout
        if self._exit_file is not None:
            limit = min(limit, _REPLICA_LOGS_FLUSH_SECONDS)
        logs.close(limit if logs.reachable else 0.0)

    def _early_stop(self) -> int | None:
        """The signal that came before the program had a pid (a handler sets it)."""
        return self._stop_before_start

    def _wait(self, process: subprocess.Popen[bytes]) -> int:
        """The program's return code; signals received meanwhile are reported here, in the
        main thread, not in their handlers (which may interrupt a request in flight)."""
        while True:
            try:
                returncode = process.wait(timeout=_POLL_SECONDS)
            except subprocess.TimeoutExpired:
                self._report_received()
                self._forward_reports()
                continue
            self._report_received()
            return returncode

    def _forward_reports(self, *, final: bool = False) -> None:
        if self._hypertune is None:
            return
        try:
            self._hypertune.poll(final=final)
        except Exception:  # a bug here must not end the supervision (or the run)
            logger.exception("mldiag.hypertune.forward_failed path=%s", self._hypertune.path)
            self._hypertune = None

    def _report_received(self) -> None:
        while self._received:
            name = self._received.pop(0)
            pid = self._process.pid if self._process is not None else None
            self._run.report_signal(
                SignalKind.SIGTERM,
                signal=name,
                message=f"mldiag run received {name}"
                + (f" and forwarded it to process {pid}" if pid else ""),
            )

    def _start_sampler(self, pid: int) -> SystemSampler | None:
        if self._interval <= 0:
            return None
        # No TPU source: libtpu reads chips in the process that holds them, and the wrapper
        # must never be the one that does. NVML reads GPUs from any process.
        sampler = SystemSampler(
            self._record,
            self._interval,
            sources=(host_only_source, partial(process_tree_source, pid), gpu_source),
            # The run is the program's tree, not this supervisor's.
            fast_sources=(partial(contention_source, pid),),
            fast_interval=contention_interval(),
        )
        sampler.start()
        return sampler

    def _record(self, sample: Sample) -> None:
        """One system sample, recorded at the run's current step (the sampler's thread)."""
        self._peak_rss = max(self._peak_rss, sample.get((PROCESS_RSS, ""), 0.0))
        for (name, label), value in sample.items():
            self._run.record(name, value, labels=point_labels(label))

    def _oom_evidence(self, kills_before: int | None, output: str) -> bool:
        """Whether something other than the signal itself says the kernel ran out of memory:
        the cgroup's OOM-kill counter moved, the output says so, or the tree's last measured
        memory was near the limit."""
        kills_after = oom_kill_count()
        if kills_before is not None and kills_after is not None and kills_after > kills_before:
            return True
        if oom_in_output(output):
            return True
        limit = memory_limit_bytes()
        return bool(limit and self._peak_rss >= _NEAR_LIMIT * limit)

    # -- signals -------------------------------------------------------------------------

    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may; a wrapper driven from a thread forwards nothing
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, OSError):
                self._previous_handlers[signum] = signal.signal(signum, self._on_signal)

    def _restore_handlers(self) -> None:
        for signum, previous in self._previous_handlers.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, previous)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:  # noqa: ARG002
        process = self._process
        if process is None:
            self._stop_before_start = signum
        elif not (signum == signal.SIGINT and _from_terminal()):
            # A Ctrl-C reaches the program already (the terminal signals the whole
            # foreground group): forwarding it too would interrupt its clean-up.
            with contextlib.suppress(OSError):
                process.send_signal(signum)
        if signum == signal.SIGTERM:
            self._received.append(_signal_name(signum))


ShipLines = Callable[..., None]
"""Takes complete lines (decoded, as a terminal shows them) and ``at=time.time()``."""


class OutputPump:
    """Copies one of the program's pipes to our stream as it comes, keeping its last lines.

    Bytes pass unchanged (binary, partial lines, any encoding). Both pipes are read on
    threads of their own, so a program filling one never blocks on the other. When our
    stream is gone (``| head`` left), the pipe is still drained and the tail still kept.
    With ``ship``, every line is also handed to it as it completes (the unfinished last one
    when the pipe ends), decoded leniently, as a terminal shows it.
    """

    def __init__(
        self,
        source: IO[bytes],
        sink: TextIO,
        keep: int,
        name: str,
        *,
        ship: ShipLines | None = None,
    ) -> None:
        self._source = source
        self._ship = ship
        self._unshipped = b""
        """The unfinished line, for shipping (its beginning, or its last redraw)."""
        binary = getattr(sink, "buffer", None)
        self._binary: IO[bytes] | None = binary
        self._text: TextIO | None = None if binary is not None else sink
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._keep = keep
        self._lines: deque[bytes] = deque(maxlen=keep)
        self._partial = b""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, name=f"mldiag-run-{name}", daemon=True)

    def start(self) -> None:
        """Start copying."""
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for the pipe's end."""
        self._thread.join(timeout)

    def tail(self) -> str:
        """The last lines seen (an unfinished last line included), decoded leniently."""
        with self._lock:
            lines = list(self._lines)
            if self._partial:
                lines.append(_visible(self._partial))
        return b"\n".join(lines[-self._keep :] if self._keep else []).decode("utf-8", "replace")

    def _pump(self) -> None:
        descriptor = self._source.fileno()
        try:
            while chunk := os.read(descriptor, _READ_CHUNK):
                self._write(chunk)
                self._remember(chunk)
                if self._ship is not None:
                    self._ship_lines(chunk)
        except OSError:
            pass  # the pipe broke: nothing more will come
        finally:
            self._source.close()
            if self._ship is not None and self._unshipped:
                self._ship([_shown(self._unshipped)], at=time.time())
                self._unshipped = b""

    def _write(self, chunk: bytes) -> None:
        try:
            if self._binary is not None:
                self._binary.write(chunk)
                self._binary.flush()
            elif self._text is not None:
                self._text.write(self._decoder.decode(chunk))
                self._text.flush()
        except (OSError, ValueError):  # our stream closed or its reader left: keep draining
            self._binary = self._text = None

    def _remember(self, chunk: bytes) -> None:
        *complete, partial = (self._partial + chunk).split(b"\n")
        with self._lock:
            # Only the last `keep` lines can matter: skip converting the others.
            for line in complete[-self._keep :] if self._keep else []:
                self._lines.append(_visible(line))
            self._partial = partial[-_MAX_LINE:]

    def _ship_lines(self, chunk: bytes) -> None:
        assert self._ship is not None  # noqa: S101  # the caller checks
        *complete, unfinished = (self._unshipped + chunk).split(b"\n")
        if complete:
            self._ship([_shown(line) for line in complete], at=time.time())
        redraw = unfinished.rfind(b"\r", 0, len(unfinished) - 1)
        if redraw >= 0:  # a progress bar redrawing itself: only its last state shows
            unfinished = unfinished[redraw + 1 :]
        self._unshipped = unfinished[:_SHIPPED_LINE_BYTES]


def _shown(line: bytes) -> str:
    """What a terminal shows of a complete line, as text (undecodable bytes replaced)."""
    if b"\r" in line:
        line = line.rstrip(b"\r").rsplit(b"\r", 1)[-1]
    return line[:_SHIPPED_LINE_BYTES].decode("utf-8", "replace")


def _visible(line: bytes) -> bytes:
    """What a terminal shows of ``line``: the text after its last carriage return (progress
    bars redraw one line many times), at most ``_MAX_LINE`` bytes of it."""
    return line.rstrip(b"\r").rsplit(b"\r", 1)[-1][-_MAX_LINE:]


def _last_chars(text: str, limit: int) -> str:
    """The end of ``text`` in at most ``limit`` characters, cut at a line start."""
    text = text.strip("\n")
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    newline = cut.find("\n")
    return cut[newline + 1 :] if 0 <= newline < len(cut) - 1 else cut


def _summary(report: ExitReport) -> str:
    if report.signal is not None:
        return f"killed by {report.signal}"
    return f"exited with status {report.exit_code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def _from_terminal() -> bool:
    """Whether we are in the terminal's foreground group (a SIGINT then came from it)."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def seconds_argument(text: str) -> float:
    """An argparse type: a number of seconds, 0 or more."""
    try:
        return env_seconds({"value": text}, "value", 0.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (>= 0), got {text!r}") from None


def _non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)
