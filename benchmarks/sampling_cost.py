"""What the SDK's system sampler costs the process it runs in, at the default cadences.

Prints figures; asserts nothing (benchmarks are not tests). Run::

    .venv/bin/python benchmarks/sampling_cost.py [--seconds 30] [--burners N]

Three phases of ``--seconds`` each, in one process whose main thread only sleeps:

1. off: no sampler (the floor: this process's own CPU time while idle);
2. on: the SDK's sampler as ``mldiag.init`` starts it (host, GPU and TPU sources every
   10 s, contention every 1 s);
3. on, contended: the same with ``--burners`` busy processes (default: one per core), so
   the host is busy and the top-process walk runs (at most every 5 s).

For each phase: the process's CPU time over the phase as a share of one core, the on
phases less the off one beside the goal (≤ 0.5% of one core); then the CPU time of one
sample per source (median and max, µs) and how often the walk of every process ran.
"""

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil  # type: ignore[import-untyped,unused-ignore]  # no stubs
from _support import emit

from mldiag.config import contention_interval
from mldiag.system import DEFAULT_SOURCES, Finder, Sample, Source, SystemSampler
from mldiag.system import contention as contention_module
from mldiag.system.contention import contention_source

GOAL_PERCENT = 0.5
"""Of one core, at the default cadences."""
BURN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"

costs: dict[str, list[float]] = defaultdict(list)
"""Source name → CPU µs of each of its samples in the current phase."""


def timed(name: str, find: Finder) -> Finder:
    """``find``, with every sample of the source it starts timed in thread CPU time."""

    def finder() -> Source | None:
        source = find()
        if source is None:
            return None

        def sample() -> Sample:
            began = time.thread_time()
            values = source()
            costs[name].append((time.thread_time() - began) * 1e6)
            return values

        return sample

    return finder


def count_walks() -> None:
    """Time every walk of all processes (the top-process ranking's cost)."""
    walk = contention_module.TopProcesses._walk

    def counted(self: Any) -> Any:
        began = time.thread_time()
        result = walk(self)
        costs["top-process walk"].append((time.thread_time() - began) * 1e6)
        return result

    contention_module.TopProcesses._walk = counted  # type: ignore[method-assign]


def phase(seconds: float, *, sampling: bool) -> float:
    """This process's CPU seconds over ``seconds`` of sleep, with or without the sampler."""
    costs.clear()
    sampler: SystemSampler | None = None
    if sampling:
        sampler = SystemSampler(
            lambda _sample: None,
            10.0,
            sources=tuple(timed(find.__name__, find) for find in DEFAULT_SOURCES),
            fast_sources=(timed("contention", contention_source),),
            fast_interval=contention_interval(),
        )
    began = time.process_time()
    if sampler is not None:
        sampler.start()
    time.sleep(seconds)
    if sampler is not None:
        sampler.stop()
    return time.process_time() - began


@contextmanager
def burners(count: int, seconds: float) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` processes spinning for ``seconds`` (killed on the way out)."""
    code = BURN.format(seconds=seconds + 5)
    processes = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]
    try:
        time.sleep(1.0)  # let them take the cores before the phase starts
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait()


def report(name: str, cpu: float, seconds: float, floor: float | None) -> None:
    share = 100.0 * cpu / seconds
    line = f"{name:<16} CPU {cpu * 1000:8.1f} ms over {seconds:.0f} s = {share:6.3f}% of one core"
    if floor is not None:
        cost = 100.0 * (cpu - floor) / seconds
        verdict = "meets" if cost <= GOAL_PERCENT else "MISSES"
        line += f"; sampler {cost:6.3f}% (goal ≤ {GOAL_PERCENT}%: {verdict})"
    emit(line)
    for source, samples in sorted(costs.items()):
        emit(
            f"    {source:<18} {len(samples):4d} samples  median {statistics.median(samples):8.0f}"
            f" µs  max {max(samples):8.0f} µs"
        )


def main() -> None:
    """Measure the three phases and print them."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    count_walks()
    emit("command: " + shlex.join([sys.executable, *sys.argv]))
    emit(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs,"
        f" {len(psutil.pids())} processes, load {os.getloadavg()[0]:.2f};"
        f" Python {platform.python_version()}, psutil {psutil.__version__}"
    )
    emit(f"cadences: contention every {contention_interval()} s, the other sources every 10 s")
    seconds = args.seconds
    floor = phase(seconds, sampling=False)
    report("off", floor, seconds, None)
    report("on", phase(seconds, sampling=True), seconds, floor)
    with burners(args.burners, seconds):
        report(f"on, {args.burners} burners", phase(seconds, sampling=True), seconds, floor)


if __name__ == "__main__":
    main()
