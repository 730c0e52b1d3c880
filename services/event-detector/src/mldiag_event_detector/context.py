"""The run's cross-layer signals at the moment an event opens, for the analyzer."""

from datetime import datetime, timedelta

from mldiag_event_detector.state import (
    PROCESS_SLACK_SECONDS,
    Gauge,
    HostContention,
    HostState,
    RunState,
    StepSeries,
    TimedSeries,
    median,
)
from mldiag_schemas import monitoring as names
from mldiag_schemas.events import (
    Contention,
    EventType,
    HostSnapshot,
    ProcessShare,
    RunContext,
    WorkloadEvent,
)
from mldiag_schemas.logs import LogExcerpt

RECENT = 5
"""Samples (or steps) that count as "recent" in a snapshot."""

EXCERPTS_BEFORE = timedelta(minutes=5)
"""Log excerpts this long before an event started are still about it."""

SHOWN_PROCESSES = 5
"""Other processes named per host in a snapshot."""

THROTTLE_REASONS = (
    (0x1, "idle"),
    (0x2, "applications-clocks"),
    (0x4, "power"),
    (0x8, "hw-slowdown"),
    (0x20, "thermal"),
    (0x40, "hw-thermal"),
    (0x80, "hw-power-brake"),
    (0x100, "display-clocks"),
)
"""NVML's clocks-throttle-reason bits, by name (``sync-boost`` 0x10 is not a slowdown)."""


def _recent_median(series: StepSeries) -> float | None:
    return median(series.values[-RECENT:]) if series.values else None


def _recent_max(gauge: Gauge) -> float | None:
    return max(gauge.recent[-RECENT:]) if gauge.recent else None


def _data_wait_fraction(host: HostState) -> float | None:
    shares = [
        wait / step
        for step_no, wait in zip(
            host.data_wait.steps[-RECENT:], host.data_wait.values[-RECENT:], strict=True
        )
        if (step := host.pace.at(step_no)) and not host.pace_is_throughput
    ]
    return median(shares) if shares else None


def _clock_drop(gauge: Gauge) -> float | None:
    if not gauge.baseline or not gauge.recent:
        return None
    return median(gauge.baseline) - median(gauge.recent[-RECENT:])


def _window(series: TimedSeries | None, since: float) -> float | None:
    """The median of the samples from ``since`` on (the last few if none came since)."""
    if series is None or not series.values:
        return None
    return median(series.since(since) or series.values[-RECENT:])


def _baseline(series: TimedSeries | None, since: float) -> float | None:
    """The median of what was normal before ``since`` (see :meth:`TimedSeries.baseline_before`)."""
    if series is None:
        return None
    normal = series.baseline_before(since)
    return median(normal) if normal else None


def _difference(total: float | None, part: float | None) -> float | None:
    return max(total - part, 0.0) if total is not None and part is not None else None


def _sum(*values: float | None) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _top(contention: HostContention, since: float) -> list[ProcessShare]:
    shares = [
        ProcessShare(
            name=process.name,
            pid=int(pid),
            cpu_percent=process.cpu_percent,
            memory_percent=process.memory_percent,
        )
        for pid, process in contention.processes.items()
        if process.at >= since
    ]
    shares.sort(key=lambda share: (-(share.cpu_percent or 0.0), -(share.memory_percent or 0.0)))
    return shares[:SHOWN_PROCESSES]


