"""Framework and runtime analyzers: the program as JAX/XLA, the input pipeline and the
checkpoint library run it (compilation, input, checkpoints, configs, collectives)."""

import itertools
import re
from collections import Counter

from mldiag_analyzer.analyzers.common import (
    NO_CONTEXT,
    Finding,
    Inputs,
    analyzer,
    beating_hosts,
    exit_code_fact,
    fact_number,
    fact_text,
    found,
    names,
    not_found,
    not_specific,
    of_hosts,
    on,
    onset_step,
    percent,
    seconds,
    share,
    silent_hosts,
    spread,
    when,
)
from mldiag_analyzer.analyzers.logs import (
    COLLECTIVE_TIMEOUT,
    QUOTED_LINES,
    Traceback,
    excerpts,
    kept_as,
    matching_lines,
    quote,
    quotes,
    tracebacks,
)
from mldiag_schemas.analyses import Layer
from mldiag_schemas.events import EventType
from mldiag_schemas.logs import LogExcerpt
from mldiag_schemas.monitoring import RuleName

ONSET_MARGIN_STEPS = 5
"""(proposed) A signal this many steps before an event's first bad step is "at onset"."""
FREQUENT_CHECKPOINT_SECONDS = 300.0
"""(proposed) Checkpoints closer together than this are frequent."""


@analyzer("recompilation", Layer.FRAMEWORK, "recompilation-storm.md")
def recompilation(inputs: Inputs) -> Finding:
    """XLA recompiles after warm-up at the event's onset, and the pattern of the compiles."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="compilation"))
    steps = sorted(inputs.context.compile_steps)
    onset = onset_step(inputs)
    storm = inputs.event.type == EventType.RECOMPILATION_STORM
    near = (
        steps if storm or onset is None else [s for s in steps if s >= onset - ONSET_MARGIN_STEPS]
    )
    if not near:
        where = f" near step {onset}" if onset is not None else ""
        last = f" (the last one was at step {steps[-1]})" if steps else ""
        return not_found(f"No compilation after warm-up{where}{last}.")
    evidence = [f"compiled at steps {', '.join(map(str, near[-10:]))}"]
    if inputs.context.compile_seconds:
        evidence.append(f"{seconds(inputs.context.compile_seconds)} spent compiling so far")
    gaps = {b - a for a, b in itertools.pairwise(near)}
    if len(near) >= 3 and gaps == {1}:
        pattern = (
            "on every step: a shape or a static argument changes each step (variable sequence"
            " lengths, a Python value passed as static)"
        )
    elif len(near) >= 3 and len(gaps) == 1:
        pattern = (
            f"every {gaps.pop()} steps: a periodic step (evaluation, logging, a schedule change)"
            " runs with other shapes or static arguments"
        )
    else:
        pattern = "at irregular steps: input shapes vary (pad or bucket them)"
    if storm:
        details = f"{len(near)} compilations after warm-up, {pattern}"
        score = 0.75
    else:
        details = f"XLA recompiled {len(near)} time(s) at the onset (step {onset}), {pattern}"
        # a long compilation at the next step also looks like a hang
        score = 0.5 if inputs.event.type == EventType.HANG else 0.6
    actions = [
        "Log why JAX recompiles: `jax.config.update('jax_explain_cache_misses', True)` (or"
        " `JAX_LOG_COMPILES=1`) and read the shapes and static arguments that changed.",
        "Pad or bucket variable-length inputs and keep static arguments constant; give"
        " evaluation its own compiled function.",
    ]
    return found(details + ".", score, inputs.event.hosts, evidence, actions)


@analyzer("input-pipeline", Layer.FRAMEWORK, "input-stall.md")
def input_pipeline(inputs: Inputs) -> Finding:
    """Steps waiting for data: the share of the step spent in the input pipeline."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="data wait"))
    limit = inputs.threshold(RuleName.INPUT_STALL, "waitFraction")
    reporting = [h for h in inputs.hosts if h.data_wait_fraction is not None]
    if not reporting:
        return not_found(
            "No host reported data wait time (`run.data_wait()` in the SDK), so input stalls"
            " could not be checked."
        )
    waiting = {
        h.host: h
        for h in reporting
        if h.data_wait_fraction is not None and h.data_wait_fraction >= limit
    }
    if not waiting:
        top = max(h.data_wait_fraction or 0.0 for h in reporting)
        return not_found(
            f"Data wait stayed at or below {share(top)} of the step on every host"
            f" ({len(reporting)} reporting; the threshold is {share(limit)})."
        )
    evidence = [
        f"{h.host}: data wait {share(h.data_wait_fraction or 0.0)} of the step"
        + (f", CPU {percent(h.host_cpu_utilization)}" if h.host_cpu_utilization else "")
        for h in waiting.values()
    ]
    worst = max(h.data_wait_fraction or 0.0 for h in waiting.values())
    details = (
        f"Steps wait for input on {names(waiting)} ({of_hosts(len(waiting), len(reporting))}),"
        f" up to {share(worst)} of the step (threshold {share(limit)})"
    )
    idle = [
        h.host
        for h in waiting.values()
        if h.host_cpu_utilization is not None and h.host_cpu_utilization < 70.0
    ]
    kind = inputs.event.type
    if kind == EventType.INPUT_STALL:
        if idle:
            details += (
                f"; the CPU of {names(idle)} is not busy, so the reader waits on storage or"
                " the prefetch buffer is too small"
            )
            score = 0.65
        else:
            score = 0.45  # the symptom; host-cpu-saturation names the cause when it is one
    elif kind == EventType.HANG:
        first = min(inputs.hosts, key=lambda h: h.last_step if h.last_step is not None else 1 << 62)
        stuck = first.host in waiting
        details += "; the host that stopped first was waiting for input" if stuck else ""
        score = 0.6 if stuck else 0.35
    elif kind in (EventType.PERFORMANCE_DEGRADATION, EventType.STRAGGLER):
        where = spread(inputs, waiting)
        if where == "specific":
            details += "; only the slow hosts wait: their input shard or loader is slower"
            score = 0.7
        elif where == "run-wide":
            score = 0.55
        else:
            details += not_specific(inputs) if where == "shared" else "; the slow hosts do not"
            score = 0.3
    else:
        score = 0.5
    actions = [
        "Prefetch more batches ahead of the step (`tf.data` `prefetch`, Grain's"
        " `worker_buffer_size`, more loader workers).",
        "Profile the input pipeline (XProf's trace viewer shows the host waiting on input)"
        " and move decoding off the critical path; cache the dataset closer to the hosts.",
    ]
    return found(details + ".", score, waiting, evidence, actions)


