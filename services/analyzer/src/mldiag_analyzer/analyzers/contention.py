"""Contention analyzers: what else on the machine takes what the run needs — other processes'
CPU, disk and memory, the hypervisor's steal, and accelerator faults — read from the
per-host :class:`~mldiag_schemas.events.Contention` the event-detector samples.

Every percentage of CPU here is a share of the whole host (all cores = 100%), as sampled. A
baseline is what was normal just before the deviation began (see the contract's
:class:`~mldiag_schemas.events.Contention`).
"""

from collections.abc import Callable
from dataclasses import dataclass

from mldiag_analyzer.analyzers.common import (
    NO_CONTEXT,
    Finding,
    Inputs,
    analyzer,
    found,
    names,
    not_found,
    not_specific,
    of_hosts,
    percent,
    spread,
)
from mldiag_schemas.analyses import Layer
from mldiag_schemas.events import Contention, EventType, HostSnapshot
from mldiag_schemas.monitoring import RuleName

OTHERS_HIGH_PERCENT = 40.0
"""(proposed) Other processes taking this much of the host's CPU are contending whatever
their baseline was."""
OTHERS_RISE_POINTS = 15.0
"""(proposed) ...or this many points more than in the run's baseline."""
RUN_DROP = 0.15
"""(proposed) The run's own CPU share fell when it is this much below its baseline..."""
RUN_MIN_CORES = 0.25
"""(proposed) ...and the baseline used at least this much of a core (:data:`RUN_MIN_PERCENT`
of the host where its core count is unknown): a run that hardly uses the CPU (waiting on a
device, on input, on its peers) cannot be starved of it, and its share's noise is no fall."""
RUN_MIN_PERCENT = 2.5
HOST_FULL_PERCENT = 85.0
"""(proposed) Run plus others at or above this: the run's share cannot grow."""
LOAD_PER_CPU = 1.0
"""More runnable tasks than CPUs: someone waits for a core."""
IOWAIT_PERCENT = 20.0
"""(proposed) CPU idle waiting on I/O at or above this share of the host."""
DISK_BUSY_PERCENT = 80.0
"""(proposed) The busiest disk has I/O in flight at least this share of the time."""
DISK_RISE = 2.0
"""(proposed) Disk traffic this many times its baseline: someone else is reading or writing."""
SWAP_IO_BYTES = 1024.0 * 1024.0
"""(proposed) Swapping at least 1 MiB/s in or out is paging in earnest."""
SWAP_USED_PERCENT = 25.0
"""(proposed) Swap this full, with host memory short, is memory pressure."""
OWN_GROWTH = 1.3
"""(proposed) The run's resident memory this many times its baseline: the run grew."""
NEIGHBOUR_MEMORY_PERCENT = 10.0
"""(proposed) Other processes holding this much of host memory are a noisy neighbour."""
STEAL_PERCENT = 10.0
"""(proposed) CPU time the hypervisor gave other guests at or above this share."""
PCIE_COLLAPSE = 0.25
"""(proposed) A host's GPU PCIe throughput below this fraction of its peers' median."""
TOP_NAMED = 3
"""How many of the top other processes a report names..."""
TOP_MIN_PERCENT = 1.0
"""...and the least share (of CPU or memory) worth naming one for."""
EVIDENCE_HOSTS = 8
"""Evidence lists the numbers of this many hosts at most (the worst first where ranked); a
run of thousands of hosts still names every host in ``hosts``."""

XID_MEANINGS: dict[int, tuple[str, bool]] = {
    13: ("graphics engine exception (usually the application: an illegal instruction)", False),
    31: ("GPU memory page fault (usually the application: an illegal address)", False),
    43: ("GPU stopped processing (a fault of the application; the GPU recovered)", False),
    48: ("double-bit ECC error: uncorrectable memory error", True),
    63: ("ECC page retirement or row remapping recorded", False),
    64: ("ECC page retirement or row remapping failed", True),
    74: ("NVLink error", True),
    79: ("GPU has fallen off the bus", True),
    92: ("high single-bit ECC error rate", True),
    94: ("contained ECC error: the application was stopped, the GPU is usable", False),
    95: ("uncontained ECC error: the GPU must be reset", True),
}
"""The XID codes people meet most often (NVIDIA's XID catalogue): what each means and whether
it is the hardware's fault (drain the host) rather than the application's."""

