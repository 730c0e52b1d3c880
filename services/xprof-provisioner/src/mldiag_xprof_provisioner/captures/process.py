"""XProf's capture client as an operating-system process: probing targets, running
the capture child (``child.py``) with a timeout, and reading back what it wrote. The runner
sees this only through its ``TraceClient`` protocol.
"""

import asyncio
import contextlib
import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from mldiag_schemas.profiling import XPLANE_SUFFIX
from mldiag_xprof_provisioner.captures import child
from mldiag_xprof_provisioner.captures.service import (
    MULTI_HOST_DELAY_SECONDS,
    TraceRequest,
    TraceResult,
)
from mldiag_xprof_provisioner.files import read_tail
from mldiag_xprof_provisioner.orphans import child_environment

log = structlog.get_logger(__name__)

# The client's own log lines: "... capture_profile.cc:181] <address> returned <CODE>: <why>"
_HOST_ERROR = re.compile(r"\] (?P<address>\S+) returned (?P<status>[A-Z_]+): (?P<why>.*)$")
_START = re.compile(r"start_timestamp_ns set to (?P<ns>[0-9]+)")
_LOG_TAIL_BYTES = 256 * 1024
_ERROR_TAIL_LINES = 8


class SubprocessTraceClient:
    """XProf's capture client, run once per capture in a child process of its own."""

    def __init__(self, probe_timeout_seconds: float = 2.0, python: str = sys.executable) -> None:
        self._probe_timeout = probe_timeout_seconds
        self._python = python

    async def probe(self, address: str) -> str | None:
        """Open and close a TCP connection to ``address``."""
        timeout = self._probe_timeout
        host, _, port = address.rpartition(":")
        host = host.strip("[]")  # an IPv6 literal is written [addr]:port
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(timeout):
                _, writer = await asyncio.open_connection(host, int(port))
        except ConnectionRefusedError:
            return "connection refused"
        except TimeoutError:
            return f"no answer within {timeout:g} s"
        except OSError as exc:
            return exc.strerror or str(exc)
        finally:
            if writer is not None:
                writer.close()
        return None

    async def trace(self, request: TraceRequest) -> TraceResult:
        """Run the capture child, kill it past the timeout, read what it wrote."""
        logdir = request.work_dir / "logdir"
        result_path = request.work_dir / "result.json"
        log_path = request.work_dir / "client.log"
        levels = request.tracer_levels
        command = [
            self._python,
            "-P",  # never import modules from the child's working directory
            "-m",
            child.__name__,
            f"--result={result_path}",
            f"--service-addr={','.join(request.addresses)}",
            f"--logdir={logdir}",
            f"--duration-ms={request.duration_ms}",
            f"--attempts={request.attempts}",
            f"--session-id={request.session_id}",
            f"--host-tracer-level={levels.host_tracer_level}",
            f"--device-tracer-level={levels.device_tracer_level}",
            f"--python-tracer-level={levels.python_tracer_level}",
            "--delay-ms=0",
        ]
        env = child_environment()
        timed_out = False
        with log_path.open("wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=request.work_dir,
                env=env,
                # Its own session: a Ctrl-C meant for the provisioner does not cut a trace
                # short; the provisioner decides (and kills it if it must go).
                start_new_session=True,
            )
        try:
            async with asyncio.timeout(request.timeout_seconds):
                await process.wait()
        except TimeoutError:
            timed_out = True
        finally:
            if process.returncode is None:  # timed out, or the capture was cancelled
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        return await asyncio.to_thread(
            _read_result, request, logdir, result_path, log_path, process.returncode, timed_out
        )


def _read_result(
    request: TraceRequest,
    logdir: Path,
    result_path: Path,
    log_path: Path,
    returncode: int | None,
    timed_out: bool,
) -> TraceResult:
    text = read_tail(log_path, _LOG_TAIL_BYTES) or ""
    files = _files_by_address(logdir / "plugins" / "profile" / request.session_id, request)
    host_errors: dict[str, str] = {}
    started_ns: int | None = None
    for line in text.splitlines():
        if match := _HOST_ERROR.search(line):
            host_errors[match["address"]] = f"{match['status']}: {match['why'].strip()}"
        elif match := _START.search(line):
            started_ns = int(match["ns"])  # the last attempt's: the one that wrote the files
    started_at = None if started_ns is None else datetime.fromtimestamp(started_ns / 1e9, UTC)
    if timed_out:
        error = f"the capture client did not end within {request.timeout_seconds:g} s"
    else:
        try:
            outcome = json.loads(result_path.read_text())
            error = str(outcome.get("error", ""))
            if started_at is None and isinstance(outcome.get("started_at"), float):
                started_at = datetime.fromtimestamp(outcome["started_at"], UTC)
                if len(request.addresses) > 1:
                    started_at += timedelta(seconds=MULTI_HOST_DELAY_SECONDS)
        except (OSError, ValueError):
            last_words = "\n".join(text.splitlines()[-_ERROR_TAIL_LINES:])
            error = f"the capture client exited with status {returncode}: {last_words}"
    return TraceResult(
        files=files,
        error=error,
        timed_out=timed_out,
        host_errors=host_errors,
        started_at=started_at,
    )


def _files_by_address(session_dir: Path, request: TraceRequest) -> dict[str, Path]:
    """Each address's xplane: the client names it ``<address, ':' as '_'>.xplane.pb``."""
    written = {path.name: path for path in session_dir.glob("*" + XPLANE_SUFFIX)}
    files = {}
    for address in request.addresses:
        path = written.pop(address.replace(":", "_") + XPLANE_SUFFIX, None)
        if path is not None and path.stat().st_size > 0:
            files[address] = path
    if written:
        log.warning("capture.unexpected_files", files=sorted(written))
    return files
