"""What contention looks like, every second: the host's CPU modes, load, swap, disks and
network, the run's own process tree, and, only while the host is busy, who else is busy.

Everything comes from cumulative counters (psutil, and ``/proc`` directly where walking every
process through psutil would cost too much), so each value is an average over the whole
interval, never an instant. A counter the host does not keep (iowait and steal on macOS,
busy time of disks outside Linux) is left out, as is every rate until a second reading.
CPU shares are percent of all cores, so the run's and the host's compare directly: host
minus run is what the other processes take.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from mldiag.system.base import Labels, Sample, Source
from mldiag.system.names import (
    DISK_BUSY,
    DISK_READ,
    DISK_WRITE,
    HOST_CPU,
    HOST_CPU_COUNT,
    HOST_CPU_IOWAIT,
    HOST_CPU_STEAL,
    HOST_CPU_SYSTEM,
    HOST_CPU_USER,
    HOST_LOAD,
    HOST_SWAP,
    HOST_SWAP_IO,
    NETWORK_RECEIVE,
    NETWORK_TRANSMIT,
    PID_LABEL,
    PROCESS_LABEL,
    RUN_CPU,
    RUN_MEMORY,
    TOP_PROCESS_CPU,
    TOP_PROCESS_MEMORY,
)

_PROC = Path("/proc")
_VIRTUAL_DISKS = ("loop", "ram", "zram", "dm-", "md")
"""Block devices whose I/O is some other disk's I/O again (or memory): left out of sums."""
_INTERPRETERS = ("python", "node", "java", "ruby", "perl")
_OPTIONS_WITH_VALUE = frozenset({"-X", "-W", "-cp", "-classpath", "--class-path", "-r"})
"""Interpreter options whose next argument is theirs, not the script."""
_MAX_NAME = 128
"""The platform's longest label value: a longer one would get the whole batch refused."""


@dataclass(frozen=True, slots=True)
class ContentionThresholds:
    """When the costly readings are taken, and how often.

    Attributes:
        others_cpu: Other processes' share of the host (% of all cores) from which the
            top processes by CPU are looked for...
        host_cpu: ...or the host's CPU in use (%) from which they are.
        host_memory: Host memory in use (%) from which the top processes by memory are
            looked for (also while anything is swapped in or out).
        top_cpu_every: Fewest seconds between two rankings by CPU (walking every process
            costs milliseconds).
        top_memory_every: Fewest seconds between two rankings by memory.
        children_every: Seconds between two looks for the run's new child processes.
        top_count: Processes named per ranking.
    """

    others_cpu: float = 25.0
    host_cpu: float = 85.0
    host_memory: float = 85.0
    top_cpu_every: float = 5.0
    top_memory_every: float = 10.0
    children_every: float = 5.0
    top_count: int = 3


def contention_source(
    root: int | None = None, thresholds: ContentionThresholds | None = None
) -> Source | None:
    """Contention as seen by the run whose process tree starts at ``root`` (``mldiag run``
    passes its program's pid; by default :func:`run_root`). None without psutil."""
    meter = ContentionMeter.create(thresholds)
    if meter is None:
        return None
    runs = {"": tree_finder(meter.psutil, run_root() if root is None else root)}
    meter.measure(runs)  # the first readings: rates and shares need a second one

    def sample() -> Sample:
        return meter.measure(runs).get("", {})

    return sample


def run_root() -> int:
    """The root of the SDK's run on this host: this process, or its parent when a local
    launcher (torchrun, deepspeed, accelerate: they set ``LOCAL_RANK``) started one process
    per device. The other ranks are then the run's, not processes contending with it."""
    return os.getppid() if "LOCAL_RANK" in os.environ else os.getpid()