BENIGN_THROTTLE_REASONS = frozenset(
    {"idle", "applications-clocks", "display-clocks", "sync-boost", "power"}
)
"""Throttle reasons that say nothing is wrong: an idle GPU, clocks set by the operator, and
the software power cap, which a fully loaded GPU reaches in normal work (heat and the
hardware's own slowdowns are what count; thermal-throttling reads the clocks themselves)."""


def _gib(value: float) -> str:
    return f"{value / 2**30:.1f} GiB"


def _rate(value: float) -> str:
    """``12.5 MiB/s``."""
    return f"{value / 2**20:.1f} MiB/s"


def host_share(value: float, cpus: int | None = None) -> str:
    """A CPU share with its unit: ``37% of the host's CPU``, and in cores where the host's
    count was sampled (``37% of the host's CPU (3.0 of 8 cores)``)."""
    share = f"{value:.1f}%" if value < 10 else percent(value)
    cores = f" ({value * cpus / 100:.1f} of {cpus} cores)" if cpus else ""
    return f"{share} of the host's CPU{cores}"


def _sampled(inputs: Inputs) -> list[tuple[HostSnapshot, Contention]]:
    return [(h, h.contention) for h in inputs.hosts if h.contention is not None]


def _top_cpu(c: Contention) -> str:
    top = sorted(
        (p for p in c.top_processes if (p.cpu_percent or 0.0) >= TOP_MIN_PERCENT),
        key=lambda p: p.cpu_percent or 0.0,
        reverse=True,
    )[:TOP_NAMED]
    return ", ".join(
        f"{p.name} (pid {p.pid}) {host_share(p.cpu_percent or 0.0, c.cpu_count)}" for p in top
    )


def _top_memory(c: Contention) -> tuple[str, float]:
    top = sorted(
        (p for p in c.top_processes if (p.memory_percent or 0.0) >= TOP_MIN_PERCENT),
        key=lambda p: p.memory_percent or 0.0,
        reverse=True,
    )
    named = ", ".join(
        f"{p.name} (pid {p.pid}) {percent(p.memory_percent or 0.0)} of host memory"
        for p in top[:TOP_NAMED]
    )
    return named, sum(p.memory_percent or 0.0 for p in top)


def _evidence(by_host: dict[str, list[str]]) -> list[str]:
    """The evidence lines of the first :data:`EVIDENCE_HOSTS` hosts, and how many more."""
    shown = list(by_host.items())[:EVIDENCE_HOSTS]
    lines = [line for _, host_lines in shown for line in host_lines]
    if len(by_host) > len(shown):
        lines.append(f"... and {len(by_host) - len(shown)} more host(s)")
    return lines


@dataclass(frozen=True)
class _Placed:
    """How a finding on some hosts lines up with the event: a score and words to add."""

    score: float
    words: str


def _placed(inputs: Inputs, flagged: set[str], strong: float, shared: float = 0.35) -> _Placed:
    """The score of a host-level contention finding: ``strong`` where it explains the
    event (on the hosts it singles out, or run-wide), less where healthy hosts show it too."""
    where = spread(inputs, flagged)
    if where == "specific":
        slow = sorted(inputs.suspects() & flagged)
        return _Placed(min(strong + 0.05, 0.95), f"; {names(slow)} also stand out as slow")
    if where == "shared":
        return _Placed(shared, not_specific(inputs))
    if where == "elsewhere":
        return _Placed(0.3, f"; the slow hosts ({names(inputs.suspects())}) do not show it")
    return _Placed(strong, "")


