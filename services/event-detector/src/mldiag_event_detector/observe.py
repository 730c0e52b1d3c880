"""Folding telemetry into a run's state.

Only the series the rules read are looked at point by point; every other series costs one
``max`` (step progress) and one C-level finiteness check, so the detector keeps up with
ingestion's full rate.
"""

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from mldiag_event_detector.book import EventBook
from mldiag_event_detector.rules import framework, liveness, numerics
from mldiag_event_detector.state import (
    TOP_PROCESS_STALE_SECONDS,
    TOP_PROCESSES,
    Compile,
    Gauge,
    Heartbeat,
    HostContention,
    HostState,
    OtherProcess,
    push,
)
from mldiag_schemas import monitoring as names
from mldiag_schemas.monitoring import RuleName
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived, RunHeartbeat

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _time(columns: MetricColumns, index: int, default: datetime) -> datetime:
    times = columns.times_unix_us
    return default if times is None else _EPOCH + timedelta(microseconds=times[index])


def _per_sample(
    columns: Iterable[MetricColumns], combine: Callable[[list[float]], float]
) -> list[float]:
    """One value per sample across a host's devices (mean, max or min of them).

    A sample is a point in time; points written without times (the ingestion does not stamp
    them) are told apart by their step, so two steps in one write stay two samples.
    """
    by_sample: dict[tuple[bool, int], list[float]] = defaultdict(list)
    for series in columns:
        keys = (
            [(True, at) for at in series.times_unix_us]
            if series.times_unix_us is not None
            else [(False, step) for step in series.steps]
        )
        for key, value in zip(keys, series.values, strict=True):
            if math.isfinite(value):
                by_sample[key].append(value)
    return [combine(by_sample[key]) for key in sorted(by_sample)]


def _gauge(gauge: Gauge, samples: list[float], warmup: int = 0, baseline: int = 0) -> None:
    for value in samples:
        if warmup <= gauge.seen < warmup + baseline:
            gauge.baseline.append(value)
        gauge.seen += 1
        push(gauge.recent, value)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


_HOST_SIGNALS = (
    names.HOST_CPU,
    names.HOST_CPU_USER,
    names.HOST_CPU_SYSTEM,
    names.HOST_CPU_IOWAIT,
    names.HOST_CPU_STEAL,
    names.RUN_CPU,
    names.RUN_MEMORY,
    names.HOST_LOAD,
    names.HOST_SWAP,
    names.HOST_SWAP_IO,
    names.DISK_BUSY,
    names.DISK_READ,
    names.DISK_WRITE,
    names.NETWORK_RECEIVE,
    names.NETWORK_TRANSMIT,
)
"""Contention signals with one series per host."""

_DEVICE_SUMS = (names.GPU_ECC_ERRORS, names.GPU_PCIE_RX, names.GPU_PCIE_TX)
"""Contention signals with one series per device, summed over the host's devices."""

_CONTENTION = frozenset(
    (
        *_HOST_SIGNALS,
        *_DEVICE_SUMS,
        names.TOP_PROCESS_CPU,
        names.TOP_PROCESS_MEMORY,
        names.GPU_XID,
        names.GPU_THROTTLE_REASONS,
        names.HOST_CPU_COUNT,
    )
)


def observe_metrics(book: EventBook, message: MetricPointsReceived) -> set[str]:
    """Fold one metric message into the run's state; return the hosts it touched."""
    state = book.state
    now = message.occurred_at
    if state.first_seen_at is None:
        state.first_seen_at = now
    if state.first_point_at is None:
        state.first_point_at = min(
            (
                _EPOCH + timedelta(microseconds=min(c.times_unix_us)) if c.times_unix_us else now
                for c in message.series
                if c.steps
            ),
            default=now,
        )
    by_host: dict[str, list[MetricColumns]] = defaultdict(list)
    for columns in message.series:
        if columns.steps:
            by_host[columns.host].append(columns)
    for host_name, series in by_host.items():
        host = state.host(host_name)
        # Restarts (a step again) before progress: a resumed run's batch that already goes
        # past the old step is one interruption, opened and resolved, not a second one.
        _observe_host(book, host_name, host, series, now)
        _progress(book, host_name, host, max(max(c.steps) for c in series), now)
    numerics.observe(book, message)
    return set(by_host)


def _progress(book: EventBook, name: str, host: HostState, step: int, now: datetime) -> None:
    if host.last_step is not None and step <= host.last_step:
        return
    if host.last_progress_at is not None:
        push(host.progress_gaps, max((now - host.last_progress_at).total_seconds(), 0.0))
    host.last_step = step
    host.last_progress_at = now
    liveness.on_progress(book, name, step, now)