class ContentionMeter:
    """Contention on this host for each of its runs: the host's counters read once, each
    run's own processes, and the top processes other than the run's (and the sampler's)."""

    def __init__(self, psutil: Any, thresholds: ContentionThresholds) -> None:
        self.psutil = psutil
        self._thresholds = thresholds
        self._host = HostCounters(psutil)
        self._top = TopProcesses(psutil, thresholds)
        self._trees: dict[str, TreeMeter] = {}
        self._monitor = os.getpid()

    @classmethod
    def create(cls, thresholds: ContentionThresholds | None = None) -> ContentionMeter | None:
        """A meter, or None without psutil."""
        psutil = _psutil()
        if psutil is None:
            return None
        return cls(psutil, thresholds or ContentionThresholds())

    def measure(self, runs: Mapping[str, Callable[[], Iterable[Any]]]) -> dict[str, Sample]:
        """Run id → its sample, for the ``runs`` given as finders of their processes (a run
        no longer given is forgotten)."""
        now = time.monotonic()
        host = self._host.sample(now)
        samples: dict[str, Sample] = {}
        for run_id, find in runs.items():
            tree = self._trees.get(run_id)
            if tree is None:
                tree = self._trees[run_id] = TreeMeter(
                    self.psutil, find, self._thresholds.children_every
                )
            samples[run_id] = dict(host)
            run = tree.sample(now)
            if run is not None:
                samples[run_id][RUN_CPU, ""], samples[run_id][RUN_MEMORY, ""] = run
        for run_id in set(self._trees) - set(runs):
            del self._trees[run_id]
        if not samples:
            return samples  # no run to name anyone for: no walk
        self._top.update(
            now,
            cpu=any(cpu_contended(values, self._thresholds) for values in samples.values()),
            memory=self._host.memory_short(self._thresholds),
        )
        for run_id, values in samples.items():
            values.update(self._top.sample(exclude={*self._trees[run_id].pids, self._monitor}))
        return samples


def cpu_contended(values: Sample, thresholds: ContentionThresholds) -> bool:
    """Whether a sample's host looks busy enough to name who takes the CPU."""
    host = values.get((HOST_CPU, ""))
    if host is None:
        return False
    others = host - values.get((RUN_CPU, ""), 0.0)
    return others >= thresholds.others_cpu or host >= thresholds.host_cpu


def _psutil() -> Any:
    try:
        import psutil  # type: ignore[import-untyped,unused-ignore]  # noqa: PLC0415  # optional
    except ImportError:
        return None
    return psutil


# --- the host ---------------------------------------------------------------------------


class _Counters(NamedTuple):
    at: float
    cpu: Any
    swapped: float
    disks: dict[str, Any]
    network: tuple[float, float]