def _no_samples(inputs: Inputs, what: str, has: Callable[[Contention], bool]) -> Finding | None:
    """The NOT_DETECTED finding when nothing was sampled to judge ``what`` by, else None."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what=what))
    if not any(has(c) for _, c in _sampled(inputs)):
        return not_found(f"No host sampled {what}, so it could not be checked.")
    return None


# --- CPU taken by other processes ---------------------------------------------------------


@dataclass(frozen=True)
class _CpuReading:
    host: str
    others: float
    others_baseline: float | None
    run: float | None
    run_baseline: float | None
    load: float | None
    top: str
    cpus: int | None

    @property
    def run_fell(self) -> bool:
        if self.run is None or self.run_baseline is None:
            return False
        if self.cpus:
            used = self.run_baseline * self.cpus / 100 >= RUN_MIN_CORES
        else:
            used = self.run_baseline >= RUN_MIN_PERCENT
        return used and self.run <= self.run_baseline * (1 - RUN_DROP)

    @property
    def full(self) -> bool:
        return self.others + (self.run or 0.0) >= HOST_FULL_PERCENT

    def evidence(self) -> list[str]:
        others = f"{self.host}: other processes {host_share(self.others, self.cpus)}"
        if self.others_baseline is not None:
            others += f" (baseline {percent(self.others_baseline)})"
        lines = [others]
        if self.run is not None:
            run = f"{self.host}: the run's own processes {host_share(self.run, self.cpus)}"
            if self.run_baseline is not None:
                run += f", {percent(self.run_baseline)} in its baseline"
            lines.append(run)
        if self.load is not None:
            lines.append(f"{self.host}: load {self.load:.2f} per CPU")
        if self.top:
            lines.append(f"{self.host}: top other processes: {self.top}")
        return lines


def _cpu_reading(h: HostSnapshot, c: Contention) -> _CpuReading | None:
    if c.other_cpu_percent is None:
        return None
    return _CpuReading(
        h.host,
        c.other_cpu_percent,
        c.other_cpu_baseline_percent,
        c.run_cpu_percent,
        c.run_cpu_baseline_percent,
        c.load_per_cpu,
        _top_cpu(c),
        c.cpu_count,
    )


def _cpu_contended(r: _CpuReading) -> bool:
    """Other processes took more CPU than before — more than in the run's baseline, or a lot
    while the run lost share (or a lot, with no baseline to compare) — and the host had no
    core to spare (full, or more runnable tasks than cores). Neighbours that were as busy
    in the baseline did not cause a change; a run whose share fell on a host with idle
    cores fell for its own reasons (waiting on input, a collective)."""
    high = r.others >= OTHERS_HIGH_PERCENT
    if r.others_baseline is None:
        rose = high
    else:
        # Busy neighbours that take no less than before, while the run's share falls.
        held = high and r.others >= r.others_baseline and r.run_fell
        rose = r.others - r.others_baseline >= OTHERS_RISE_POINTS or held
    no_room = r.full or (r.load is not None and r.load > LOAD_PER_CPU)
    return rose and no_room


@analyzer("host-cpu-contention", Layer.INFRASTRUCTURE, "host-contention.md")
def host_cpu_contention(inputs: Inputs) -> Finding:
    """Other processes on the run's hosts take the CPU the run needs (a noisy neighbour)."""
    if missing := _no_samples(inputs, "CPU by process", lambda c: c.other_cpu_percent is not None):
        return missing
    readings = [r for h, c in _sampled(inputs) if (r := _cpu_reading(h, c)) is not None]
    contended = [r for r in readings if _cpu_contended(r)]
    if not contended:
        top = max(readings, key=lambda r: r.others)
        return not_found(
            f"Other processes took at most {host_share(top.others, top.cpus)} (on {top.host}),"
            " no more"
            f" than before or with cores to spare ({len(readings)} host(s) sampled; contention"
            f" means others {OTHERS_RISE_POINTS:.0f} points above their baseline, or at or"
            f" above {percent(OTHERS_HIGH_PERCENT)} while the run's share falls, on a host"
            f" that is full or has more runnable tasks than cores)."
        )
    worst = max(contended, key=lambda r: r.others)
    flagged = {r.host for r in contended}
    details = (
        f"Other processes take the CPU the run needs on {names(flagged)}"
        f" ({of_hosts(len(flagged), len(readings))}): {host_share(worst.others, worst.cpus)}"
        f" on {worst.host}"
    )
    if worst.others_baseline is not None:
        details += f" against {percent(worst.others_baseline)} before it began"
    if worst.run is not None and worst.run_baseline is not None:
        details += (
            f", while the run's own share was {percent(worst.run)}"
            f" (baseline {percent(worst.run_baseline)})"
        )
    if worst.top:
        details += f"; the top ones: {worst.top}"
    # The run losing share to them is the clearest sign: it is being starved, not idle.
    starved = any(r.run_fell for r in contended)
    placed = _placed(inputs, flagged, 0.9 if starved else 0.82)
    ranked = sorted(contended, key=lambda r: r.others, reverse=True)
    evidence = _evidence({r.host: r.evidence() for r in ranked})
    actions = [
        f"Stop or move the other processes on {names(flagged)} (`top -o %CPU`, `ps -o"
        " pid,pcpu,comm -p <pid>`), or ask the scheduler for exclusive nodes.",
        "Pin the run to its own cores (cgroups cpusets, `taskset`, Kubernetes' static CPU"
        " manager with guaranteed pods) so a neighbour cannot take them.",
    ]
    return found(details + placed.words + ".", placed.score, flagged, evidence, actions)


