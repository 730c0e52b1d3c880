"""Workload events: what the event-detector saw hurt a run, with its evidence."""

import enum
import uuid
from datetime import datetime
from typing import Literal

from pydantic import Field, JsonValue

from mldiag_schemas.analyses import AnalyzerReport
from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import RunId
from mldiag_schemas.logs import LogExcerpt

EVENT_ID_NAMESPACE = uuid.UUID("5b7f6f3e-2a4f-4d55-9c55-1f0c1b7e0e01")
"""uuid5 namespace of workload event ids (the same signal always yields the same id)."""


class EventType(enum.StrEnum):
    """Kinds of workload event (see docs/monitoring.md for the rule behind each)."""

    PERFORMANCE_DEGRADATION = "PERFORMANCE_DEGRADATION"
    STRAGGLER = "STRAGGLER"
    HANG = "HANG"
    ORCHESTRATOR_INTERRUPTION = "ORCHESTRATOR_INTERRUPTION"
    TERMINATION = "TERMINATION"
    ACCELERATOR_MEMORY_PRESSURE = "ACCELERATOR_MEMORY_PRESSURE"
    HOST_RESOURCE_EXHAUSTION = "HOST_RESOURCE_EXHAUSTION"
    RECOMPILATION_STORM = "RECOMPILATION_STORM"
    INPUT_STALL = "INPUT_STALL"
    CHECKPOINT_STALL = "CHECKPOINT_STALL"
    NUMERICAL_INSTABILITY = "NUMERICAL_INSTABILITY"
    CONFIG_DRIFT = "CONFIG_DRIFT"


class EventState(enum.StrEnum):
    """Lifecycle of a workload event."""

    OPEN = "OPEN"
    RESOLVED = "RESOLVED"


class Severity(enum.StrEnum):
    """How much an event hurts the workload."""

    INFO = "INFO"
    WARNING = "WARNING"
    CRITICAL = "CRITICAL"


class MetricWindow(Contract):
    """A window of one signal that the rule compared with a reference."""

    metric: str = Field(description="The signal (a metric name, or `heartbeat`).")
    host: str = Field(default="", description="Its host; empty when aggregated over hosts.")
    start_step: int | None = Field(default=None, description="First step of the window.")
    end_step: int | None = Field(default=None, description="Last step of the window.")
    start_time: datetime | None = Field(default=None, description="When the window starts.")
    end_time: datetime | None = Field(default=None, description="When it ends.")
    observed: float | None = Field(default=None, description="The window's value (median).")
    baseline: float | None = Field(default=None, description="The reference it was held to.")
    count: int = Field(default=0, description="Points in the window.")


class Evidence(Contract):
    """What triggered an event: the windows, and the facts a rule adds."""

    metric: str = Field(default="", description="The main signal the rule watched.")
    host: str = Field(default="", description="Host the triggering value came from.")
    first_bad_step: int | None = Field(default=None, description="First step judged bad.")
    first_bad_value: float | None = Field(default=None, description="Its value.")
    last_good_step: int | None = Field(default=None, description="Last step before it, if any.")
    last_good_value: float | None = Field(default=None, description="That value.")
    windows: list[MetricWindow] = Field(
        default_factory=list, description="The metric windows compared."
    )
    facts: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="Rule-specific facts (exit code, signal, compile count, fingerprints…).",
    )


class WorkloadEvent(Contract):
    """An event affecting a run (compatible with ML Diagnostics' monitored events).

    The detector fills everything up to ``revision``; run-registry adds ``name`` and the
    analyzer's verdict (``analyzerInsightFound``, ``analyzerReports``, ``timeLostSeconds``
    when the analysis counted more) when it serves the event.
    """

    name: str = Field(
        default="",
        description="`projects/{p}/locations/{l}/machineLearningRuns/{r}/monitoredEvents/{id}`"
        " (set by the API).",
    )
    event_id: uuid.UUID = Field(description="Stable id: the same signal yields the same id.")
    run_id: RunId = Field(description="The run it affects.")
    type: EventType = Field(description="What kind of event.")
    display_name: str = Field(description="One line for people.")
    severity: Severity = Field(description="How much it hurts.")
    state: EventState = Field(description="Open until the signal recovers.")
    start_time: datetime = Field(description="When the signal was first seen.")
    end_time: datetime | None = Field(default=None, description="When it was resolved.")
    update_time: datetime | None = Field(default=None, description="Last change.")
    rule: str = Field(description="The detection rule that fired.")
    thresholds: dict[str, float] = Field(
        default_factory=dict, description="The rule's thresholds as applied to this run."
    )
    hosts: list[str] = Field(default_factory=list, description="Hosts affected.")
    evidence: Evidence = Field(default_factory=Evidence, description="What triggered it.")
    time_lost_seconds: float = Field(
        default=0.0, ge=0, description="Time the workload lost to it so far (badput)."
    )
    revision: int = Field(default=1, ge=1, description="Bumped on every change.")
    analyzer_insight_found: bool = Field(
        default=False, description="Whether an analyzer found a cause (set by the API)."
    )
    analyzer_reports: list[AnalyzerReport] = Field(
        default_factory=list, description="The analyzers' reports, most probable cause first."
    )


