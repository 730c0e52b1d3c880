"""A replica's process group on this node: signalling it, its exit status, the tail of its
output, the same for the local backend and for a Ray actor's process.

Ray workers import this module (through ``ray_process``), so it imports only the standard
library.
"""

import contextlib
import os
from pathlib import Path

MESSAGE_CHARS = 4000
"""How much of stderr's tail an exit carries."""


def exit_status(returncode: int) -> int:
    """A ``Popen.returncode`` as a shell's status (128 + n for signal n)."""
    return 128 - returncode if returncode < 0 else returncode


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to process group ``pgid``; a group already gone (or no longer ours)
    is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def tail(path: Path, limit: int = MESSAGE_CHARS) -> str:
    """The last ``limit`` characters of a log file (stripped), ``""`` when it cannot be read."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(handle.tell() - limit, 0))
            return handle.read().decode("utf-8", "replace").strip()[-limit:]
    except OSError:
        return ""