# --- disk I/O -------------------------------------------------------------------------------


def _io_reading(h: HostSnapshot, c: Contention) -> tuple[list[str], bool] | None:
    """Evidence of a saturated disk on a host, and whether its traffic rose well above the
    run's baseline; None when its disks kept up."""
    lines = []
    if c.cpu_iowait_percent is not None and c.cpu_iowait_percent >= IOWAIT_PERCENT:
        lines.append(f"{h.host}: CPU waiting on I/O {percent(c.cpu_iowait_percent)}")
    if c.disk_busy_percent is not None and c.disk_busy_percent >= DISK_BUSY_PERCENT:
        lines.append(f"{h.host}: busiest disk busy {percent(c.disk_busy_percent)}")
    if not lines:
        return None
    rose = False
    reads, writes = c.disk_read_bytes_per_second or 0.0, c.disk_write_bytes_per_second or 0.0
    if reads or writes:
        rates = f"{h.host}: disk reads {_rate(reads)}, writes {_rate(writes)}"
        if c.disk_bytes_per_second_baseline:
            ratio = (reads + writes) / c.disk_bytes_per_second_baseline
            rates += f" ({ratio:.1f}x the baseline {_rate(c.disk_bytes_per_second_baseline)})"
            rose = ratio >= DISK_RISE
        lines.append(rates)
    if top := _top_cpu(c):
        lines.append(f"{h.host}: top other processes: {top}")
    return lines, rose


def _checkpointing(inputs: Inputs) -> bool:
    """Whether the run's own checkpoints were blocking when the event opened."""
    if inputs.event.type == EventType.CHECKPOINT_STALL:
        return True
    blocked = inputs.context.checkpoint_fraction if inputs.context else None
    limit = inputs.threshold(RuleName.CHECKPOINT_STALL, "blockingFraction")
    return blocked is not None and blocked >= limit