class HostCounters:
    """The host's cumulative counters, turned into shares and rates between two readings."""

    def __init__(self, psutil: Any) -> None:
        self._psutil = psutil
        self._cpus = psutil.cpu_count() or 1
        self._whole_disks = _whole_disks()
        self._previous: _Counters | None = None
        self.memory_percent = 0.0
        """Host memory in use (%) at the last reading."""
        self.swap_rate = 0.0
        """Bytes swapped in and out per second over the last interval."""

    def memory_short(self, thresholds: ContentionThresholds) -> bool:
        """Whether memory looks short enough to name who holds it."""
        return self.memory_percent >= thresholds.host_memory or self.swap_rate > 0

    def sample(self, now: float) -> Sample:
        """The levels now, and the shares and rates since the previous call."""
        psutil = self._psutil
        values: Sample = {(HOST_CPU_COUNT, ""): float(self._cpus)}
        self.memory_percent = float(psutil.virtual_memory().percent)
        swap = self._swap()
        if swap is not None:
            values[HOST_SWAP, ""] = float(swap.percent)
        with contextlib.suppress(AttributeError, OSError):  # no load average (Windows, some
            values[HOST_LOAD, ""] = os.getloadavg()[0] / self._cpus  # sandboxes): left out
        current = _Counters(
            at=now,
            cpu=psutil.cpu_times(),
            swapped=float(getattr(swap, "sin", 0) + getattr(swap, "sout", 0)),
            disks=self._disks(),
            network=self._network(),
        )
        previous, self._previous = self._previous, current
        if previous is None or current.at <= previous.at:
            return values
        elapsed = current.at - previous.at
        values.update(_cpu_shares(previous.cpu, current.cpu))
        self.swap_rate = max(current.swapped - previous.swapped, 0.0) / elapsed
        values[HOST_SWAP_IO, ""] = self.swap_rate
        values.update(self._disk_rates(previous.disks, current.disks, elapsed))
        received = current.network[0] - previous.network[0]
        sent = current.network[1] - previous.network[1]
        values[NETWORK_RECEIVE, ""] = max(received, 0.0) / elapsed
        values[NETWORK_TRANSMIT, ""] = max(sent, 0.0) / elapsed
        return values

    def _swap(self) -> Any:
        try:
            return self._psutil.swap_memory()
        except (OSError, RuntimeError):  # a container that hides /proc/vmstat or swaps
            return None

    def _disks(self) -> dict[str, Any]:
        try:
            disks = self._psutil.disk_io_counters(perdisk=True) or {}
        except (OSError, RuntimeError):  # no disks visible (some containers)
            return {}
        if self._whole_disks is None:
            return dict(disks)
        return {name: disk for name, disk in disks.items() if name in self._whole_disks}

    def _network(self) -> tuple[float, float]:
        try:
            nics = self._psutil.net_io_counters(pernic=True) or {}
        except (OSError, RuntimeError):
            return (0.0, 0.0)
        received = sent = 0.0
        for name, nic in nics.items():
            if name.startswith("lo"):
                continue  # loopback is this host talking to itself
            received += nic.bytes_recv
            sent += nic.bytes_sent
        return (received, sent)

    @staticmethod
    def _disk_rates(before: dict[str, Any], after: dict[str, Any], elapsed: float) -> Sample:
        read = written = 0.0
        busiest: float | None = None
        for name, disk in after.items():
            earlier = before.get(name)
            if earlier is None:
                continue
            read += max(disk.read_bytes - earlier.read_bytes, 0)
            written += max(disk.write_bytes - earlier.write_bytes, 0)
            if hasattr(disk, "busy_time"):  # milliseconds with I/O in flight (Linux)
                busy = max(disk.busy_time - earlier.busy_time, 0) / 1000.0 / elapsed
                busiest = max(busiest or 0.0, min(100.0 * busy, 100.0))
        values: Sample = {(DISK_READ, ""): read / elapsed, (DISK_WRITE, ""): written / elapsed}
        if busiest is not None:
            values[DISK_BUSY, ""] = busiest
        return values


def _cpu_shares(before: Any, after: Any) -> Sample:
    """Host CPU by mode between two ``psutil.cpu_times()`` (% of all cores)."""
    fields = [f for f in after._fields if f not in ("guest", "guest_nice")]  # in user already
    delta: dict[str, float] = {
        f: max(float(getattr(after, f) - getattr(before, f)), 0.0) for f in fields
    }
    total = float(sum(delta.values()))
    if total <= 0:
        return {}

    def share(*names: str) -> float:
        return 100.0 * sum(delta.get(name, 0.0) for name in names) / total

    values: Sample = {
        (HOST_CPU, ""): 100.0 - share("idle", "iowait"),  # psutil's cpu_percent() rule
        (HOST_CPU_USER, ""): share("user", "nice"),
        (HOST_CPU_SYSTEM, ""): share("system", "irq", "softirq", "interrupt", "dpc"),
    }
    if "iowait" in delta:
        values[HOST_CPU_IOWAIT, ""] = share("iowait")
    if "steal" in delta:
        values[HOST_CPU_STEAL, ""] = share("steal")
    return values


def _whole_disks() -> set[str] | None:
    """Linux's whole block devices, less virtual ones (a partition's I/O is its disk's
    again); None elsewhere: every disk psutil names counts."""
    try:
        names = os.listdir("/sys/block")
    except OSError:
        return None
    return {name for name in names if not name.startswith(_VIRTUAL_DISKS)}


# --- the run's processes ----------------------------------------------------------------


