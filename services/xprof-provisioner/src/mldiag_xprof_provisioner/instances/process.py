"""XProf as a local operating-system process: launching it, probing it, measuring and
stopping it, and checking ports.

The service sees this only through its ``XProfLauncher`` and ``XProfProcess`` protocols
(``backend.py``), so another backend can take its place: a Kubernetes one would create a pod
per instance (the copy on a volume, the memory cap as the pod's limit, ``memory_bytes`` from
the metrics API) and answer ``port_is_free`` for its own address space.
"""

import asyncio
import contextlib
import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import structlog

from mldiag_xprof_provisioner.errors import XProfStartFailed
from mldiag_xprof_provisioner.files import log_tail
from mldiag_xprof_provisioner.instances import child
from mldiag_xprof_provisioner.instances.backend import LaunchSpec
from mldiag_xprof_provisioner.orphans import child_environment

log = structlog.get_logger(__name__)

READY_PATH = "/data/plugin/profile/runs"
"""XProf answers this (rescanning the logdir) once its plugin is loaded."""

_POLL_SECONDS = 0.1
_PROBE_TIMEOUT_SECONDS = 1.0


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port``, on any interface, IPv4 or IPv6.

    Our XProfs listen on 127.0.0.1, other programs anywhere: binding the wildcard address
    fails for either. The probe sets only SO_REUSEADDR, so a listener (with or without
    SO_REUSEPORT) makes it fail while connections lingering in TIME_WAIT do not.
    """
    probes: list[tuple[socket.AddressFamily, str]] = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        probes.append((socket.AF_INET6, "::"))
    for family, host in probes:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # the family is not available on this machine: nothing can listen there
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES) or family == socket.AF_INET:
                    return False
                # e.g. EADDRNOTAVAIL: IPv6 exists in the kernel but is disabled
    return True


class SubprocessLauncher:
    """Starts each XProf as a child of this process, in its own session."""

    def __init__(self, python: str = sys.executable) -> None:
        self._python = python

    def port_is_free(self, port: int) -> bool:
        """See :func:`port_is_free`."""
        return port_is_free(port)

    def is_alive(self, pid: int) -> bool:
        """See :func:`is_alive`."""
        return is_alive(pid)

    async def launch(self, spec: LaunchSpec) -> "XProfChild":
        """Start XProf on ``spec``'s logdir and ports; returns as soon as the process exists."""
        command = [
            self._python,
            "-P",  # never import modules from the child's working directory
            "-m",
            child.__name__,
            "--logdir",
            str(spec.logdir),
            "--port",
            str(spec.port),
        ]
        # A crash's last words must reach the log file, whose tail becomes the FAILED reason.
        env = child_environment({"PYTHONUNBUFFERED": "1"})
        with spec.log_path.open("ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                *command,
                # The secret goes on stdin: a command line or an environment is readable in
                # /proc (by everyone, or by whoever shares our uid).
                stdin=subprocess.PIPE,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=spec.log_path.parent,
                env=env,
                # Its own session: a Ctrl-C on the provisioner's terminal reaches only the
                # provisioner, which then stops its instances in order.
                start_new_session=True,
            )
        await _hand_secret(process, spec.secret)
        log.debug("xprof.process.launched", pid=process.pid, port=spec.port)
        return XProfChild(process, spec)


class XProfChild:
    """One running XProf process."""

    def __init__(self, process: asyncio.subprocess.Process, spec: LaunchSpec) -> None:
        self._process = process
        self._spec = spec

    @property
    def pid(self) -> int:
        """The process id."""
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once it has exited, else ``None``."""
        return self._process.returncode

    async def wait_ready(self) -> None:
        """Return once XProf answers; raise :class:`XProfStartFailed` if it exits first.

        It waits as long as that takes: the caller bounds it with a timeout.
        """
        while True:
            if self.returncode is not None:
                raise XProfStartFailed(
                    f"XProf exited with status {self.returncode} before answering. "
                    f"Log tail:\n{self.log_tail()}"
                )
            # The process must still be ours after the answer: something else could have
            # taken the port between the free-port check and XProf's bind.
            if await _answers(self._spec.port, self._spec.secret) and self.returncode is None:
                return
            await asyncio.sleep(_POLL_SECONDS)

    async def stop(self, grace: float) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; return the exit status."""
        if self._process.returncode is None:
            try:
                self._process.terminate()
                async with asyncio.timeout(grace):
                    await self._process.wait()
            except ProcessLookupError:
                pass  # it exited on its own a moment ago
            except TimeoutError:
                log.warning("xprof.process.killed", pid=self.pid, grace_seconds=grace)
                with contextlib.suppress(ProcessLookupError):
                    self._process.kill()
        await self._process.wait()
        return self._process.returncode

    def memory_bytes(self) -> int:
        """Its resident memory now (0 once it has exited, or where /proc is missing)."""
        return resident_bytes(self.pid) if self.returncode is None else 0

    def log_tail(self) -> str:
        """The last lines XProf wrote (stdout and stderr), for error reports."""
        return log_tail(self._spec.log_path)


async def _hand_secret(process: asyncio.subprocess.Process, secret: str) -> None:
    """Write the secret on the child's stdin (a pipe) and close it."""
    stdin = process.stdin
    if stdin is None:
        return  # not a pipe: the child refuses to serve without a secret
    try:
        stdin.write(secret.encode() + b"\n")
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # it exited already: wait_ready reports that, with its log
    finally:
        stdin.close()


async def _answers(port: int, secret: str) -> bool:
    """Whether ``GET READY_PATH`` on the local port, with the instance's secret, returns 200."""
    request = (
        f"GET {READY_PATH} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n"
        f"{child.SECRET_HEADER}: {secret}\r\n\r\n"
    ).encode()
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT_SECONDS):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            status_line = await reader.readline()
    except (OSError, TimeoutError):
        return False
    finally:
        if writer is not None:
            writer.close()
    parts = status_line.split()
    return len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1] == b"200"


def resident_bytes(pid: int) -> int:
    """``VmRSS`` of a process from ``/proc`` (0 when it cannot be read)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024  # the kernel reports kB
    return 0


def is_alive(pid: int) -> bool:
    """Whether a process with that id exists (used for stale copies of earlier runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