@analyzer("io-contention", Layer.INFRASTRUCTURE, "host-contention.md")
def io_contention(inputs: Inputs) -> Finding:
    """The host's disks are the bottleneck: CPUs wait on I/O, or the disk is busy far beyond
    the run's usual traffic."""
    if missing := _no_samples(
        inputs,
        "disk I/O",
        lambda c: c.cpu_iowait_percent is not None or c.disk_busy_percent is not None,
    ):
        return missing
    sampled = _sampled(inputs)
    flagged: dict[str, list[str]] = {}
    crowded: set[str] = set()
    for h, c in sampled:
        if (reading := _io_reading(h, c)) is not None:
            flagged[h.host], rose = reading
            if rose:
                crowded.add(h.host)
    if not flagged:
        waits = [c.cpu_iowait_percent for _, c in sampled if c.cpu_iowait_percent is not None]
        busy = [c.disk_busy_percent for _, c in sampled if c.disk_busy_percent is not None]
        seen = []
        if waits:
            seen.append(f"I/O wait at most {percent(max(waits))}")
        if busy:
            seen.append(f"the busiest disk at most {percent(max(busy))} busy")
        return not_found(
            f"The disks kept up: {' and '.join(seen)} ({len(sampled)} host(s) sampled;"
            f" contended means I/O wait at or above {percent(IOWAIT_PERCENT)} or a disk"
            f" {percent(DISK_BUSY_PERCENT)} busy)."
        )
    details = (
        f"The disks of {names(flagged)} are saturated ({of_hosts(len(flagged), len(sampled))}):"
        " the run's reads and writes queue"
    )
    strong = 0.78 if crowded else 0.68
    if _checkpointing(inputs):
        # The disk's traffic is not split by process: the run's own saves may be what fills
        # it, which checkpoint-blocking names better.
        details += "; checkpoints were blocking training at the time: the traffic may be the"
        details += " run's own saves"
        strong = 0.45
    elif crowded:
        details += (
            f"; traffic on {names(crowded)} is {DISK_RISE:.0f}x or more the run's baseline:"
            " another process reads or writes there"
        )
    if inputs.event.type == EventType.HANG:
        strong -= 0.2  # slow I/O slows a step; it rarely stops every host for good
    placed = _placed(inputs, set(flagged), strong)
    evidence = _evidence(flagged)
    actions = [
        f"See who reads and writes on {names(flagged)} (`iotop -o`, `pidstat -d 1`) and move"
        " it elsewhere or give it a lower I/O priority (`ionice -c3`).",
        "Keep the dataset and checkpoints on a disk of their own, or stage them on local SSD.",
    ]
    return found(details + placed.words + ".", placed.score, flagged, evidence, actions)


# --- memory and swap ------------------------------------------------------------------------


@dataclass(frozen=True)
class _SwapReading:
    lines: list[str]
    paging: bool
    """Pages move now (not only held in swap)."""
    own_growth: bool
    neighbour: bool


def _swap_reading(h: HostSnapshot, c: Contention, limit: float) -> _SwapReading | None:
    """A host short of memory and swapping, in words, and who holds the memory; None when
    it does not swap (pages held in swap count only while memory is at its limit)."""
    paging = c.swap_io_bytes_per_second is not None and c.swap_io_bytes_per_second >= (
        SWAP_IO_BYTES
    )
    short = h.host_memory_utilization is not None and h.host_memory_utilization >= limit
    filled = c.swap_used_percent is not None and c.swap_used_percent >= SWAP_USED_PERCENT
    if not paging and not (filled and short):
        return None
    lines = []
    if c.swap_io_bytes_per_second is not None:
        lines.append(f"{h.host}: swapping {_rate(c.swap_io_bytes_per_second)}")
    if c.swap_used_percent is not None:
        lines.append(f"{h.host}: swap {percent(c.swap_used_percent)} in use")
    if h.host_memory_utilization is not None:
        lines.append(f"{h.host}: memory {percent(h.host_memory_utilization)} in use")
    growth = 0.0
    if c.run_memory_rss_bytes is not None and c.run_memory_rss_baseline_bytes:
        growth = c.run_memory_rss_bytes / c.run_memory_rss_baseline_bytes
        lines.append(
            f"{h.host}: the run's resident memory {_gib(c.run_memory_rss_bytes)},"
            f" {growth:.2f}x its baseline {_gib(c.run_memory_rss_baseline_bytes)}"
        )
    top, held = _top_memory(c)
    if top:
        lines.append(f"{h.host}: top other processes: {top}")
    return _SwapReading(lines, paging, growth >= OWN_GROWTH, held >= NEIGHBOUR_MEMORY_PERCENT)


