"""Infrastructure analyzers: chips, hosts, storage — the machine under the workload."""

import re
import statistics

from mldiag_analyzer.analyzers.common import (
    NO_CONTEXT,
    Finding,
    Inputs,
    analyzer,
    beating_hosts,
    exit_code_fact,
    fact_text,
    found,
    names,
    not_found,
    not_specific,
    of_hosts,
    on,
    percent,
    seconds,
    share,
    silent_hosts,
    spread,
    when,
)
from mldiag_analyzer.analyzers.logs import excerpts, kept_as, matching_lines, quotes
from mldiag_schemas.analyses import Layer
from mldiag_schemas.events import EventType, HostSnapshot
from mldiag_schemas.logs import LogExcerpt
from mldiag_schemas.monitoring import RuleName

WARN_CLOCK_DROP_MHZ = 30.0
"""SM clock below its baseline by this much is throttling (Meta's health checks: warn)."""
CRITICAL_CLOCK_DROP_MHZ = 75.0
"""... and by this much is serious (Meta's health checks: critical)."""
HOT_CELSIUS = 85.0
"""(proposed) Data-centre GPUs start to slow themselves down around 85-90 °C."""
CPU_SATURATED_PERCENT = 90.0
"""(proposed) Host CPU at or above this is saturated."""


def _throttle_reasons(h: HostSnapshot) -> tuple[list[str], bool]:
    """What says this host's GPUs are held down, and whether it is serious."""
    reasons = []
    serious = False
    if h.throttled:
        reasons.append("GPU clocks held down (throttle reason reported)")
        serious = True
    if h.clock_drop_mhz is not None and h.clock_drop_mhz >= WARN_CLOCK_DROP_MHZ:
        reasons.append(f"SM clock {h.clock_drop_mhz:.0f} MHz below its baseline")
        serious = serious or h.clock_drop_mhz >= CRITICAL_CLOCK_DROP_MHZ
    if h.temperature_celsius is not None and h.temperature_celsius >= HOT_CELSIUS:
        reasons.append(f"{h.temperature_celsius:.0f} °C")
    return reasons, serious


@analyzer("thermal-throttling", Layer.INFRASTRUCTURE, "thermal-throttling.md")
def thermal_throttling(inputs: Inputs) -> Finding:
    """GPUs held down for heat or power: throttle flag, SM clock drop, temperature."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="throttling"))
    reporting = [
        h
        for h in inputs.hosts
        if h.throttled is not None or h.clock_drop_mhz is not None or h.temperature_celsius
    ]
    if not reporting:
        return not_found(
            "No host reported GPU clocks, temperature or throttling, so throttling could not"
            " be checked."
        )
    readings = {h.host: _throttle_reasons(h) for h in reporting}
    flagged = {host: reasons for host, (reasons, _) in readings.items() if reasons}
    critical = any(serious for _, serious in readings.values())
    if not flagged:
        drops = [h.clock_drop_mhz for h in reporting if h.clock_drop_mhz is not None]
        temps = [h.temperature_celsius for h in reporting if h.temperature_celsius is not None]
        checked = [f"No GPU reported throttling on {of_hosts(len(reporting), len(inputs.hosts))}"]
        if drops:
            checked.append(f"SM clocks stayed within {max(*drops, 0.0):.0f} MHz of baseline")
        if temps:
            checked.append(f"temperatures stayed at or below {max(temps):.0f} °C")
        return not_found("; ".join(checked) + ".")
    evidence = [f"{host}: {', '.join(reasons)}" for host, reasons in flagged.items()]
    where = spread(inputs, flagged)
    everywhere = len(flagged) == len(inputs.hosts) > 1
    details = f"GPU throttling on {names(flagged)} ({of_hosts(len(flagged), len(inputs.hosts))})"
    # A throttled host that is also the slow one explains the slowdown; throttling that
    # healthy hosts share, or only on fast hosts, does not.
    base = 0.7 if critical else 0.55
    if where == "specific":
        slow = sorted(inputs.suspects() & flagged.keys())
        details += f"; {names(slow)} also stand{'s' if len(slow) == 1 else ''} out as slow,"
        details += " which explains the slowdown"
        score = base + 0.2
    elif where == "shared":
        details += not_specific(inputs)
        score = base - 0.2
    elif where == "elsewhere":
        details += f"; the slow hosts ({names(inputs.suspects())}) do not throttle"
        score = 0.3
    else:
        score = base
    if everywhere:
        details += "; on every host at once it points at cooling or power capping, not one chip"
    actions = [
        f"Check the GPU health of {names(flagged)}: `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,"
        "POWER` and `dcgmi diag -r 2`.",
        "Drain a host that keeps throttling and restart the run without it.",
    ]
    if everywhere:
        actions.append("Ask the site to check the rack's cooling and power capping.")
    return found(details + ".", score, flagged, evidence, actions)


def _others_dominate(h: HostSnapshot) -> bool:
    """Whether other processes, not the run, take most of a host's CPU (where sampled)."""
    c = h.contention
    if c is None or c.other_cpu_percent is None or c.run_cpu_percent is None:
        return False
    return c.other_cpu_percent > c.run_cpu_percent


