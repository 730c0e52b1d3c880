"""Realistic events and run contexts for the analyzer's tests."""

from datetime import UTC, datetime, timedelta
from typing import Any

from mldiag_analyzer.analyzers import Analyzer, Inputs
from mldiag_schemas.analyses import Analysis, AnalyzerReport, DetectionState
from mldiag_schemas.events import (
    EVENT_ID_NAMESPACE,
    Contention,
    EventState,
    EventType,
    Evidence,
    HostSnapshot,
    MetricWindow,
    ProcessShare,
    RunContext,
    Severity,
    WorkloadEvent,
)
from mldiag_schemas.ids import derived_id
from mldiag_schemas.logs import LogExcerpt

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
RUNBOOKS = "docs/runbooks/"
FINGERPRINT = {"jax": "0.4.35", "jaxlib": "0.4.35", "xla_flags": "a1b2c3", "git": "9f8e7d"}


def host(name: str, **fields: Any) -> HostSnapshot:
    """A healthy host of a 1 s/step data-parallel run; ``fields`` change what differs."""
    values: dict[str, Any] = {
        "host": name,
        "last_step": 1000,
        "last_progress_time": NOW - timedelta(seconds=1),
        "step_time": 1.0,
        "baseline_step_time": 1.0,
        "duty_cycle": 92.0,
        "host_cpu_utilization": 38.0,
        "host_memory_utilization": 55.0,
        "accelerator_memory_utilization": 72.0,
        "throttled": False,
        "temperature_celsius": 64.0,
        "clock_drop_mhz": 0.0,
        "data_wait_fraction": 0.02,
        "last_heartbeat_time": NOW - timedelta(seconds=4),
        "heartbeat_interval_seconds": 10.0,
        "fingerprint": dict(FINGERPRINT),
    }
    values.update(fields)
    return HostSnapshot(**values)


def quiet(**fields: Any) -> Contention:
    """A host where the run has its CPUs, disks and memory to itself (its baseline: 45% of
    the host for the run, 3% for everything else); ``fields`` change what differs."""
    values: dict[str, Any] = {
        "cpu_user_percent": 44.0,
        "cpu_system_percent": 4.0,
        "cpu_iowait_percent": 0.5,
        "cpu_steal_percent": 0.0,
        "run_cpu_percent": 45.0,
        "run_cpu_baseline_percent": 45.0,
        "other_cpu_percent": 3.0,
        "other_cpu_baseline_percent": 3.0,
        "load_per_cpu": 0.5,
        "swap_used_percent": 0.0,
        "swap_io_bytes_per_second": 0.0,
        "run_memory_rss_bytes": 8 * 2**30,
        "run_memory_rss_baseline_bytes": 8 * 2**30,
        "disk_busy_percent": 4.0,
        "disk_read_bytes_per_second": 20 * 2**20,
        "disk_write_bytes_per_second": 2 * 2**20,
        "disk_bytes_per_second_baseline": 22 * 2**20,
        "network_receive_bytes_per_second": 50 * 2**20,
        "network_transmit_bytes_per_second": 50 * 2**20,
        "top_processes": [ProcessShare(name="sshd", pid=812, cpu_percent=0.2, memory_percent=0.1)],
        "pcie_bytes_per_second": 6 * 2**30,
    }
    values.update(fields)
    return Contention(**values)


STRESS = ProcessShare(name="python stress.py", pid=4242, cpu_percent=37.0, memory_percent=0.5)
"""A neighbour burning six of sixteen cores."""


def neighbour() -> Contention:
    """Another process took 40% of the host (3% in the baseline): the run fell from 45% to
    28% of the host, and the load is 1.6 per CPU."""
    return quiet(
        cpu_user_percent=66.0,
        run_cpu_percent=28.0,
        other_cpu_percent=40.0,
        load_per_cpu=1.6,
        top_processes=[
            STRESS,
            ProcessShare(name="gzip", pid=5150, cpu_percent=2.5, memory_percent=0.1),
        ],
    )


def excerpt(kind: str, lines: list[str], host_: str = "host-1", seconds: int = 20) -> LogExcerpt:
    """Log lines of ``host_`` written ``seconds`` before the context was captured."""
    return LogExcerpt(kind=kind, host=host_, time=NOW - timedelta(seconds=seconds), lines=lines)


def hosts(count: int = 4, /, **changes: dict[str, Any]) -> list[HostSnapshot]:
    """``host-0`` ... ``host-<count-1>``, healthy unless ``changes`` names them."""
    return [host(f"host-{i}", **changes.get(f"host_{i}", {})) for i in range(count)]


def context(snapshots: list[HostSnapshot] | None = None, **fields: Any) -> RunContext:
    """The run's signals when the event opened (healthy hosts by default)."""
    return RunContext(captured_at=NOW, hosts=hosts() if snapshots is None else snapshots, **fields)


