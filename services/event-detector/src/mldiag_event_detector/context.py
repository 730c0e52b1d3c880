"""The run's cross-layer signals at the moment an event opens, for the analyzer."""

from datetime import datetime

from mldiag_event_detector.state import Gauge, HostState, RunState, StepSeries, median
from mldiag_schemas.events import HostSnapshot, RunContext

RECENT = 5
"""Samples (or steps) that count as "recent" in a snapshot."""


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


def host_snapshot(name: str, host: HostState) -> HostSnapshot:
    """One host as the analyzer sees it."""
    beats = list(host.heartbeats.values())
    return HostSnapshot(
        host=name,
        last_step=host.last_step,
        last_progress_time=host.last_progress_at,
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
    )


def snapshot(state: RunState, now: datetime) -> RunContext:
    """The run's signals now."""
    return RunContext(
        captured_at=now,
        run_phase=state.phase,
        hosts=[host_snapshot(name, state.hosts[name]) for name in sorted(state.hosts)],
        compile_steps=[compile_.step for compile_ in state.compiles],
        compile_seconds=state.compile_seconds,
        checkpoint_fraction=state.checkpoint_fraction,
        signals=list(state.signals),
        config_changes=list(state.config_changes),
        events=[f"{event.type}: {event.display_name}" for event in state.open_events.values()],
    )