def _observe_host(
    book: EventBook, name: str, host: HostState, series: list[MetricColumns], now: datetime
) -> None:
    grouped: dict[str, list[MetricColumns]] = defaultdict(list)
    for columns in series:
        grouped[columns.name].append(columns)
    _observe_pace(book, name, host, grouped, now)
    for columns in grouped.get(names.DATA_WAIT_TIME, []):
        for step, value in zip(columns.steps, columns.values, strict=True):
            if math.isfinite(value) and value >= 0:
                host.data_wait.add(step, value)
    for columns in grouped.get(names.CHECKPOINT_TIME, []):
        for index, (step, value) in enumerate(zip(columns.steps, columns.values, strict=True)):
            if math.isfinite(value) and value >= 0:
                framework.on_checkpoint(book, name, step, value, _time(columns, index, now))
    _observe_compiles(book, grouped.get(names.COMPILE_TIME, []), now)
    _observe_gauges(book, host, grouped)
    if not _CONTENTION.isdisjoint(grouped):
        _observe_contention(host.contention, grouped, now)


def _observe_pace(
    book: EventBook,
    name: str,
    host: HostState,
    grouped: dict[str, list[MetricColumns]],
    now: datetime,
) -> None:
    """Step time per step (or 1/throughput when a host logs only throughput)."""
    pace = grouped.get(names.STEP_TIME)
    if pace is None and names.THROUGHPUT in grouped and host.pace.seen == 0:
        host.pace_is_throughput = True
    if host.pace_is_throughput:
        pace = grouped.get(names.THROUGHPUT)
    if pace is None:
        return
    rule = book.policy.thresholds(RuleName.STEP_TIME_REGRESSION)
    warmup, baseline = int(rule["warmupSteps"]), int(rule["baselineSteps"])
    for columns in pace:
        for step, raw in sorted(zip(columns.steps, columns.values, strict=True)):
            if not math.isfinite(raw) or raw <= 0:
                continue
            if host.paced_step is not None and step <= host.paced_step:
                liveness.on_restart(book, name, host, host.paced_step, step, now)
            host.paced_step = step
            value = 1.0 / raw if host.pace_is_throughput else raw
            if warmup <= host.pace.seen < warmup + baseline:
                host.pace.baseline.append(value)
            host.pace.add(step, value)


def _observe_compiles(book: EventBook, series: list[MetricColumns], now: datetime) -> None:
    state = book.state
    warmup = book.policy.thresholds(RuleName.RECOMPILATION)["warmupSteps"]
    for columns in series:
        for index, (step, value) in enumerate(zip(columns.steps, columns.values, strict=True)):
            if not math.isfinite(value) or value < 0:
                continue
            state.compile_seconds += value
            if step > warmup:
                state.compiles.append(
                    Compile(at=_time(columns, index, now), step=step, seconds=value)
                )
                del state.compiles[:-50]


def _observe_gauges(
    book: EventBook, host: HostState, grouped: dict[str, list[MetricColumns]]
) -> None:
    """Per-device gauges folded into one sample per host and time (mean, max or min)."""
    duty = book.policy.thresholds(RuleName.DUTY_CYCLE_DROP)
    duty_series = [c for metric in names.DUTY_CYCLE_METRICS for c in grouped.get(metric, [])]
    if duty_series:
        _gauge(
            host.duty,
            _per_sample(duty_series, _mean),
            int(duty["warmupSamples"]),
            int(duty["baselineSamples"]),
        )
    memory = [c for metric in names.ACCELERATOR_MEMORY_METRICS for c in grouped.get(metric, [])]
    if memory:
        _gauge(host.accelerator_memory, _per_sample(memory, max))
    for metric, gauge in (
        (names.HOST_MEMORY, host.host_memory),
        (names.HOST_CPU, host.host_cpu),
        (names.TEMPERATURE, host.temperature),
    ):
        if metric in grouped:
            _gauge(gauge, _per_sample(grouped[metric], max))
    if names.SM_CLOCK in grouped:
        # The slowest device's clock, against the host's own first samples.
        _gauge(host.sm_clock, _per_sample(grouped[names.SM_CLOCK], min), 2, 6)
    if names.THROTTLED in grouped:
        host.throttled = any(v > 0 for c in grouped[names.THROTTLED] for v in c.values[-5:])


