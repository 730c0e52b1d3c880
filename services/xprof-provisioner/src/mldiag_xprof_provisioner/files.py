"""Files of the provisioner's own and of XProf's that several rooms name: the owner marker of
work directories, XProf's cache markers, and reading the end of a child's log for errors.

Light on purpose (the standard library only): the conversion child imports it."""

import os
import uuid
from pathlib import Path

OWNER_FILE = "owner.pid"
"""Inside each instance, pre-warm and capture directory: the pid of the provisioner that made
it, so that a successor removes what a killed one left (``copies.stale_copies``)."""

CACHE_VERSION_FILE = "cache_version.txt"
"""XProf's cache marker (``profile_plugin.CACHE_VERSION_FILE``): while a session directory has
it (and it is not older than XProf), XProf trusts every cache file there."""
TOOLS_CACHE_FILE = ".cached_tools.json"
"""XProf's list of a session's tools (``profile_plugin.ToolsCache.CACHE_FILE_NAME``)."""
CACHE_MARKERS = frozenset({CACHE_VERSION_FILE, TOOLS_CACHE_FILE})
"""What vouches for the other files of a session: written only after all of them."""

LOG_TAIL_BYTES = 4096
LOG_TAIL_LINES = 20


def claim(directory: Path) -> None:
    """Mark ``directory`` as this process's (blocking: run it in a thread)."""
    (directory / OWNER_FILE).write_text(str(os.getpid()))


def owned_directory(parent: Path, prefix: str) -> Path:
    """A new directory ``<parent>/<prefix><uuid>`` marked as this process's (blocking)."""
    parent.mkdir(parents=True, exist_ok=True)
    directory = parent / f"{prefix}{uuid.uuid4()}"
    directory.mkdir()
    claim(directory)
    return directory


def read_tail(path: Path, max_bytes: int = LOG_TAIL_BYTES) -> str | None:
    """The last ``max_bytes`` of ``path`` as text; ``None`` when it cannot be read."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - max_bytes))
            return file.read().decode(errors="replace")
    except OSError:
        return None


def log_tail(path: Path, max_bytes: int = LOG_TAIL_BYTES, max_lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a child's log, for an error report (the error is among them)."""
    text = read_tail(path, max_bytes)
    if text is None:
        return "(no log)"
    return "\n".join(text.splitlines()[-max_lines:]) or "(empty log)"