class ProcessShare(Contract):
    """A process on a host and its share of the host, as sampled (one of the top few)."""

    name: str = Field(description="Its name (the executable, or the script python runs).")
    pid: int = Field(description="Its process id.")
    cpu_percent: float | None = Field(
        default=None, description="Its CPU, in % of the whole host (all cores = 100)."
    )
    memory_percent: float | None = Field(
        default=None, description="Its resident memory, in % of the host's memory."
    )


class Contention(Contract):
    """What contention on a host looked like around an event: the recent median of each
    sampled signal (unset where the host does not sample it), and its baseline where a
    change is what matters: the median of the samples just before the deviation began, or
    of the run's first samples after warm-up when too few came before it."""

    cpu_user_percent: float | None = Field(default=None, description="Host CPU in user mode.")
    cpu_system_percent: float | None = Field(default=None, description="Host CPU in the kernel.")
    cpu_iowait_percent: float | None = Field(default=None, description="Host CPU waiting on I/O.")
    cpu_steal_percent: float | None = Field(
        default=None, description="Host CPU taken by the hypervisor for other guests."
    )
    cpu_count: int | None = Field(
        default=None,
        description="The host's logical CPUs (a share of the whole host in cores is share x"
        " count / 100).",
    )
    run_cpu_percent: float | None = Field(
        default=None, description="The run's own process tree, in % of the whole host."
    )
    run_cpu_baseline_percent: float | None = Field(
        default=None, description="The run's own share in its baseline."
    )
    other_cpu_percent: float | None = Field(
        default=None, description="Host CPU used by everything but the run's processes."
    )
    other_cpu_baseline_percent: float | None = Field(
        default=None, description="The same in the run's baseline."
    )
    load_per_cpu: float | None = Field(
        default=None, description="1-minute load average divided by the host's CPUs."
    )
    swap_used_percent: float | None = Field(default=None, description="Swap in use.")
    swap_io_bytes_per_second: float | None = Field(
        default=None, description="Pages swapped in and out, in bytes per second."
    )
    run_memory_rss_bytes: float | None = Field(
        default=None, description="The run's process tree's resident memory."
    )
    run_memory_rss_baseline_bytes: float | None = Field(
        default=None, description="The same in the run's baseline."
    )
    disk_busy_percent: float | None = Field(
        default=None, description="Share of time the busiest disk had I/O in flight."
    )
    disk_read_bytes_per_second: float | None = Field(default=None, description="Disk reads.")
    disk_write_bytes_per_second: float | None = Field(default=None, description="Disk writes.")
    disk_bytes_per_second_baseline: float | None = Field(
        default=None, description="Disk reads + writes in the run's baseline."
    )
    network_receive_bytes_per_second: float | None = Field(
        default=None, description="Network received."
    )
    network_transmit_bytes_per_second: float | None = Field(
        default=None, description="Network sent."
    )
    top_processes: list[ProcessShare] = Field(
        default_factory=list,
        description="The other processes taking the most CPU or memory (latest sample while"
        " the host was contended), most first.",
    )
    accelerator_ecc_errors: float | None = Field(
        default=None, description="Uncorrected ECC errors counted since the run's first sample."
    )
    accelerator_xid_errors: list[int] = Field(
        default_factory=list, description="XID error codes the GPUs reported (NVIDIA)."
    )
    accelerator_throttle_reasons: list[str] = Field(
        default_factory=list,
        description="Why GPU clocks are held down (`power`, `thermal`, `hw-slowdown`, …).",
    )
    pcie_bytes_per_second: float | None = Field(
        default=None, description="PCIe throughput of the GPUs (rx + tx)."
    )