def event(
    type_: EventType,
    rule: str,
    hosts_: list[str] | None = None,
    evidence: Evidence | None = None,
    **fields: Any,
) -> WorkloadEvent:
    """An open event of ``type_``; its id is derived from the type, rule and hosts."""
    return WorkloadEvent(
        event_id=derived_id(EVENT_ID_NAMESPACE, type_, rule, *(hosts_ or [])),
        run_id="run-1",
        type=type_,
        display_name=f"{type_.lower().replace('_', ' ')}",
        severity=Severity.WARNING,
        state=EventState.OPEN,
        start_time=NOW - timedelta(seconds=30),
        rule=rule,
        hosts=hosts_ or [],
        evidence=evidence or Evidence(),
        **fields,
    )


def run(analyzer: Analyzer, event_: WorkloadEvent, context_: RunContext | None) -> AnalyzerReport:
    """One analyzer's report."""
    return analyzer.run(Inputs(event_, context_), RUNBOOKS)


def detected(report: AnalyzerReport) -> bool:
    """Whether the report found its cause."""
    return report.detection_state is DetectionState.DETECTED


def report_of(analysis: Analysis, name: str) -> AnalyzerReport:
    """The report of the analyzer called ``name``."""
    [report] = [r for r in analysis.reports if r.analyzer == name]
    return report


def degradation(
    snapshots: list[HostSnapshot] | None = None, **context_fields: Any
) -> tuple[WorkloadEvent, RunContext]:
    """A duty-cycle drop of the whole run (no host named), with its context."""
    evidence = Evidence(
        metric="tpu_duty_cycle",
        first_bad_step=980,
        windows=[
            MetricWindow(
                metric="tpu_duty_cycle",
                start_step=980,
                end_step=1000,
                start_time=NOW - timedelta(seconds=30),
                end_time=NOW,
                observed=60.0,
                baseline=90.0,
                count=3,
            )
        ],
    )
    return (
        event(EventType.PERFORMANCE_DEGRADATION, "duty-cycle-drop", evidence=evidence),
        context(snapshots, **context_fields),
    )


def straggler(slow: str = "host-2", **slow_fields: Any) -> tuple[WorkloadEvent, RunContext]:
    """``slow`` is 60% slower than its peers (plus ``slow_fields``)."""
    evidence = Evidence(
        metric="step_time",
        host=slow,
        first_bad_step=990,
        windows=[
            MetricWindow(
                metric="step_time",
                host=slow,
                start_step=990,
                end_step=999,
                observed=1.6,
                baseline=1.0,
                count=10,
            )
        ],
    )
    snapshots = [
        host(f"host-{i}", **({"step_time": 1.6, **slow_fields} if f"host-{i}" == slow else {}))
        for i in range(4)
    ]
    return event(EventType.STRAGGLER, "straggler", [slow], evidence), context(snapshots)


def hang(**changes: dict[str, Any]) -> tuple[WorkloadEvent, RunContext]:
    """No step for 10 minutes on 4 hosts; ``changes`` per host (``host_2={...}``)."""
    stalled = {
        "last_step": 1000,
        "last_progress_time": NOW - timedelta(minutes=10),
        "step_time": None,
        "duty_cycle": 0.0,
    }
    snapshots = [host(f"host-{i}", **{**stalled, **changes.get(f"host_{i}", {})}) for i in range(4)]
    hang_event = event(
        EventType.HANG,
        "hang",
        [f"host-{i}" for i in range(4)],
        Evidence(metric="step", facts={"secondsWithoutStep": 600}),
        time_lost_seconds=300.0,
    )
    return hang_event, context(snapshots)


def termination(**facts: Any) -> tuple[WorkloadEvent, RunContext]:
    """host-1's process ended; ``facts`` as the termination rule sets them."""
    ended = event(EventType.TERMINATION, "termination", ["host-1"], Evidence(facts=facts))
    return ended, context(run_phase="FAILED")


def non_finite(
    value: float = float("nan"), hosts_: list[str] | None = None, **evidence_fields: Any
) -> tuple[WorkloadEvent, RunContext]:
    """``loss`` became ``value`` at step 42 on host-3 (or ``hosts_``)."""
    named = hosts_ if hosts_ is not None else ["host-3"]
    fields: dict[str, Any] = {
        "metric": "loss",
        "host": named[0] if len(named) == 1 else "",
        "first_bad_step": 42,
        "first_bad_value": value,
        "last_good_step": 41,
        "last_good_value": 0.125,
    }
    fields.update(evidence_fields)
    return (
        event(EventType.NUMERICAL_INSTABILITY, "non-finite", named, Evidence(**fields)),
        context(),
    )
