"""Process and port helpers shared by the embedded servers and the supervisor (POSIX only)."""

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from mldiag.local.errors import PortInUse

LOCALHOST = "127.0.0.1"
"""Every embedded server listens here only."""


def port_is_free(port: int, host: str = LOCALHOST) -> bool:
    """Whether a server could listen on ``host:port`` right now.

    SO_REUSEADDR matches what the servers themselves set, so sockets left in TIME_WAIT by a
    stack that just stopped do not count as "in use"; a listening socket still does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def require_free_ports(ports: Mapping[str, int], host: str = LOCALHOST, hint: str = "") -> None:
    """Raise :class:`PortInUse` naming every port of ``ports`` (label → port) that is taken."""
    taken = [f"{port} ({label})" for label, port in ports.items() if not port_is_free(port, host)]
    if taken:
        listing = ", ".join(taken)
        raise PortInUse(f"port(s) already in use on {host}: {listing}.{' ' + hint if hint else ''}")


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` names a live (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours
    state = _proc_stat_fields(pid)
    # A zombie has exited; only its parent's wait() is missing.
    return state is None or state[0] != "Z"


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), to tell a process from a reused pid.

    None where /proc is not available: callers then trust the pid alone.
    """
    fields = _proc_stat_fields(pid)
    if fields is None:
        return None
    try:
        return int(fields[19])  # field 22 of /proc/PID/stat; fields[0] is field 3
    except (IndexError, ValueError):
        return None


def same_process(pid: int, start_ticks: int | None) -> bool:
    """Whether ``pid`` is alive and is the process that started at ``start_ticks``."""
    if not pid_alive(pid):
        return False
    return start_ticks is None or process_start_ticks(pid) in (None, start_ticks)


def command_line_contains(pid: int, marker: bytes) -> bool:
    """Whether ``pid``'s command line contains ``marker`` (True where /proc is missing)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return True
    return marker in command


def read_pid_file(path: Path) -> int | None:
    """The pid on the first line of ``path``, None if missing or unreadable."""
    try:
        return int(path.read_text().split("\n", 1)[0].strip())
    except (OSError, ValueError):
        return None


def _proc_stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    return raw[raw.rfind(")") + 2 :].split()


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid`` (or to ``pid`` alone if it leads none)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def stop_process(process: "subprocess.Popen[bytes]", sig: int, timeout: float) -> int:
    """Send ``sig``, wait up to ``timeout`` seconds, then SIGKILL the process group; reap it.

    Every process we start leads its own group, so the SIGKILL also reaches children that
    stayed in it. Returns the exit status.
    """
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            signal_group(process.pid, signal.SIGKILL)
            process.wait()
    # Children of a leader that was killed may linger; they share its group id.
    if _group_alive(process.pid):
        signal_group(process.pid, signal.SIGKILL)
    return process.returncode


def children_of(pid: int) -> list[tuple[int, int | None]]:
    """(pid, start ticks) of the live children of ``pid`` (empty where /proc is missing)."""
    found: list[tuple[int, int | None]] = []
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                fields = _proc_stat_fields(int(entry.name))
                if fields is not None and len(fields) > 19 and fields[1] == str(pid):
                    found.append((int(entry.name), int(fields[19])))
    return found


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def wait_until(
    condition: Callable[[], bool],
    timeout: float,
    interval: float = 0.05,
    give_up: Callable[[], bool] | None = None,
) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` passes or ``give_up`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline or (give_up is not None and give_up()):
            return False
        time.sleep(interval)


def wait_pids_gone(pids: Iterable[tuple[int, int | None]], timeout: float) -> list[int]:
    """Wait until none of ``pids`` ((pid, start ticks) pairs) is alive; return those still alive."""
    pending = list(pids)

    def gone() -> bool:
        pending[:] = [(pid, ticks) for pid, ticks in pending if same_process(pid, ticks)]
        return not pending

    wait_until(gone, timeout, interval=0.1)
    return [pid for pid, _ in pending]


def log_size(path: Path) -> int:
    """Current size of a log file (0 if missing): where this run's lines will start."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def log_tail(path: Path, lines: int = 20, since: int = 0) -> str:
    """The last ``lines`` lines of ``path`` written after byte offset ``since``."""
    try:
        with path.open("rb") as file:
            file.seek(max(since, log_size(path) - 64 * 1024))
            text = file.read().decode(errors="replace")
    except OSError:
        return f"(no log at {path})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else f"(nothing written to {path})"


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without libpq's PG* variables, plus ``extra``.

    PGOPTIONS, PGDATA, PGHOST and friends would silently retarget or reconfigure the
    embedded server and its client tools.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env.update(extra or {})
    return env