def _observe_contention(
    contention: HostContention, grouped: dict[str, list[MetricColumns]], now: datetime
) -> None:
    """Contention signals into per-host windows. Samples are dated by the server's clock
    (the message's), the clock the rules date deviations by, so "since the slowdown began"
    never depends on a host's clock being right."""
    at = now.timestamp()
    for metric in _HOST_SIGNALS:
        if metric in grouped:
            for value in _per_sample(grouped[metric], max):
                contention.signal(metric).add(at, value)
    for metric in _DEVICE_SUMS:
        if metric in grouped:
            for value in _per_sample(grouped[metric], sum):
                if metric == names.GPU_ECC_ERRORS and contention.ecc_first is None:
                    contention.ecc_first = value
                contention.signal(metric).add(at, value)
    counts = [c.values[-1] for c in grouped.get(names.HOST_CPU_COUNT, []) if c.values]
    if counts and math.isfinite(counts[-1]) and counts[-1] >= 1:
        contention.cpu_count = int(counts[-1])
    _observe_accelerator_faults(contention, grouped)
    _observe_processes(contention, grouped, at)


def _observe_accelerator_faults(
    contention: HostContention, grouped: dict[str, list[MetricColumns]]
) -> None:
    """XID codes (the latest few, distinct) and the latest throttle reasons (OR-ed)."""
    for columns in grouped.get(names.GPU_XID, []):
        for value in columns.values:
            if math.isfinite(value) and int(value) not in contention.xids:
                contention.xids = [*contention.xids, int(value)][-8:]
    masks = [c.values[-1] for c in grouped.get(names.GPU_THROTTLE_REASONS, []) if c.values]
    if masks:
        contention.throttle_mask = 0
        for mask in masks:
            contention.throttle_mask |= int(mask) if math.isfinite(mask) and mask >= 0 else 0


def _observe_processes(
    contention: HostContention, grouped: dict[str, list[MetricColumns]], at: float
) -> None:
    """The latest sample of each top process; the stale and the surplus forgotten."""
    sampled = False
    for metric, field in (
        (names.TOP_PROCESS_CPU, "cpu_percent"),
        (names.TOP_PROCESS_MEMORY, "memory_percent"),
    ):
        for columns in grouped.get(metric, []):
            pid = columns.labels.get(names.PID_LABEL, "")
            if not pid.isdigit() or not columns.values or not math.isfinite(columns.values[-1]):
                continue
            sampled = True
            process = contention.processes.get(pid)
            name = columns.labels.get(names.PROCESS_LABEL, "") or f"pid {pid}"
            if process is None or process.at < at:
                # A new sample: the other signal is unknown until it comes too.
                process = contention.processes[pid] = OtherProcess(name=name, at=at)
            setattr(process, field, columns.values[-1])
    if not sampled:
        return
    fresh = {
        pid: process
        for pid, process in contention.processes.items()
        if process.at >= at - TOP_PROCESS_STALE_SECONDS
    }
    ranked = sorted(fresh.items(), key=lambda item: (-item[1].at, -(item[1].cpu_percent or 0.0)))
    contention.processes = dict(ranked[:TOP_PROCESSES])


def observe_heartbeat(book: EventBook, beat: RunHeartbeat) -> None:
    """A process is alive: remember it, its pid (a new one is a restart) and fingerprint."""
    state = book.state
    if state.first_seen_at is None:
        state.first_seen_at = beat.received_at
    host = state.host(beat.host)
    key = str(beat.process_index)
    previous = host.heartbeats.get(key)
    if previous is not None and beat.received_at < previous.received_at:
        return  # an older heartbeat delivered late says nothing new
    # Kept before a restart is judged: the event it opens takes a snapshot of the run, in
    # which the new process is the one beating (not a host silent since the old one died).
    host.heartbeats[key] = Heartbeat(
        pid=beat.pid,
        received_at=beat.received_at,
        interval_seconds=beat.interval_seconds,
        step=beat.step,
    )
    if state.job:
        liveness.on_job_heartbeat(book, beat.host, host, beat.pid, beat.received_at)
    elif previous is not None and previous.pid and beat.pid and beat.pid != previous.pid:
        liveness.on_new_process(book, beat.host, host, previous.pid, beat.pid, beat.received_at)
    if beat.step is not None:
        _progress(book, beat.host, host, beat.step, beat.received_at)
    if beat.fingerprint and beat.fingerprint != host.fingerprint:
        host.fingerprint = dict(beat.fingerprint)
        framework.config_drift(book, beat.received_at)