@analyzer("host-swapping", Layer.INFRASTRUCTURE, "host-contention.md")
def host_swapping(inputs: Inputs) -> Finding:
    """The host swaps: whether the run itself grew (own growth) or other processes took the
    memory (a noisy neighbour)."""
    if missing := _no_samples(
        inputs,
        "swap",
        lambda c: c.swap_io_bytes_per_second is not None or c.swap_used_percent is not None,
    ):
        return missing
    limit = inputs.threshold(RuleName.HOST_MEMORY, "utilizationPercent")
    sampled = _sampled(inputs)
    readings = {h.host: r for h, c in sampled if (r := _swap_reading(h, c, limit)) is not None}
    swapping = {host: r.lines for host, r in readings.items()}
    active = {host for host, r in readings.items() if r.paging}
    own = {host for host, r in readings.items() if r.own_growth}
    neighbours = {host for host, r in readings.items() if r.neighbour}
    if not swapping:
        io = [c.swap_io_bytes_per_second for _, c in sampled if c.swap_io_bytes_per_second]
        return not_found(
            f"No host swapped: at most {_rate(max(io, default=0.0))} paged in or out"
            f" ({len(sampled)} host(s) sampled; swapping means {_rate(SWAP_IO_BYTES)} or swap"
            f" {percent(SWAP_USED_PERCENT)} full with memory at or above {percent(limit)})."
        )
    verdict = "own-growth" if own else "noisy-neighbour" if neighbours else "unclear"
    details = (
        f"{names(swapping)} {'is' if len(swapping) == 1 else 'are'} short of memory and"
        f" {'swapping' if active else 'holding pages in swap'}"
        f" ({of_hosts(len(swapping), len(sampled))}); verdict: {verdict}"
    )
    details += {
        "own-growth": f": the run's own memory grew on {names(own)} (a leak, larger buffers"
        " or caches)",
        "noisy-neighbour": f": other processes hold the memory on {names(neighbours)}",
        "unclear": ": neither the run's growth nor another process explains it from what was"
        " sampled",
    }[verdict]
    placed = _placed(inputs, set(swapping), 0.8 if active else 0.6)
    if inputs.event.type == EventType.HOST_RESOURCE_EXHAUSTION and verdict != "noisy-neighbour":
        # The event is the memory shortage itself: swapping only details it (host-memory-
        # pressure, 0.5, states it); another process holding the memory is a cause.
        placed = _Placed(0.45, placed.words)
    evidence = _evidence(swapping)
    actions = (
        [
            "Find what grows in the run (`tracemalloc`, data-loader workers, prefetch buffers,"
            " caches kept across steps) and bound it; restart from a checkpoint meanwhile."
        ]
        if verdict == "own-growth"
        else [
            f"Stop or move the processes holding memory on {names(neighbours or swapping)}"
            " (`ps aux --sort=-rss | head`), or ask for exclusive nodes.",
        ]
    )
    actions.append("Give the run a memory limit it fits in and keep training off swap.")
    return found(details + placed.words + ".", placed.score, swapping, evidence, actions)


# --- the hypervisor -------------------------------------------------------------------------


@analyzer("cpu-steal", Layer.INFRASTRUCTURE, "host-contention.md")
def cpu_steal(inputs: Inputs) -> Finding:
    """The hypervisor gives the VM's CPU time to other guests."""
    if missing := _no_samples(inputs, "CPU steal", lambda c: c.cpu_steal_percent is not None):
        return missing
    sampled = [(h, c) for h, c in _sampled(inputs) if c.cpu_steal_percent is not None]
    stolen = {
        h.host: c.cpu_steal_percent
        for h, c in sampled
        if c.cpu_steal_percent is not None and c.cpu_steal_percent >= STEAL_PERCENT
    }
    cpus = {h.host: c.cpu_count for h, c in sampled}
    if not stolen:
        top = max(c.cpu_steal_percent or 0.0 for _, c in sampled)
        return not_found(
            f"The hypervisor took at most {host_share(top)} ({len(sampled)} host(s) sampled;"
            f" steal matters from {percent(STEAL_PERCENT)})."
        )
    details = (
        f"The hypervisor gives {names(stolen)}'s CPU time to other guests"
        f" ({of_hosts(len(stolen), len(sampled))}, up to {percent(max(stolen.values()))} stolen):"
        " the virtual machine shares its physical cores"
    )
    placed = _placed(inputs, set(stolen), 0.75)
    evidence = _evidence(
        {
            host: [f"{host}: CPU steal {host_share(value, cpus[host])}"]
            for host, value in stolen.items()
        }
    )
    actions = [
        "Move the run to dedicated or bare-metal instances (sole-tenant nodes), or to a less"
        " crowded machine type; ask the provider about the host.",
    ]
    return found(details + placed.words + ".", placed.score, stolen, evidence, actions)


