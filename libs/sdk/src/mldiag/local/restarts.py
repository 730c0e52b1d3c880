"""When the supervisor restarts a component that exited on its own, and when it gives up.

Pure logic, no processes or clocks of its own: callers pass monotonic times in seconds, so the
policy can be tested without waiting.
"""

import signal
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RestartPolicy:
    """Exponential backoff between restarts, reset by a run that lasted, and a crash-loop limit.

    The n-th restart in a row waits ``initial_delay * 2 ** (n - 1)`` seconds, at most
    ``max_delay``. A run of ``stable_after`` seconds or more counts as a recovery: the next
    crash waits ``initial_delay`` again. The ``max_crashes``-th crash within ``window``
    seconds is a crash loop: no more restarts.
    """

    initial_delay: float = 1.0
    max_delay: float = 30.0
    stable_after: float = 60.0
    max_crashes: int = 5
    window: float = 120.0

    def __post_init__(self) -> None:
        if self.initial_delay <= 0 or self.max_delay < self.initial_delay:
            raise ValueError("need 0 < initial_delay <= max_delay")
        if self.max_crashes < 1 or self.window <= 0 or self.stable_after <= 0:
            raise ValueError("need max_crashes >= 1, window > 0 and stable_after > 0")


@dataclass(frozen=True)
class RestartDecision:
    """What to do about one exit: restart after ``delay`` seconds, or give up."""

    give_up: bool
    delay: float
    """Seconds to wait before the restart (0 when giving up)."""
    crashes_in_window: int
    """Exits within the policy's window, this one included."""


@dataclass
class RestartTracker:
    """The exits of one component, judged by ``policy``."""

    policy: RestartPolicy = field(default_factory=RestartPolicy)
    _in_a_row: int = field(default=0, init=False)
    """Exits since the last run that lasted: sets the backoff."""
    _crashes: deque[float] = field(default_factory=deque, init=False)
    """When the exits within the window happened."""

    def on_exit(self, now: float, started_at: float) -> RestartDecision:
        """Record an exit at ``now`` of a run that started at ``started_at``; say what to do."""
        policy = self.policy
        if now - started_at >= policy.stable_after:
            self._in_a_row = 0
        self._in_a_row += 1
        self._crashes.append(now)
        while self._crashes and now - self._crashes[0] > policy.window:
            self._crashes.popleft()
        crashes = len(self._crashes)
        if crashes >= policy.max_crashes:
            return RestartDecision(give_up=True, delay=0.0, crashes_in_window=crashes)
        # Capped so a long history of crashes never builds a huge integer.
        exponent = min(self._in_a_row - 1, 62)
        delay = min(policy.initial_delay * 2**exponent, policy.max_delay)
        return RestartDecision(give_up=False, delay=delay, crashes_in_window=crashes)


def describe_exit(returncode: int | None) -> str:
    """``status 1`` or ``signal 9 (SIGKILL)`` for a return code as ``Popen`` reports it."""
    if returncode is None:
        return "unknown"
    if returncode >= 0:
        return f"status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
    return f"signal {-returncode} ({name})"
