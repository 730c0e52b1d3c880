"""Background CPU load: one core kept busy for SECONDS (``python burner.py SECONDS``).

A script file rather than ``python -c`` so that process listings (and so the SDK's top other
processes, and the analyses that name them) call it ``burner.py``. It stops on its own at
the deadline, so a harness that dies leaves no load behind for long.
"""

import sys
import time


def main() -> None:
    """Spin until the deadline."""
    deadline = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < deadline:
        for _ in range(100_000):  # check the clock rarely: nearly all of the time is the loop
            pass


if __name__ == "__main__":
    main()
