"""What every child of the provisioner (XProf, a capture, a cache conversion) does first: die
with the provisioner.

The provisioner stops its children on every orderly shutdown; this covers one killed with
SIGKILL or crashing, which would otherwise leave XProf holding ports and memory, or a capture
keeping a workload's profiler busy. Children start with ``PARENT_PID_ENV`` set to the
provisioner's pid (:func:`child_environment`) and call :func:`die_with_parent`.
"""

import ctypes
import os
import signal
import sys
from collections.abc import Mapping

PARENT_PID_ENV = "MLDIAG_XPROF_PARENT_PID"
"""Set by the provisioner to its pid, so a child can tell whether it was orphaned already."""

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child, with its pid as the child's parent."""
    return {**os.environ, **(extra or {}), PARENT_PID_ENV: str(os.getpid())}


def die_with_parent() -> None:
    """Arrange for SIGKILL when the parent goes; exit now if it is gone already."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        # SIGKILL rather than SIGTERM: an orphan has nobody to report to, nothing to flush.
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    expected = os.environ.get(PARENT_PID_ENV, "")
    # The parent may have died between fork and prctl; then the signal never comes.
    if expected.isdigit() and os.getppid() != int(expected):
        os._exit(1)