@analyzer("host-cpu-saturation", Layer.INFRASTRUCTURE, "host-resource-exhaustion.md")
def host_cpu_saturation(inputs: Inputs) -> Finding:
    """Host CPUs saturated by the run itself: its input decoding or augmentation starve the
    step (others taking the CPU is host-cpu-contention)."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="host CPU"))
    reporting = [h for h in inputs.hosts if h.host_cpu_utilization is not None]
    if not reporting:
        return not_found(
            "No host reported CPU utilisation, so CPU saturation could not be checked."
        )
    busy = {
        h.host: h.host_cpu_utilization
        for h in reporting
        if h.host_cpu_utilization is not None and h.host_cpu_utilization >= CPU_SATURATED_PERCENT
    }
    if not busy:
        top = max(h.host_cpu_utilization or 0.0 for h in reporting)
        return not_found(
            f"Host CPU stayed at or below {percent(top)} on every host"
            f" ({len(reporting)} reporting; saturated means {percent(CPU_SATURATED_PERCENT)})."
        )
    # The run itself saturating its CPUs is this cause; others taking them is contention.
    neighbours = {h.host for h in reporting if h.host in busy and _others_dominate(h)}
    if neighbours == busy.keys():
        return not_found(
            f"Host CPU was saturated on {names(busy)}, but mostly by other processes, not the"
            " run's own: see host-cpu-contention."
        )
    busy = {host: value for host, value in busy.items() if host not in neighbours}
    wait = inputs.threshold(RuleName.INPUT_STALL, "waitFraction")
    waiting = {
        h.host
        for h in reporting
        if h.host in busy and h.data_wait_fraction is not None and h.data_wait_fraction >= wait
    }
    where = spread(inputs, busy)
    evidence = [f"{host}: CPU {percent(value)}" for host, value in busy.items()]
    evidence += [
        f"{h.host}: the run's own processes {percent(h.contention.run_cpu_percent)} of the"
        " host's CPU"
        for h in reporting
        if h.host in busy and h.contention and h.contention.run_cpu_percent is not None
    ]
    evidence += [
        f"{h.host}: data wait {share(h.data_wait_fraction)} of the step"
        for h in reporting
        if h.host in waiting and h.data_wait_fraction is not None
    ]
    details = f"Host CPU at or above {percent(CPU_SATURATED_PERCENT)} on {names(busy)}"
    details += f" ({of_hosts(len(busy), len(reporting))})"
    # Busy CPUs while the step waits for data is the classic input-bound pipeline.
    if waiting and where in ("specific", "run-wide"):
        details += f"; {names(waiting)} also wait for input: decoding or augmentation is CPU-bound"
        score = 0.8
    elif where == "specific":
        details += f"; {names(inputs.suspects() & busy.keys())} also stand out as slow"
        score = 0.65
    elif where == "run-wide":
        score = 0.45
    else:
        details += not_specific(inputs) if where == "shared" else "; the slow hosts are not busy"
        score = 0.3
    actions = [
        "Find what uses the CPU on those hosts (`top -H`, `py-spy top`): data-loader workers,"
        " decoding, augmentation, or another process.",
        "Move decoding or augmentation off the training hosts, precompute it, or use fewer,"
        " cheaper transforms; give the input pipeline its own cores.",
    ]
    return found(details + ".", score, busy, evidence, actions)


@analyzer("host-memory-pressure", Layer.INFRASTRUCTURE, "host-resource-exhaustion.md")
def host_memory_pressure(inputs: Inputs) -> Finding:
    """Host memory nearly full: swapping slows the step, the OOM killer ends processes."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="host memory"))
    limit = inputs.threshold(RuleName.HOST_MEMORY, "utilizationPercent")
    reporting = [h for h in inputs.hosts if h.host_memory_utilization is not None]
    if not reporting:
        return not_found(
            "No host reported memory utilisation, so host memory could not be checked."
        )
    full = {
        h.host: h.host_memory_utilization
        for h in reporting
        if h.host_memory_utilization is not None and h.host_memory_utilization >= limit
    }
    if not full:
        top = max(h.host_memory_utilization or 0.0 for h in reporting)
        return not_found(
            f"Host memory stayed at or below {percent(top)} on every host"
            f" ({len(reporting)} reporting; the limit is {percent(limit)})."
        )
    evidence = [f"{host}: memory {percent(value)} in use" for host, value in full.items()]
    details = f"Host memory at or above {percent(limit)} on {names(full)}"
    details += f" ({of_hosts(len(full), len(reporting))})"
    if len(full) < len(reporting):
        details += "; only some hosts: look for what grows there (data-loader workers, caches)"
    where = spread(inputs, full)
    if inputs.event.type == EventType.HOST_RESOURCE_EXHAUSTION:
        score = 0.5  # the symptom itself; the analyzers that name what grows rank above
    elif where == "specific":
        details += "; those hosts are also the slow ones"
        score = 0.65
    elif where == "run-wide":
        score = 0.5
    else:
        details += not_specific(inputs) if where == "shared" else "; the slow hosts have room"
        score = 0.3
    actions = [
        "See which processes hold the memory (`ps aux --sort=-rss | head`, the run's"
        " process RSS metrics): data-loader workers, prefetch buffers, checkpoint staging.",
        "Lower data-loader workers or prefetch depth, or stage checkpoints in smaller pieces.",
    ]
    return found(details + ".", score, full, evidence, actions)