# --- accelerator faults -------------------------------------------------------------------


def _xid_words(code: int) -> str:
    meaning = XID_MEANINGS.get(code)
    return f"XID {code}: {meaning[0]}" if meaning else f"XID {code}"


def _accelerator_faults(host: str, c: Contention) -> tuple[list[str], bool]:
    """A host's GPU faults in words, and whether one is the hardware's (drain the host)."""
    lines = []
    hardware = False
    if c.accelerator_ecc_errors:
        lines.append(f"{host}: {c.accelerator_ecc_errors:.0f} uncorrected ECC error(s)")
        hardware = True
    for code in sorted(set(c.accelerator_xid_errors)):
        lines.append(f"{host}: {_xid_words(code)}")
        hardware = hardware or XID_MEANINGS.get(code, ("", False))[1]
    reasons = [r for r in c.accelerator_throttle_reasons if r not in BENIGN_THROTTLE_REASONS]
    if reasons:
        lines.append(f"{host}: clocks held down: {', '.join(reasons)}")
    return lines, hardware


def _pcie_collapses(sampled: list[tuple[HostSnapshot, Contention]]) -> list[tuple[str, str]]:
    """Hosts whose GPU PCIe throughput collapsed against their peers' median (no baseline
    is sampled, so the peers are the reference; needs two hosts)."""
    pcie = {h.host: c.pcie_bytes_per_second for h, c in sampled if c.pcie_bytes_per_second}
    if len(pcie) < 2:
        return []
    ordered = sorted(pcie.values())
    median = ordered[len(ordered) // 2]
    return [
        (host, f"{host}: PCIe {_rate(value)} against a median of {_rate(median)} on its peers")
        for host, value in pcie.items()
        if value < PCIE_COLLAPSE * median
    ]


@analyzer("accelerator-errors", Layer.INFRASTRUCTURE, "accelerator-errors.md")
def accelerator_errors(inputs: Inputs) -> Finding:
    """GPUs reported faults: uncorrected ECC errors, XID codes, clocks held down by the
    hardware, or PCIe throughput collapsed against the peers."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="accelerator errors"))
    sampled = _sampled(inputs)
    if not sampled:
        return not_found("No host sampled accelerator errors, so they could not be checked.")
    flagged: dict[str, list[str]] = {}
    hardware: set[str] = set()
    for h, c in sampled:
        lines, faulty = _accelerator_faults(h.host, c)
        if lines:
            flagged[h.host] = lines
        if faulty:
            hardware.add(h.host)
    reported = set(flagged)
    for host, line in _pcie_collapses(sampled):
        flagged.setdefault(host, []).append(line)
    if not flagged:
        return not_found(
            f"No GPU reported an uncorrected ECC error, an XID, a hardware throttle reason or a"
            f" PCIe collapse ({len(sampled)} host(s) sampled)."
        )
    if hardware:
        details = (
            f"The GPUs of {names(hardware)} reported hardware faults (uncorrectable memory"
            " errors, a lost device or link)"
        )
        strong = 0.92
    elif reported:
        details = f"The GPUs of {names(flagged)} reported errors or were held down"
        strong = 0.65
    else:
        details = f"The GPUs of {names(flagged)} move far less over PCIe than their peers'"
        strong = 0.45  # a host that loads less data explains little unless it is the slow one
    if inputs.event.type == EventType.TERMINATION:
        details += "; the process ended on or after them"
    placed = _placed(inputs, set(flagged), strong, shared=0.5 if hardware else 0.35)
    if not reported and spread(inputs, flagged) == "specific":
        placed = _Placed(0.7, placed.words)
    evidence = _evidence(flagged)
    actions = [
        f"Run the vendor diagnostics on {names(hardware or flagged)} (`nvidia-smi -q -d"
        " ECC,PERFORMANCE`, `dcgmi diag -r 3`) and drain a host whose GPU fails them.",
        "Resume from the last checkpoint on healthy hosts; an application XID (13, 31, 43)"
        " points back at the code (an illegal address or instruction) instead.",
    ]
    return found(details + placed.words + ".", placed.score, flagged, evidence, actions)