class HostSnapshot(Contract):
    """What the detector knows about one host of a run when an event opens."""

    host: str = Field(description="The host.")
    last_step: int | None = Field(default=None, description="Highest step it recorded.")
    last_progress_time: datetime | None = Field(
        default=None, description="When it last recorded a new step."
    )
    step_time: float | None = Field(default=None, description="Recent median step time (s).")
    baseline_step_time: float | None = Field(
        default=None, description="Median step time of its baseline."
    )
    duty_cycle: float | None = Field(default=None, description="Recent duty cycle (%).")
    host_cpu_utilization: float | None = Field(default=None, description="Recent max CPU %.")
    host_memory_utilization: float | None = Field(
        default=None, description="Recent max host memory %."
    )
    accelerator_memory_utilization: float | None = Field(
        default=None, description="Recent max accelerator memory % over its devices."
    )
    throttled: bool | None = Field(default=None, description="A GPU reported throttling.")
    temperature_celsius: float | None = Field(default=None, description="Recent max temp.")
    clock_drop_mhz: float | None = Field(
        default=None, description="Baseline minus recent SM clock (positive: slower)."
    )
    data_wait_fraction: float | None = Field(
        default=None, description="Recent median share of the step spent waiting for data."
    )
    last_heartbeat_time: datetime | None = Field(default=None, description="Latest heartbeat.")
    heartbeat_interval_seconds: float | None = Field(
        default=None, description="The interval its processes announced."
    )
    fingerprint: dict[str, str] = Field(
        default_factory=dict, description="Its environment fingerprint (from heartbeats)."
    )
    restarts: int = Field(default=0, description="Restarts seen (step recorded again, new pid).")
    contention: Contention | None = Field(
        default=None, description="Contention on the host around the event, where sampled."
    )


class RunContext(Contract):
    """The cross-layer signals of a run around an event, for the analyzer."""

    captured_at: datetime = Field(description="When the snapshot was taken.")
    run_phase: str = Field(default="ACTIVE", description="The run's phase then.")
    hosts: list[HostSnapshot] = Field(default_factory=list, description="Per host, by name.")
    compile_steps: list[int] = Field(
        default_factory=list, description="Steps of recent compilations (after warm-up)."
    )
    compile_seconds: float = Field(default=0.0, description="Seconds spent compiling so far.")
    checkpoint_fraction: float | None = Field(
        default=None, description="Share of the last checkpoint interval spent blocked."
    )
    signals: list[str] = Field(
        default_factory=list, description="Recent lifecycle signals, oldest first, in words."
    )
    config_changes: list[str] = Field(
        default_factory=list, description="Config sections changed during the run."
    )
    events: list[str] = Field(
        default_factory=list, description="Other open events of the run (type: display name)."
    )
    log_excerpts: list[LogExcerpt] = Field(
        default_factory=list,
        description="Telling log lines of the run around the event (tracebacks, out-of-memory"
        " messages, timeouts, kills), oldest first.",
    )


class WorkloadEventOpened(Envelope):
    """The detector opened an event. Subject: ``events.workload.opened.<run id>``."""

    type: Literal["events.workload.opened"] = "events.workload.opened"
    event: WorkloadEvent = Field(description="The event as opened.")
    context: RunContext | None = Field(
        default=None, description="The run's signals when it opened (for the analyzer)."
    )

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.event.run_id


class WorkloadEventUpdated(Envelope):
    """An open event changed (hosts, evidence, time lost). Subject:
    ``events.workload.updated.<run id>``; keep the highest ``event.revision``."""

    type: Literal["events.workload.updated"] = "events.workload.updated"
    event: WorkloadEvent = Field(description="The event after the change.")
    context: RunContext | None = Field(
        default=None,
        description="The run's signals now, when the change brought new evidence (the"
        " analyzer analyses the event again).",
    )

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.event.run_id


class WorkloadEventResolved(Envelope):
    """The signal recovered or the run ended. Subject: ``events.workload.resolved.<run id>``."""

    type: Literal["events.workload.resolved"] = "events.workload.resolved"
    event: WorkloadEvent = Field(description="The event as resolved (endTime set).")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.event.run_id


WorkloadEventChange = WorkloadEventOpened | WorkloadEventUpdated | WorkloadEventResolved
"""Any message about an event's life."""


def change_message_id(event: WorkloadEvent) -> uuid.UUID:
    """The message id of one revision of an event: a redelivery republishes the same id."""
    return uuid.uuid5(event.event_id, str(event.revision))


class ListEventsResponse(Contract):
    """Events, one page (by start time)."""

    events: list[WorkloadEvent] = Field(description="The events.")
    next_page_token: str = Field(default="", description="Token of the next page; empty at end.")