@analyzer("straggler-localization", Layer.INFRASTRUCTURE, "straggler.md")
def straggler_localization(inputs: Inputs) -> Finding:
    """Per-host outlier: one or a few hosts slower than the median of their peers."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="per-host step time"))
    timed = [h for h in inputs.hosts if h.step_time is not None]
    if len(timed) < 2:
        return not_found(
            f"{'Only one host' if timed else 'No host'} reported step times, so there are no"
            " peers to compare a host with."
        )
    outliers = inputs.outliers
    if outliers and len(outliers) <= len(timed) // 2:
        evidence = [
            f"{o.host}: step {seconds(o.step_time)}, {o.slowdown:.0%} slower than the median"
            f" of its peers ({seconds(o.peers_median)})"
            for o in outliers
        ]
        baselines = {h.host: h.baseline_step_time for h in timed if h.baseline_step_time}
        evidence += [
            f"{o.host}: baseline step {seconds(baselines[o.host])}"
            for o in outliers
            if o.host in baselines
        ]
        slow = [o.host for o in outliers]
        details = (
            f"{names(slow)} {'is' if len(slow) == 1 else 'are'} slower than the other hosts"
            f" (by {outliers[0].slowdown:.0%} at worst, {of_hosts(len(slow), len(timed))}); in"
            " a synchronous job every host waits for the slowest."
        )
        # For a straggler event this only confirms the localisation; the cause is elsewhere.
        score = 0.4 if inputs.event.type == EventType.STRAGGLER else 0.7
        actions = [
            f"Capture a profile on {names(slow)} and one healthy host and compare their step"
            " breakdown (XProf overview and trace viewer).",
            f"Check {names(slow)} for hardware trouble (clocks, ECC, NIC errors); drain it if it"
            " stays slow.",
        ]
        return found(details, score, slow, evidence, actions)
    ratios = [
        h.step_time / h.baseline_step_time
        for h in timed
        if h.step_time is not None and h.baseline_step_time
    ]
    median = statistics.median(h.step_time for h in timed if h.step_time is not None)
    if ratios and min(ratios) >= 1.15:
        return not_found(
            f"All {len(timed)} hosts slowed down together (step time {min(ratios):.2f}x to"
            f" {max(ratios):.2f}x their baselines); no single host stands out, so the cause is"
            " shared (input, a config or program change, storage, the network)."
        )
    return not_found(
        f"No host's step time stands out: all {len(timed)} hosts are within 15% of the"
        f" median of their peers (about {seconds(median)})."
    )


@analyzer("dead-process", Layer.INFRASTRUCTURE, "hang.md")
def dead_process(inputs: Inputs) -> Finding:
    """Hosts that stopped heart-beating: a dead process or host the others wait for."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="heartbeats"))
    known = [h for h in inputs.hosts if h.last_heartbeat_time is not None]
    if not known:
        return not_found("No host sent heartbeats, so dead processes could not be told apart.")
    silent = silent_hosts(inputs)
    if not silent:
        return not_found(
            f"Every host ({len(known)}) was still heart-beating when the event opened: the"
            " processes are alive."
        )
    now = inputs.context.captured_at
    evidence = [
        f"{h.host}: last heartbeat at {when(h.last_heartbeat_time)},"
        f" {(now - h.last_heartbeat_time).total_seconds():.0f} s before the event"
        f" (interval {h.heartbeat_interval_seconds:.0f} s)"
        for h in silent
        if h.last_heartbeat_time is not None and h.heartbeat_interval_seconds is not None
    ]
    alive = beating_hosts(inputs)
    if alive:
        details = (
            f"{names(h.host for h in silent)} stopped heart-beating"
            f" ({of_hosts(len(silent), len(known))})"
            + (f", {silent[0].host} first," if len(silent) > 1 else "")
            + " while the others still beat: its process died or its host went down, and the"
            " others are waiting for it in a collective."
        )
        score = 0.9
    else:
        details = (
            f"Every host stopped heart-beating, {silent[0].host} first: the job's processes are"
            " gone (killed or crashed without a signal) or cannot reach mldiag."
        )
        score = 0.7
    actions = [
        f"Look at {silent[0].host} first: its process's last output, `dmesg` (OOM killer, Xid"
        " errors), and the node's state in the scheduler.",
        "Restart the run from its last checkpoint without that host if it is unhealthy.",
    ]
    return found(details, score, (h.host for h in silent), evidence, actions)


