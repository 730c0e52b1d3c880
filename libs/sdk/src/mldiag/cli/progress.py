"""Progress while a command waits (``profiles capture --wait``, ``operations wait``,
``jobs create --wait``...): on a terminal one line on stderr, rewritten in place with the
time waited and the latest status; elsewhere (a pipe, a log) nothing for the first
:data:`PLAIN_INTERVAL_SECONDS`, then a plain line when the status changes, and at least every
:data:`PLAIN_INTERVAL_SECONDS`. Nothing at all for machine formats,
whose readers want stdout and stderr free of chatter.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

PLAIN_INTERVAL_SECONDS = 10.0
"""How often a status that does not change is repeated when stderr is not a terminal."""


class Progress:
    """The progress line of one wait; :meth:`update` it as statuses come, :meth:`close` it
    when the wait ends (also as a context manager)."""

    def __init__(self, what: str, *, enabled: bool, stream: TextIO | None = None) -> None:
        """``what`` heads the line (``capture op-1``); with ``enabled`` false nothing is
        written."""
        self._what = what
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = enabled
        self._in_place = enabled and self._stream.isatty()
        self._started = time.monotonic()
        self._last_status: str | None = None
        self._last_written = 0.0
        self._width = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def due(self) -> bool:
        """Whether :meth:`update` would write now (so a status costly to find, such as
        one more API call, is found only then)."""
        if not self._enabled:
            return False
        return self._in_place or time.monotonic() - self._started >= PLAIN_INTERVAL_SECONDS

    @property
    def in_place(self) -> bool:
        """Whether the line is rewritten in place (stderr is a terminal)."""
        return self._in_place

    def update(self, status: str) -> None:
        """Show ``status`` (``RUNNING; host-a ACTIVE, host-b SUCCEEDED``) with the time
        waited so far."""
        if not self._enabled:
            return
        now = time.monotonic()
        line = f"{self._what}: {status} ({_elapsed(now - self._started)})"
        if self._in_place:
            # \r and padding rewrite the previous line, however long it was.
            self._stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        elif now - self._started >= PLAIN_INTERVAL_SECONDS and (
            status != self._last_status or now - self._last_written >= PLAIN_INTERVAL_SECONDS
        ):
            # Quiet for a short wait; then a line per change, or per interval without one.
            self._stream.write(line + "\n")
            self._last_written = now
        else:
            return
        self._last_status = status
        self._stream.flush()

    def close(self) -> None:
        """End the in-place line (the next output starts on a line of its own)."""
        if self._in_place and self._width:
            self._stream.write("\n")
            self._stream.flush()
            self._width = 0


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def poll_until(
    read: Callable[[], dict[str, Any]],
    terminal: frozenset[str],
    progress: Progress,
    *,
    poll_seconds: float = 1.0,
) -> dict[str, Any]:
    """Read a resource with ``read()`` until its ``state`` is one of ``terminal``, showing
    the state on ``progress``; the last read."""
    while True:
        resource = read()
        state = str(resource.get("state", ""))
        if state in terminal:
            return resource
        progress.update(state or "waiting")
        time.sleep(poll_seconds)