def contention(host: HostState, since: datetime) -> Contention | None:
    """Contention on the host from ``since`` (the deviation's start) on, against the samples
    just before it; None where the host samples none of it."""
    sampled = host.contention
    if not sampled.series and not sampled.processes and not sampled.xids:
        return None
    start = since.timestamp()
    series = sampled.series.get

    def recent(metric: str) -> float | None:
        return _window(series(metric), start)

    host_cpu, run_cpu = recent(names.HOST_CPU), recent(names.RUN_CPU)
    run_base = _baseline(series(names.RUN_CPU), start)
    ecc_series = series(names.GPU_ECC_ERRORS)
    ecc = ecc_series.values[-1] if ecc_series is not None and ecc_series.values else None
    return Contention(
        cpu_count=sampled.cpu_count,
        cpu_user_percent=recent(names.HOST_CPU_USER),
        cpu_system_percent=recent(names.HOST_CPU_SYSTEM),
        cpu_iowait_percent=recent(names.HOST_CPU_IOWAIT),
        cpu_steal_percent=recent(names.HOST_CPU_STEAL),
        run_cpu_percent=run_cpu,
        run_cpu_baseline_percent=run_base,
        other_cpu_percent=_difference(host_cpu, run_cpu),
        other_cpu_baseline_percent=_difference(_baseline(series(names.HOST_CPU), start), run_base),
        load_per_cpu=recent(names.HOST_LOAD),
        swap_used_percent=recent(names.HOST_SWAP),
        swap_io_bytes_per_second=recent(names.HOST_SWAP_IO),
        run_memory_rss_bytes=recent(names.RUN_MEMORY),
        run_memory_rss_baseline_bytes=_baseline(series(names.RUN_MEMORY), start),
        disk_busy_percent=recent(names.DISK_BUSY),
        disk_read_bytes_per_second=recent(names.DISK_READ),
        disk_write_bytes_per_second=recent(names.DISK_WRITE),
        disk_bytes_per_second_baseline=_sum(
            _baseline(series(names.DISK_READ), start), _baseline(series(names.DISK_WRITE), start)
        ),
        network_receive_bytes_per_second=recent(names.NETWORK_RECEIVE),
        network_transmit_bytes_per_second=recent(names.NETWORK_TRANSMIT),
        top_processes=_top(sampled, start - PROCESS_SLACK_SECONDS),
        accelerator_ecc_errors=(
            _difference(ecc, sampled.ecc_first) if sampled.ecc_first is not None else ecc
        ),
        accelerator_xid_errors=list(sampled.xids),
        accelerator_throttle_reasons=[
            reason for bit, reason in THROTTLE_REASONS if sampled.throttle_mask & bit
        ],
        pcie_bytes_per_second=_sum(recent(names.GPU_PCIE_RX), recent(names.GPU_PCIE_TX)),
    )


def host_snapshot(name: str, host: HostState, since: datetime | None = None) -> HostSnapshot:
    """One host as the analyzer sees it (contention from ``since`` on, when given)."""
    beats = list(host.heartbeats.values())
    return HostSnapshot(
        host=name,
        last_step=host.last_step,
        # A step recorded again is progress, by the new process of a restart (the snapshot of
        # the interruption it opens is taken before the step is counted as progress).
        last_progress_time=max(
            (at for at in (host.last_progress_at, host.step_again_at) if at is not None),
            default=None,
        ),
        step_time=None if host.pace_is_throughput else _recent_median(host.pace),
        baseline_step_time=(
            median(host.pace.baseline)
            if host.pace.baseline and not host.pace_is_throughput
            else None
        ),
        duty_cycle=median(host.duty.recent[-RECENT:]) if host.duty.recent else None,
        host_cpu_utilization=_recent_max(host.host_cpu),
        host_memory_utilization=_recent_max(host.host_memory),
        accelerator_memory_utilization=_recent_max(host.accelerator_memory),
        throttled=host.throttled or None,
        temperature_celsius=_recent_max(host.temperature),
        clock_drop_mhz=_clock_drop(host.sm_clock),
        data_wait_fraction=_data_wait_fraction(host),
        last_heartbeat_time=max((beat.received_at for beat in beats), default=None),
        heartbeat_interval_seconds=max((beat.interval_seconds for beat in beats), default=None),
        fingerprint=host.fingerprint,
        restarts=host.restarts,
        contention=contention(host, since) if since is not None else None,
    )


def excerpts(state: RunState, event: WorkloadEvent) -> list[LogExcerpt]:
    """The run's telling log lines about ``event``: from a few minutes before it on (a
    termination's traceback is often written, or delivered, after the run ended)."""
    horizon = event.start_time - EXCERPTS_BEFORE
    return [
        LogExcerpt(kind=kept.kind, host=kept.host, time=kept.time, lines=list(kept.lines))
        for kept in state.excerpts
        if kept.last_time >= horizon
        and (event.type is EventType.TERMINATION or kept.time <= (event.end_time or kept.time))
    ]


def snapshot(state: RunState, now: datetime, event: WorkloadEvent) -> RunContext:
    """The run's signals now, around ``event``."""
    return RunContext(
        captured_at=now,
        run_phase=state.phase,
        hosts=[
            host_snapshot(name, state.hosts[name], event.start_time) for name in sorted(state.hosts)
        ],
        compile_steps=[compile_.step for compile_ in state.compiles],
        compile_seconds=state.compile_seconds,
        checkpoint_fraction=state.checkpoint_fraction,
        signals=list(state.signals),
        config_changes=list(state.config_changes),
        events=[
            f"{other.type}: {other.display_name}"
            for other in state.open_events.values()
            if other.event_id != event.event_id
        ],
        log_excerpts=excerpts(state, event),
    )
