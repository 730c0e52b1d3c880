"""``mldiag up --detach``: the supervisor as a background process of its own, waited on until
the stack it starts is healthy.
"""

import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from mldiag.local.config import StackConfig
from mldiag.local.control import stop_stack
from mldiag.local.errors import StartupFailed
from mldiag.local.process import log_size, log_tail
from mldiag.local.state import StackState, read_state
from mldiag.local.supervisor import preflight


def start_detached(
    config: StackConfig,
    command: Sequence[str],
    timeout: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> StackState:
    """Run ``command`` (a supervisor, e.g. ``python -m mldiag.cli up ...``) in the background.

    It gets a session of its own and writes to ``<home>/logs/up.log``. Returns the state
    once the stack is healthy; raises :class:`~mldiag.local.errors.StartupFailed` with the
    log's tail if the supervisor exits first or the stack is not healthy in time.
    ``progress`` gets each start-up stage the supervisor records, as it appears.
    """
    preflight(config)
    config.logs_dir.mkdir(parents=True, exist_ok=True)
    up_log = config.logs_dir / "up.log"
    since = log_size(up_log)
    with up_log.open("ab") as out:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    # Starting NATS and PostgreSQL (initdb on the first run) comes on top of the services.
    deadline = time.monotonic() + (timeout or config.health_timeout + 60.0)
    try:
        return _wait_detached_healthy(config, process, deadline, up_log, since, progress)
    except BaseException:
        # Failed, timed out or interrupted: leave nothing half-started behind.
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60.0)
            except subprocess.TimeoutExpired:
                stop_stack(config.home, timeout=5.0)
        raise


def _wait_detached_healthy(
    config: StackConfig,
    process: "subprocess.Popen[bytes]",
    deadline: float,
    up_log: Path,
    since: int,
    progress: Callable[[str], None] | None,
) -> StackState:
    shown = 0
    while True:
        state = read_state(config.home)
        if state and state.supervisor_pid == process.pid:
            if progress is not None:
                for line in state.progress[shown:]:
                    progress(line)
                shown = max(shown, len(state.progress))
            if state.status == "healthy":
                return state
        if process.poll() is not None:
            raise StartupFailed(
                f"the stack did not start (its supervisor exited with status "
                f"{process.returncode}); {up_log} ends with:\n"
                f"{log_tail(up_log, lines=40, since=since)}"
            )
        if time.monotonic() > deadline:
            raise StartupFailed(
                f"the stack was not healthy in time; {up_log} ends with:\n"
                f"{log_tail(up_log, lines=40, since=since)}"
            )
        time.sleep(0.05)