@analyzer("storage-throughput", Layer.INFRASTRUCTURE, "checkpoint-stall.md")
def storage_throughput(inputs: Inputs) -> Finding:
    """Checkpoint saves and input reads both slow at once: the storage they share is slow."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="storage"))
    blocking = inputs.context.checkpoint_fraction
    block_limit = inputs.threshold(RuleName.CHECKPOINT_STALL, "blockingFraction")
    wait_limit = inputs.threshold(RuleName.INPUT_STALL, "waitFraction")
    waiting = {
        h.host: h.data_wait_fraction
        for h in inputs.hosts
        if h.data_wait_fraction is not None and h.data_wait_fraction >= wait_limit
    }
    if blocking is None or blocking < block_limit or not waiting:
        observed = []
        observed.append(
            "no checkpoint share recorded"
            if blocking is None
            else f"checkpoints blocked {share(blocking)} of their interval"
        )
        observed.append(f"{len(waiting)} host(s) waiting for input beyond {share(wait_limit)}")
        return not_found(
            "Checkpoint saves and input reads were not slow together ("
            + "; ".join(observed)
            + "), so slow shared storage is not indicated."
        )
    evidence = [f"checkpoints blocked {share(blocking)} of their interval"]
    evidence += [f"{host}: data wait {share(value)} of the step" for host, value in waiting.items()]
    details = (
        f"Checkpoint saves blocked {share(blocking)} of their interval while {names(waiting)}"
        f" waited {share(max(waiting.values()))} of the step for input: both read or write the"
        " same storage, which is slow or saturated."
    )
    actions = [
        "Measure the storage from a training host (`fio`, `gsutil perf-diag`) and compare with"
        " its rated throughput.",
        "Save checkpoints asynchronously and to a faster tier; cache the dataset on local disk.",
    ]
    return found(details, 0.7, waiting, evidence, actions)


_HOST_OOM = re.compile(r"out of memory: kill|oomkilled|oom-kill|oom killer", re.IGNORECASE)
_KILLED = re.compile(r"^\s*(\S+: line \d+:\s+\d+\s+)?Killed\b")
"""The shell's word for a child it lost to SIGKILL (``Killed`` or ``./run.sh: line 3: 42
Killed python train.py``): with memory exhausted, the OOM killer."""


def _oom_kill_lines(
    inputs: Inputs,
) -> tuple[list[tuple[LogExcerpt, str]], list[tuple[LogExcerpt, str]]]:
    """Log lines of an OOM kill (the kernel's or a runtime's words), and lines that only say
    a process was killed (a shell's ``Killed``: SIGKILL, from the OOM killer or anyone). An
    excerpt the detector kept as an OOM kill counts as the former when neither matched."""
    said = excerpts(inputs)
    oom, killed = matching_lines(said, _HOST_OOM), matching_lines(said, _KILLED)
    if not oom and not killed:
        oom = kept_as(inputs, "host-oom-kill")
    return oom, killed


@analyzer("host-oom-kill", Layer.INFRASTRUCTURE, "termination.md")
def host_oom_kill(inputs: Inputs) -> Finding:
    """The host's OOM killer ended the process (SIGKILL / exit 137 with memory exhausted), as
    the termination's facts or the run's log lines say."""
    classification = fact_text(inputs, "classification")
    signal = fact_text(inputs, "signal")
    exit_code = exit_code_fact(inputs)
    message = fact_text(inputs, "message")
    logged, killed_lines = _oom_kill_lines(inputs)
    hosts = inputs.event_hosts() | {e.host for e, _ in logged + killed_lines if e.host}
    memory = {
        h.host: h.host_memory_utilization
        for h in inputs.hosts
        if h.host_memory_utilization is not None
        and (not hosts or h.host in hosts)
        and h.host_memory_utilization
        >= inputs.threshold(RuleName.HOST_MEMORY, "utilizationPercent")
    }
    evidence = [f"{host}: memory {percent(value)} in use" for host, value in memory.items()]
    if inputs.has_open_event(EventType.HOST_RESOURCE_EXHAUSTION):
        evidence.append("a host resource exhaustion event was open")
    killed = signal == "SIGKILL" or exit_code == 137 or bool(killed_lines)
    if classification == "oom_host" or _HOST_OOM.search(message) or logged:
        details = "The process was killed by the host's out-of-memory killer"
        score = 0.95
    elif killed and evidence:
        details = (
            "The process was killed by SIGKILL while its host's memory was exhausted: almost"
            " certainly the out-of-memory killer"
        )
        score = 0.75
    else:
        return not_found(
            "Not a host out-of-memory kill: the termination is classified"
            f" '{classification or 'unknown'}', host memory was not exhausted and no log line"
            " of the run tells of an OOM kill.",
        )
    evidence = quotes(logged or killed_lines) + evidence
    if signal or exit_code is not None:
        evidence.append(f"signal {signal or 'none'}, exit code {exit_code}")
    effect = {
        EventType.HANG: "; its peers wait for it in the next collective",
        EventType.ORCHESTRATOR_INTERRUPTION: "; the restart follows the kill",
    }.get(inputs.event.type, "")
    if inputs.event.type == EventType.ORCHESTRATOR_INTERRUPTION:
        score -= 0.1  # it explains the restart; a preemption notice would explain it better
    actions = [
        "Confirm with `dmesg -T | grep -i 'killed process'` or the pod's `OOMKilled` status.",
        "Lower host memory use (data-loader workers, prefetch, checkpoint staging) or ask for"
        " more memory per host, then resume from the last checkpoint.",
    ]
    return found(details + on(hosts) + effect + ".", score, hosts, evidence, actions)


_HARDWARE = re.compile(
    r"\bxid\b|ecc|uncorrectable|fallen off the bus|nvlink|data_loss|hardware error|"
    r"device lost|double bit|row remap",
    re.IGNORECASE,
)


@analyzer("hardware-error", Layer.INFRASTRUCTURE, "termination.md")
def hardware_error(inputs: Inputs) -> Finding:
    """The process ended on an accelerator or host fault (Xid, ECC, a device lost)."""
    classification = fact_text(inputs, "classification")
    message = fact_text(inputs, "message")
    match = _HARDWARE.search(message)
    hosts = inputs.event_hosts()
    if classification != "hardware_error" and match is None:
        return not_found(
            "No hardware fault reported: the termination is classified"
            f" '{classification or 'unknown'}' and its message names no Xid, ECC or device"
            " error."
        )
    evidence = []
    if match:
        evidence.append(f"message mentions '{match.group(0)}'")
    if classification:
        evidence.append(f"classified '{classification}'")
    throttled = [h.host for h in inputs.hosts if h.host in hosts and h.throttled]
    if throttled:
        evidence.append(f"{names(throttled)} also reported throttling")
    details = (
        f"The process{on(hosts)} ended on a hardware fault; Llama 3's operators saw"
        " most unexpected interruptions come from GPUs or their memory."
    )
    actions = [
        f"Run the vendor diagnostics{on(hosts) or ' on the host'} (`dcgmi diag -r 3`,"
        " `nvidia-smi -q -d ECC`) and drain the host if they fail.",
        "Resume from the last checkpoint on healthy hosts.",
    ]
    return found(details, 0.9, hosts, evidence, actions)