def tree_finder(psutil: Any, root: int) -> Callable[[], list[Any]]:
    """Finds ``root`` and its descendants (none once it has ended)."""
    process: Any = None

    def find() -> list[Any]:
        nonlocal process
        try:
            if process is None:
                process = psutil.Process(root)
            return [process, *process.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            return []

    return find


class TreeMeter:
    """CPU (% of all cores) and resident memory of a run's processes.

    Finding the processes costs milliseconds (every process's parent is read), so it is
    done every ``refresh_every`` seconds, not every sample; reading the known ones costs
    microseconds each. A process's CPU counts from its second reading: a child that ran
    between two looks for children is missed until then, which a one-second cadence and a
    few-second look make small.
    """

    def __init__(
        self, psutil: Any, find: Callable[[], Iterable[Any]], refresh_every: float
    ) -> None:
        self._psutil = psutil
        self._find = find
        self._refresh_every = refresh_every
        self._cpus = psutil.cpu_count() or 1
        self._found_at: float | None = None
        self._processes: dict[int, Any] = {}
        self._cpu_seconds: dict[int, float] = {}
        self._at: float | None = None

    @property
    def pids(self) -> set[int]:
        """The run's processes known now."""
        return set(self._processes)

    def sample(self, now: float) -> tuple[float, float] | None:
        """(CPU % of all cores since the previous call, summed RSS bytes); None when no
        process is left, or CPU had no earlier reading."""
        if self._found_at is None or now - self._found_at >= self._refresh_every:
            self._found_at = now
            known = self._processes
            self._processes = {p.pid: known.get(p.pid, p) for p in self._find()}
        psutil = self._psutil
        spent = rss = 0.0
        measured = False
        cpu_seconds: dict[int, float] = {}
        for pid, process in list(self._processes.items()):
            try:
                times = process.cpu_times()
                rss += process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                del self._processes[pid]  # it ended: its CPU is its parent's now, uncounted
                continue
            cpu_seconds[pid] = times.user + times.system
            if pid in self._cpu_seconds:
                spent += max(cpu_seconds[pid] - self._cpu_seconds[pid], 0.0)
                measured = True
        previous, self._at, self._cpu_seconds = self._at, now, cpu_seconds
        if not self._processes or previous is None or not measured or now <= previous:
            return None
        return (100.0 * spent / (now - previous) / self._cpus, rss)


# --- the others -------------------------------------------------------------------------


class _Seen(NamedTuple):
    name: str
    cpu_seconds: float
    rss: float


class TopProcesses:
    """The processes taking the most CPU or memory, looked for only while it matters.

    Ranking by CPU needs two walks of every process, so while the host looks contended the
    first walk is a baseline and the next sample (one interval later) ranks; after that it
    ranks at most every ``top_cpu_every`` seconds, each time over the time since the
    previous ranking. When the host calms down the baseline is dropped.
    """

    def __init__(self, psutil: Any, thresholds: ContentionThresholds) -> None:
        self._psutil = psutil
        self._thresholds = thresholds
        self._cpus = psutil.cpu_count() or 1
        self._memory_total = float(psutil.virtual_memory().total) or 1.0
        self._linux = _PROC.joinpath("self", "stat").exists()
        self._ticks = os.sysconf("SC_CLK_TCK") if self._linux else 1
        self._baseline: dict[tuple[int, float], _Seen] | None = None
        self._baseline_at = 0.0
        self._next_cpu = 0.0
        self._next_memory = 0.0
        self._cpu: list[tuple[float, int, _Seen]] = []
        self._memory: list[tuple[float, int, _Seen]] = []

    def update(self, now: float, *, cpu: bool, memory: bool) -> None:
        """Rank again where due: by CPU while ``cpu`` (contended), by memory while
        ``memory`` (short). The rankings of this call are what :meth:`sample` returns."""
        self._cpu, self._memory = [], []
        if not cpu:
            self._baseline = None
        want_cpu = cpu and (self._baseline is None or now >= self._next_cpu)
        want_memory = memory and now >= self._next_memory
        if not (want_cpu or want_memory):
            return
        seen = self._walk()
        if want_memory:
            self._next_memory = now + self._thresholds.top_memory_every
            self._memory = sorted(
                ((100.0 * p.rss / self._memory_total, key[0], p) for key, p in seen.items()),
                reverse=True,
            )
        if want_cpu:
            if self._baseline is not None and now > self._baseline_at:
                elapsed = now - self._baseline_at
                ranked = []
                for key, process in seen.items():
                    before = self._baseline.get(key)
                    if before is not None and process.cpu_seconds > before.cpu_seconds:
                        spent = process.cpu_seconds - before.cpu_seconds
                        ranked.append((100.0 * spent / elapsed / self._cpus, key[0], process))
                self._cpu = sorted(ranked, reverse=True)
                self._next_cpu = now + self._thresholds.top_cpu_every
            else:
                self._next_cpu = now  # the baseline: rank at the next sample
            self._baseline, self._baseline_at = seen, now

    def sample(self, exclude: set[int]) -> Sample:
        """This update's top processes, less ``exclude`` (the run's own)."""
        values: Sample = {}
        for name, ranking in ((TOP_PROCESS_CPU, self._cpu), (TOP_PROCESS_MEMORY, self._memory)):
            chosen = [entry for entry in ranking if entry[1] not in exclude]
            for value, pid, process in chosen[: self._thresholds.top_count]:
                labels: Labels = (
                    (PROCESS_LABEL, self._name(pid, process)[:_MAX_NAME]),
                    (PID_LABEL, str(pid)),
                )
                values[name, labels] = value
        return values

    def _walk(self) -> dict[tuple[int, float], _Seen]:
        """Every process's name, CPU seconds and RSS, keyed by (pid, start time)."""
        return self._walk_proc() if self._linux else self._walk_psutil()

    def _walk_proc(self) -> dict[tuple[int, float], _Seen]:
        # One read of /proc/<pid>/stat per process: psutil would read several files and
        # build several objects per process, ten times the cost.
        seen: dict[tuple[int, float], _Seen] = {}
        page = os.sysconf("SC_PAGE_SIZE")
        for entry in os.listdir(_PROC):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as file:  # the hot path
                    text = file.read().decode(errors="replace")
            except OSError:
                continue  # it ended while we walked
            name, _, rest = text[text.find("(") + 1 :].rpartition(")")
            fields = rest.split()
            if len(fields) < 22:  # rss is the 24th field of stat(5)
                continue
            cpu = (int(fields[11]) + int(fields[12])) / self._ticks
            seen[int(entry), float(fields[19])] = _Seen(name, cpu, float(fields[21]) * page)
        return seen

    def _walk_psutil(self) -> dict[tuple[int, float], _Seen]:
        seen: dict[tuple[int, float], _Seen] = {}
        for process in self._psutil.process_iter(["name", "cpu_times", "memory_info"]):
            info = process.info
            times, memory = info.get("cpu_times"), info.get("memory_info")
            if times is None or memory is None:
                continue  # another user's process we may not read
            key = (process.pid, _create_time(process))
            seen[key] = _Seen(info.get("name") or "", times.user + times.system, memory.rss)
        return seen

    def _name(self, pid: int, process: _Seen) -> str:
        """``python stress.py``, not ``python``: an interpreter is named with its script."""
        base = process.name
        if not base.startswith(_INTERPRETERS):
            return base
        try:
            arguments = self._psutil.Process(pid).cmdline()
        except Exception:  # noqa: BLE001  # gone or not ours: its bare name will do
            return base
        script = _script(arguments[1:])
        return f"{base} {script}" if script else base


def _script(arguments: list[str]) -> str:
    """The first argument that is not an option (nor an option's value), as a base name."""
    skip = False
    for argument in arguments:
        if skip:
            skip = False
        elif argument in ("-c", "-e"):
            return argument  # inline code has no script to name
        elif argument in _OPTIONS_WITH_VALUE:
            skip = True
        elif not argument.startswith("-"):
            return os.path.basename(argument)  # a string, maybe not a path
    return ""


def _create_time(process: Any) -> float:
    try:
        return float(process.create_time())
    except Exception:  # noqa: BLE001  # gone: the pid alone keys it for this walk
        return 0.0