@analyzer("checkpoint-blocking", Layer.FRAMEWORK, "checkpoint-stall.md")
def checkpoint_blocking(inputs: Inputs) -> Finding:
    """Checkpoint saves that block training for a large share of their interval."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="checkpoint blocking"))
    limit = inputs.threshold(RuleName.CHECKPOINT_STALL, "blockingFraction")
    blocked = inputs.context.checkpoint_fraction
    if blocked is None:
        blocked = fact_number(inputs, "blockingFraction")
    if blocked is None:
        return not_found(
            "No checkpoint timing was recorded (`run.checkpoint()` in the SDK), so checkpoint"
            " blocking could not be checked."
        )
    if blocked < limit:
        return not_found(
            f"The last checkpoint blocked training for {share(blocked)} of its interval (the"
            f" threshold is {share(limit)})."
        )
    evidence = [f"the last checkpoint blocked {share(blocked)} of its interval"]
    interval = fact_number(inputs, "intervalSeconds")
    blocking = inputs.event.evidence.first_bad_value
    if interval is not None and blocking is not None:
        evidence.append(f"blocked {seconds(blocking)} of the {seconds(interval)} since the last")
    windows = [w for w in inputs.event.evidence.windows if w.metric == "checkpoint_time"]
    evidence += [
        f"checkpoint_time{f' on {w.host}' if w.host else ''}: {seconds(w.observed)}"
        + (f" (baseline {seconds(w.baseline)})" if w.baseline is not None else "")
        for w in windows
        if w.observed is not None
    ]
    details = f"Checkpoint saves blocked training for {share(blocked)} of their interval"
    details += f" (threshold {share(limit)})"
    if interval is not None and interval < FREQUENT_CHECKPOINT_SECONDS:
        details += f"; saves come every {interval:.0f} s, which is often"
    score = {
        EventType.CHECKPOINT_STALL: 0.5,  # the symptom; storage or memory may name the cause
        EventType.PERFORMANCE_DEGRADATION: 0.6,
        EventType.HANG: 0.5,
        EventType.HOST_RESOURCE_EXHAUSTION: 0.55,
    }.get(inputs.event.type, 0.4)
    effect = {
        EventType.PERFORMANCE_DEGRADATION: ": the slow steps are save steps",
        EventType.HANG: ": a save that never finishes (storage stuck, the previous async save"
        " unfinished) stops every host",
        EventType.HOST_RESOURCE_EXHAUSTION: ": checkpoints staged in host memory use it up",
        EventType.STRAGGLER: ": the host that writes checkpoints falls behind its peers",
    }.get(inputs.event.type, "")
    actions = [
        "Save asynchronously (Orbax `AsyncCheckpointer`) so that training continues while the"
        " checkpoint is written, and check the previous save finished before the next starts.",
        "Save less often, or to faster storage; measure the storage throughput from a host.",
    ]
    return found(details + effect + ".", score, inputs.event.hosts, evidence, actions)


_MEMORY_KEYS = re.compile(r"batch|seq|length|shard|mesh|micro|remat|dtype|precision", re.I)
_AT_STEP = re.compile(r"at step (\d+)")


def _change_step(change: str) -> int | None:
    """The step a config change was seen at (the detector writes ``... at step N``)."""
    match = _AT_STEP.search(change)
    return int(match.group(1)) if match else None


@analyzer("config-change", Layer.FRAMEWORK, "config-drift.md")
def config_change(inputs: Inputs) -> Finding:
    """The run's configs changed during the run, at or before the event's onset."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="config changes"))
    changes = inputs.context.config_changes
    if not changes:
        return not_found("No config section changed during the run.")
    onset = onset_step(inputs)
    before = [
        c for c in changes if onset is None or (step := _change_step(c)) is None or step <= onset
    ]
    if not before:
        return not_found(
            f"The configs changed only after the onset (step {onset}), so they did not cause it:"
            f" {'; '.join(changes)}."
        )
    evidence = [f"changed: {change}" for change in before]
    details = f"The run's configs changed before the event ({'; '.join(before[-3:])})"
    kind = inputs.event.type
    memory_related = [c for c in before if _MEMORY_KEYS.search(c)]
    if kind == EventType.ACCELERATOR_MEMORY_PRESSURE and memory_related:
        details += "; batch, sequence or sharding settings decide how much device memory a step"
        details += " needs"
        score = 0.75
    elif kind in (EventType.PERFORMANCE_DEGRADATION, EventType.ACCELERATOR_MEMORY_PRESSURE):
        score = 0.55
    else:
        score = 0.45
    steps = [step for c in before if (step := _change_step(c)) is not None]
    if onset is not None and steps and onset - max(steps) <= ONSET_MARGIN_STEPS:
        details += f"; the last change came {onset - max(steps)} step(s) before the onset"
        score += 0.1
    actions = [
        "Compare the run's configs before and after the change (the run's configs in the"
        " console or API) and with the last good run.",
        "Revert the change, or rerun with it alone, to confirm it caused the event.",
    ]
    return found(details + ".", score, inputs.event.hosts, evidence, actions)


