"""The entry point of every XProf child: it dies with the provisioner, then serves XProf.

``python -m mldiag_xprof_provisioner.xprof_child --logdir D --port P --grpc_port G`` takes
XProf's own flags (it is ``xprof server`` with one addition). The provisioner stops its
instances on every orderly shutdown; this covers the other case, a provisioner killed with
SIGKILL or crashing, which would otherwise leave XProf processes holding ports and memory.
"""

import ctypes
import os
import signal
import sys

PARENT_PID_ENV = "MLDIAG_XPROF_PARENT_PID"
"""Set by the provisioner to its pid, so the child can tell whether it was orphaned already."""

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _die_with_parent() -> None:
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        # SIGKILL rather than SIGTERM: an orphan has nobody to report to, nothing to flush.
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    expected = os.environ.get(PARENT_PID_ENV, "")
    # The parent may have died between fork and prctl; then the signal never comes.
    if expected.isdigit() and os.getppid() != int(expected):
        os._exit(1)


def main() -> int:
    """Arrange to die with the parent, then run XProf's server until signalled."""
    _die_with_parent()
    from xprof import server  # type: ignore[import-untyped]  # noqa: PLC0415  # heavy, untyped

    return int(server.main(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
