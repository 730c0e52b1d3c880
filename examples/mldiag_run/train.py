"""An ordinary training script that knows nothing of mldiag: it prints its loss.

Run it under ``mldiag run`` (see README.md beside it) and the run gets its output as logs,
its exit status as the run's final state, and system metrics of its process tree.
"""

import argparse
import math
import time


def main() -> None:
    """Print a decreasing loss once per step."""
    parser = argparse.ArgumentParser(description="A script that prints its loss.")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--sleep", type=float, default=0.05, help="seconds per step")
    args = parser.parse_args()
    for step in range(args.steps):
        loss = 2.0 * math.exp(-step / 25) + 0.1
        print(f"step {step} loss {loss:.4f}", flush=True)  # noqa: T201
        time.sleep(args.sleep)
    print("training done", flush=True)  # noqa: T201


if __name__ == "__main__":
    main()