@analyzer("fingerprint-mismatch", Layer.FRAMEWORK, "config-drift.md")
def fingerprint_mismatch(inputs: Inputs) -> Finding:
    """Hosts of one run with different environments (versions, XLA flags, packages, commit)."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="host fingerprints"))
    printed = [h for h in inputs.hosts if h.fingerprint]
    if len(printed) < 2:
        return not_found(
            f"{'Only one host' if printed else 'No host'} reported an environment fingerprint,"
            " so hosts could not be compared."
        )
    keys = sorted({key for h in printed for key in h.fingerprint})
    odd: set[str] = set()
    evidence = []
    for key in keys:
        values = Counter(h.fingerprint.get(key, "(missing)") for h in printed)
        if len(values) == 1:
            continue
        usual, _ = values.most_common(1)[0]
        others = [h for h in printed if h.fingerprint.get(key, "(missing)") != usual]
        odd.update(h.host for h in others)
        evidence.append(
            f"{key}: {usual} on {len(printed) - len(others)} host(s); "
            + ", ".join(f"{h.fingerprint.get(key, '(missing)')} on {h.host}" for h in others)
        )
    if not evidence:
        return not_found(
            f"All {len(printed)} hosts report the same environment fingerprint"
            f" ({len(keys)} entries)."
        )
    details = f"{names(odd)} run(s) a different environment from the other hosts"
    details += f" ({len(evidence)} fingerprint entr{'y' if len(evidence) == 1 else 'ies'} differ)"
    kind = inputs.event.type
    if kind == EventType.CONFIG_DRIFT:
        score = 0.85
    elif kind == EventType.HANG:
        details += "; hosts that compile different programs wait forever in mismatched collectives"
        score = 0.75
    elif kind == EventType.STRAGGLER and odd & inputs.event_hosts():
        details += "; the slow host is one of them"
        score = 0.7
    else:
        score = 0.5
    actions = [
        f"Rebuild or redeploy {names(odd)} from the same image as the others (same framework"
        " and library versions, XLA flags and code commit).",
        "Pin the image by digest in the job spec so every host and every restart runs the same.",
    ]
    return found(details + ".", score, odd, evidence, actions)


@analyzer("hang-localization", Layer.FRAMEWORK, "hang.md")
def hang_localization(inputs: Inputs) -> Finding:
    """Processes alive but no step: which hosts stopped first (stuck collective or step)."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="where the run stopped"))
    now = inputs.context.captured_at
    alive = beating_hosts(inputs)
    silent = {h.host for h in silent_hosts(inputs)}
    if silent and not alive:
        return not_found(
            "No process is alive (every host stopped heart-beating): not a stuck step; see"
            " dead-process."
        )
    stepped = [h for h in inputs.hosts if h.last_step is not None]
    if not stepped:
        return not_found("No host recorded a step, so where the run stopped is unknown.")
    lowest = min(h.last_step for h in stepped if h.last_step is not None)
    highest = max(h.last_step for h in stepped if h.last_step is not None)
    behind = [h for h in stepped if h.last_step == lowest]
    evidence = [
        f"{h.host}: last step {h.last_step}"
        + (f" at {when(h.last_progress_time)}" if h.last_progress_time else "")
        + (" (not heart-beating)" if h.host in silent else "")
        for h in stepped
    ]
    alive_words = "the processes still heart-beat" if alive else "heartbeats are unknown"
    if lowest < highest:
        late = [h.host for h in behind]
        it = "it" if len(late) == 1 else "them"
        details = (
            f"{names(late)} stopped first, at step {lowest}, while"
            f" {of_hosts(len(stepped) - len(behind), len(stepped))} reached step {highest}:"
            f" the others are most likely waiting for {it} in a collective"
        )
        if set(late) & silent:
            details += " (see dead-process: it stopped heart-beating too)"
            score = 0.5
        else:
            details += f"; {alive_words}, so {it} {'is' if it == 'it' else 'are'} stuck, not dead"
            score = 0.8
        hosts = late
    else:
        timed = [h for h in stepped if h.last_progress_time is not None]
        first = min(timed, key=lambda h: h.last_progress_time or now) if timed else None
        if len(stepped) == 1:
            details = (
                f"{stepped[0].host} stopped at step {lowest} and {alive_words}: it is stuck"
                " inside a step (a deadlock, a collective or an input pipeline that stopped"
                " producing), not dead"
            )
        else:
            details = (
                f"All {len(stepped)} hosts stopped at step {lowest} together and {alive_words}:"
                " a collective that never completes (a deadlock, mismatched programs across"
                " hosts, a network fault) or an input pipeline that stopped producing"
            )
        if first is not None and len(timed) > 1:
            details += f"; {first.host} made its last progress first"
        score = 0.55
        hosts = [h.host for h in stepped]
    actions = [
        f"Dump the Python stacks of {names(hosts)} (`py-spy dump --pid <pid>`) and compare"
        " them: identical collective frames everywhere mean a collective that never completes.",
        "Check the interconnect and NIC error counters of those hosts and the XLA/NCCL logs"
        " (`NCCL_DEBUG=INFO`); a profile of a live process shows the op it is stuck in.",
    ]
    return found(details + ".", score, hosts, evidence, actions)


