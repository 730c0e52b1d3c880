"""The processes of a run on one host: finding them, measuring them, and whether the kernel's
OOM killer struck.

Used by ``mldiag run`` (the tree of the program it started) and ``mldiag agent`` (every
process whose environment names a run). Metrics are summed over the processes, so a
program's data-loader workers and the tools it spawns count with it:

- ``process_cpu_utilization``: percent of one core, summed (``top``'s figure: two busy
  cores read 200);
- ``process_memory_rss_bytes``: resident memory, summed;
- ``process_thread_count`` and ``process_count``.

psutil is imported lazily; without it there is nothing to measure (``None`` sources).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mldiag.identity import is_run_id
from mldiag.system import Sample, Source, host_source

logger = logging.getLogger("mldiag")

RUN_ID_ENV = "MLDIAG_RUN_ID"
"""The environment variable that names a process's run (what the SDK attaches to)."""

PROCESS_CPU = "process_cpu_utilization"
PROCESS_RSS = "process_memory_rss_bytes"
PROCESS_THREADS = "process_thread_count"
PROCESS_COUNT = "process_count"

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _psutil() -> Any:
    try:
        import psutil  # type: ignore[import-untyped,unused-ignore]  # noqa: PLC0415  # optional
    except ImportError:
        return None
    return psutil


class ProcessMeter:
    """Sums the metrics of a changing set of processes.

    CPU needs two readings of a process; the meter keeps each process between calls, so the
    second call onwards measures the time in between. A sample where no process had an
    earlier reading leaves CPU out rather than claim 0%.
    """

    def __init__(self) -> None:
        self._psutil = _psutil()
        self._seen: set[Any] = set()

    def prime(self, processes: Iterable[Any]) -> None:
        """Take the first CPU reading of ``processes`` (so the next sample has CPU)."""
        self.measure(processes)

    def measure(self, processes: Iterable[Any]) -> Sample:
        """The summed metrics of the ``processes`` (psutil ``Process`` objects) still alive."""
        psutil = self._psutil
        if psutil is None:
            return {}
        cpu = rss = threads = count = 0.0
        measured_cpu = False
        seen: set[Any] = set()
        for process in processes:
            try:
                with process.oneshot():
                    usage = process.cpu_percent(interval=None)
                    rss += process.memory_info().rss
                    threads += process.num_threads()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue  # gone (or not ours) between finding and measuring it
            if process in self._seen:  # its first reading is always 0: not a measurement
                cpu += usage
                measured_cpu = True
            seen.add(process)
            count += 1
        self._seen = seen
        sample: Sample = {
            (PROCESS_RSS, ""): rss,
            (PROCESS_THREADS, ""): threads,
            (PROCESS_COUNT, ""): count,
        }
        if measured_cpu:
            sample[PROCESS_CPU, ""] = cpu
        return sample


def process_tree(pid: int) -> list[Any]:
    """The process ``pid`` and all its descendants (empty once it has ended)."""
    psutil = _psutil()
    if psutil is None:
        return []
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def process_tree_source(pid: int) -> Source | None:
    """A system-metrics source (see :class:`mldiag.system.SystemSampler`) of ``pid``'s tree."""
    if _psutil() is None:
        return None
    meter = ProcessMeter()
    meter.prime(process_tree(pid))

    def sample() -> Sample:
        tree = process_tree(pid)
        return meter.measure(tree) if tree else {}

    return sample


def host_only_source() -> Source | None:
    """The SDK's host source without the sampling process's own memory: a supervisor's or an
    agent's RSS is not the workload's (the tree's ``process_memory_rss_bytes`` is)."""
    source = host_source()
    if source is None:
        return None

    def sample() -> Sample:
        return {key: value for key, value in source().items() if key[0] != PROCESS_RSS}

    return sample


class RunProcesses:
    """Finds the processes of this host whose environment names a run (``MLDIAG_RUN_ID``).

    A process's initial environment never changes, so each is read once. Processes this
    user may not read (``AccessDenied``: another user's, unless run as root) are skipped
    without a word.
    """

    def __init__(self) -> None:
        self._psutil = _psutil()
        self._runs: dict[Any, str | None] = {}

    @property
    def available(self) -> bool:
        """Whether psutil is installed (without it nothing can be found)."""
        return self._psutil is not None

    def scan(self) -> dict[str, list[Any]]:
        """Run id → its live processes on this host."""
        psutil = self._psutil
        if psutil is None:
            return {}
        own = os.getpid()
        found: dict[str, list[Any]] = {}
        known: dict[Any, str | None] = {}
        for process in psutil.process_iter():
            if process.pid == own:
                continue
            run_id = self._runs[process] if process in self._runs else _run_of(psutil, process)
            known[process] = run_id
            if run_id is not None:
                found.setdefault(run_id, []).append(process)
        self._runs = known  # forget the processes that ended
        return found


def _run_of(psutil: Any, process: Any) -> str | None:
    try:
        value = process.environ().get(RUN_ID_ENV, "")
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
        return None
    return value if value and is_run_id(value) else None


# --- the kernel's OOM killer ---------------------------------------------------------------


def oom_kill_count() -> int | None:
    """How many processes the OOM killer has killed in this process's memory cgroup (cgroup
    v2 ``memory.events``, v1 ``memory.oom_control``); None when the kernel does not say."""
    for path, key in _memory_files(
        ("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")
    ):
        try:
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key and value.strip().isdigit():
                    return int(value)
        except OSError:
            continue
    return None


def memory_limit_bytes() -> int | None:
    """The memory this process may use: its cgroup's limit, else the host's memory."""
    limits: list[int] = []
    for path, _ in _memory_files(("memory.max", ""), ("memory.limit_in_bytes", "")):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 writes a huge number for "none"
            limits.append(int(text))
    psutil = _psutil()
    if psutil is not None:
        limits.append(int(psutil.virtual_memory().total))
    return min(limits) if limits else None


def _memory_files(*names: tuple[str, str]) -> list[tuple[Path, str]]:
    """Candidate paths of ``names`` in this process's memory cgroup, v2 then v1.

    Inside a container the cgroup's own directory is often mounted as the root, so the root
    is tried after the path ``/proc/self/cgroup`` names.
    """
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    v2, v1 = "", ""
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            v2 = path.lstrip("/")
        elif "memory" in controllers.split(","):
            v1 = path.lstrip("/")
    directories = [_CGROUP_ROOT / v2, _CGROUP_ROOT] if v2 else [_CGROUP_ROOT]
    directories += [_CGROUP_ROOT / "memory" / v1, _CGROUP_ROOT / "memory"]
    return [
        (directory / name, key)
        for directory in directories
        for name, key in names
        if (directory / name).is_file()
    ]