@analyzer("accelerator-memory-pressure", Layer.FRAMEWORK, "accelerator-memory-pressure.md")
def accelerator_memory_pressure(inputs: Inputs) -> Finding:
    """Accelerator memory (HBM/VRAM) nearly full, and whether one host holds more."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="accelerator memory"))
    limit = inputs.threshold(RuleName.ACCELERATOR_MEMORY, "utilizationPercent")
    reporting = [h for h in inputs.hosts if h.accelerator_memory_utilization is not None]
    if not reporting:
        return not_found("No host reported accelerator memory, so it could not be checked.")
    full = {
        h.host: h.accelerator_memory_utilization
        for h in reporting
        if h.accelerator_memory_utilization is not None
        and h.accelerator_memory_utilization >= limit
    }
    if not full:
        top = max(h.accelerator_memory_utilization or 0.0 for h in reporting)
        return not_found(
            f"Accelerator memory stayed at or below {percent(top)} on every host"
            f" ({len(reporting)} reporting; the limit is {percent(limit)})."
        )
    evidence = [f"{host}: accelerator memory {percent(v)} in use" for host, v in full.items()]
    details = f"Accelerator memory at or above {percent(limit)} on {names(full)}"
    details += f" ({of_hosts(len(full), len(reporting))})"
    if len(full) < len(reporting):
        details += "; only some hosts: uneven sharding or a larger batch on them"
    score = 0.5 if inputs.event.type == EventType.ACCELERATOR_MEMORY_PRESSURE else 0.6
    actions = [
        "Compare batch size, sequence length and sharding with the last good run;"
        " rematerialise activations (`jax.checkpoint`) or shard the optimizer state.",
        "Dump device memory (`jax.profiler.save_device_memory_profile`) to see what holds it.",
    ]
    return found(details + ".", score, full, evidence, actions)


_DEVICE_OOM = re.compile(
    r"resource_exhausted|out of memory (while|allocating|on device)|cuda out of memory|"
    r"outofmemoryerror|failed to allocate .* (hbm|device)|hbm",
    re.IGNORECASE,
)
_DEVICE_OOM_LOGGED = re.compile(
    r"resource_exhausted|out of memory (while|allocating|on device|trying to allocate)|"
    r"cuda out of memory|outofmemoryerror|failed to allocate .* (hbm|device)|"
    r"ran out of memory in memory space|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED",
    re.IGNORECASE,
)
"""The same in log lines, where a bare ``HBM`` (a usage line) says nothing of an OOM."""


def _oom_lines(inputs: Inputs) -> list[tuple[LogExcerpt, str]]:
    """Log lines of an accelerator OOM: matching lines anywhere, else an excerpt the
    detector kept as one."""
    return matching_lines(excerpts(inputs), _DEVICE_OOM_LOGGED) or kept_as(
        inputs, "accelerator-oom"
    )


@analyzer("accelerator-oom", Layer.FRAMEWORK, "accelerator-memory-pressure.md")
def accelerator_oom(inputs: Inputs) -> Finding:
    """The process ended because the accelerator ran out of memory (RESOURCE_EXHAUSTED), as
    the termination's facts or the run's log lines say."""
    classification = fact_text(inputs, "classification")
    text = f"{fact_text(inputs, 'errorType')} {fact_text(inputs, 'message')}"
    match = _DEVICE_OOM.search(text)
    logged = _oom_lines(inputs)
    hosts = inputs.event_hosts() | {e.host for e, _ in logged if e.host}
    if classification != "oom_accelerator" and match is None and not logged:
        return not_found(
            "Not an accelerator out-of-memory error: the termination is classified"
            f" '{classification or 'unknown'}', names no RESOURCE_EXHAUSTED or device OOM, and"
            " no log line of the run says so."
        )
    evidence = [f"error: {match.group(0)}"] if match else []
    if classification == "oom_accelerator":
        evidence.append(f"classified '{classification}'")
    evidence += quotes(logged)
    evidence += [
        f"{h.host}: accelerator memory {percent(h.accelerator_memory_utilization)} before it"
        for h in inputs.hosts
        if h.accelerator_memory_utilization is not None and (not hosts or h.host in hosts)
    ]
    if inputs.has_open_event(EventType.ACCELERATOR_MEMORY_PRESSURE):
        evidence.append("an accelerator memory pressure event was open")
    details = f"The process{on(hosts)} ran out of accelerator memory"
    effect = {
        EventType.HANG: "; its peers wait for it in the next collective",
        EventType.ORCHESTRATOR_INTERRUPTION: "; the restart follows the crash",
    }.get(inputs.event.type, "")
    # For a termination it is the cause itself; elsewhere it explains the event one step away.
    score = 0.9 if inputs.event.type == EventType.TERMINATION else 0.8
    actions = [
        "Lower the per-device batch or sequence length, rematerialise activations"
        " (`jax.checkpoint`), or shard parameters and optimizer state over more devices.",
        "Compare the configs with the last run that fitted; resume from the last checkpoint.",
    ]
    return found(details + effect + ".", score, hosts, evidence, actions)


def _pick(raised: list[Traceback], hosts: set[str]) -> Traceback | None:
    """The traceback that explains the event: the first on the hosts it names (later ones
    tend to cascade from it), else the first of the run."""
    own = [t for t in raised if t.excerpt.host in hosts]
    return next(iter(own or raised), None)


@analyzer("workload-exception", Layer.FRAMEWORK, "termination.md")
def workload_exception(inputs: Inputs) -> Finding:
    """An exception escaped the workload's code (not an OOM, not a hardware fault): from
    the termination's facts, or a traceback in the run's logs, with its last frames."""
    classification = fact_text(inputs, "classification")
    error_type = fact_text(inputs, "errorType")
    message = fact_text(inputs, "message")
    if classification in {"oom_host", "oom_accelerator", "hardware_error", "killed"}:
        return not_found(f"The termination is classified '{classification}', not an exception.")
    hosts = inputs.event_hosts()
    traceback = _pick(tracebacks(inputs), hosts)
    if classification != "user_exception" and not error_type and traceback is None:
        return not_found(
            "No exception was reported: the process ended without a traceback"
            + (" and the run's logs hold none." if inputs.context else ".")
        )
    last_line = message.strip().splitlines()[-1] if message.strip() else ""
    # What it said, for people: the fact's last line, else the traceback's message alone
    # (its type is named already).
    said = last_line
    if traceback is not None:
        error_type = error_type or traceback.error_type
        said = said or traceback.message
        last_line = last_line or f"{traceback.error_type}: {traceback.message}".rstrip(": ")
        if traceback.excerpt.host:
            hosts = hosts | {traceback.excerpt.host}
    evidence = [f"exception: {error_type or 'unknown type'}"]
    if last_line:
        evidence.append(f"last line: {last_line[:300]}")
    details = f"The workload raised {error_type or 'an exception'}{on(hosts)}"
    if said:
        details += f": {said[:200]}"
    if traceback is not None and traceback.frames:
        details += f" (in {traceback.frames[-1]})"
        evidence.append("last frames: " + " → ".join(traceback.frames))
    if traceback is not None:
        evidence += [quote(traceback.excerpt, line) for line in traceback.lines[-QUOTED_LINES:]]
    score = {
        EventType.TERMINATION: 0.85,
        EventType.HANG: 0.7,  # the crashed process leaves its peers waiting in a collective
    }.get(inputs.event.type, 0.6)
    raised = f"{error_type} {last_line}"
    if _DEVICE_OOM_LOGGED.search(raised) or COLLECTIVE_TIMEOUT.search(raised):
        # The exception only carries a cause another analyzer names (an OOM, a timeout).
        details += " (it reports an out-of-memory error or a collective timeout: see those)"
        score = 0.6
    if inputs.has_open_event(EventType.NUMERICAL_INSTABILITY):
        details += " (a numerical instability event was open: the exception may follow a NaN)"
        evidence.append("a numerical instability event was open")
    actions = [
        "Read the full traceback in the process's output (the run's logs) and fix the code or"
        " the data that raised it; resume from the last checkpoint.",
    ]
    return found(details + ".", score, hosts, evidence, actions)


@analyzer("exit-status", Layer.FRAMEWORK, "termination.md")
def exit_status(inputs: Inputs) -> Finding:
    """A non-zero exit with nothing else to go on."""
    classification = fact_text(inputs, "classification")
    exit_code = exit_code_fact(inputs)
    others = {"oom_host", "oom_accelerator", "hardware_error", "user_exception", "killed"}
    if classification in others or exit_code is None or exit_code == 0 or exit_code > 128:
        return not_found(
            "The exit status says nothing more than the other analyzers"
            f" (classified '{classification or 'unknown'}', exit code {exit_code})."
        )
    hosts = inputs.event_hosts()
    tail = fact_text(inputs, "message").strip().splitlines()[-3:]
    evidence = [f"exit code {exit_code}"] + [f"output: {line[:300]}" for line in tail]
    details = (
        f"The process{on(hosts)} exited with status {exit_code} and reported no"
        " exception: it chose to exit (sys.exit, a failed check) or a child process failed"
    )
    actions = [
        "Read the last lines of the process's output around the exit; rerun with more logging"
        " if they say nothing.",
    ]
    return found(details + ".", 0.5, hosts, evidence, actions)
