"""Workload monitoring: the detection rules, their documented defaults, and overrides.

Every rule has a name, the event type it opens and named thresholds with defaults. A project
and a run may override any of them (and switch a rule off); the detector resolves
``run override → project override → default`` per threshold.
"""

import enum
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import LocationId, ProjectId

# Metric names the rules read (the SDK records them; any producer may).
STEP_TIME = "step_time"
"""Seconds one training step took (per host)."""
THROUGHPUT = "throughput"
"""Items (tokens, samples) per second; higher is better."""
DATA_WAIT_TIME = "data_wait_time"
"""Seconds of a step spent waiting for input (``run.data_wait()`` in the SDK)."""
CHECKPOINT_TIME = "checkpoint_time"
"""Seconds a checkpoint save blocked training (``run.checkpoint()`` in the SDK)."""
COMPILE_TIME = "compile_time"
"""Seconds one XLA compilation took; one point per compilation (JAX's monitoring events)."""
DUTY_CYCLE_METRICS = ("tpu_duty_cycle", "gpu_duty_cycle")
"""Accelerator duty cycle (%), one series per device."""
ACCELERATOR_MEMORY_METRICS = ("hbm_utilization", "vram_utilization")
"""Accelerator memory in use (%), one series per device."""
HOST_MEMORY = "host_memory_utilization"
"""Host memory in use (%)."""
HOST_CPU = "host_cpu_utilization"
"""Host CPU in use (%)."""
THROTTLED = "gpu_throttled"
"""1 while a GPU's clocks are held down for power or heat."""
TEMPERATURE = "gpu_temperature_celsius"
"""GPU temperature."""
SM_CLOCK = "gpu_sm_clock_mhz"
"""GPU SM clock; a drop against its own baseline is throttling."""

# What contention looks like (sampled every second by the SDK, `mldiag run` and `mldiag
# agent` from cumulative counters; each left out where the host cannot tell it).
HOST_CPU_USER = "host_cpu_user_percent"
"""Host CPU time in user mode (% of all cores; user + nice)."""
HOST_CPU_SYSTEM = "host_cpu_system_percent"
"""Host CPU time in the kernel (% of all cores; system + irq + softirq)."""
HOST_CPU_IOWAIT = "host_cpu_iowait_percent"
"""Host CPU time idle while waiting on I/O (% of all cores)."""
HOST_CPU_STEAL = "host_cpu_steal_percent"
"""Host CPU time the hypervisor gave other guests (% of all cores)."""
RUN_CPU = "run_cpu_utilization"
"""CPU of the run's own process tree on the host (% of all cores, so comparable with
``host_cpu_utilization``; host minus run is what others take)."""
RUN_MEMORY = "run_memory_rss_bytes"
"""Resident memory of the run's own process tree on the host."""
HOST_LOAD = "host_load_per_cpu"
"""1-minute load average divided by the number of CPUs."""
HOST_CPU_COUNT = "host_cpu_count"
"""The host's logical CPUs (so a share of the host can be said in cores)."""
HOST_SWAP = "host_swap_utilization"
"""Swap in use (%)."""
HOST_SWAP_IO = "host_swap_io_bytes_per_second"
"""Bytes swapped in and out per second."""
DISK_BUSY = "host_disk_busy_percent"
"""Share of time the busiest disk had I/O in flight (%)."""
DISK_READ = "host_disk_read_bytes_per_second"
"""Bytes read from disks per second."""
DISK_WRITE = "host_disk_write_bytes_per_second"
"""Bytes written to disks per second."""
NETWORK_RECEIVE = "host_network_receive_bytes_per_second"
"""Bytes received on non-loopback interfaces per second."""
NETWORK_TRANSMIT = "host_network_transmit_bytes_per_second"
"""Bytes sent on non-loopback interfaces per second."""
TOP_PROCESS_CPU = "host_top_process_cpu_percent"
"""CPU of one of the top other processes (% of all cores); labels ``process`` (its name) and
``pid``. Sampled only while the host is busy, at most every few seconds."""
TOP_PROCESS_MEMORY = "host_top_process_memory_percent"
"""Resident memory of one of the top other processes (% of host memory); labels as above.
Sampled only while host memory is short."""
GPU_ECC_ERRORS = "gpu_ecc_uncorrected_errors"
"""Uncorrected ECC errors of a GPU (volatile counter), label ``device``."""
GPU_XID = "gpu_xid_error"
"""An XID error a GPU reported: one point per error, its value the XID code; ``device``."""
GPU_THROTTLE_REASONS = "gpu_throttle_reasons"
"""NVML's clock-throttle-reasons bit mask of a GPU, label ``device``."""
GPU_PCIE_RX = "gpu_pcie_rx_bytes_per_second"
"""PCIe bytes received by a GPU per second, label ``device``."""
GPU_PCIE_TX = "gpu_pcie_tx_bytes_per_second"
"""PCIe bytes sent by a GPU per second, label ``device``."""
PROCESS_LABEL = "process"
"""Label of ``host_top_process_*`` naming the process."""
PID_LABEL = "pid"
"""Label of ``host_top_process_*`` with the process id."""


class RuleName(enum.StrEnum):
    """The detection rules."""

    DUTY_CYCLE_DROP = "duty-cycle-drop"
    STEP_TIME_REGRESSION = "step-time-regression"
    STRAGGLER = "straggler"
    HANG = "hang"
    INTERRUPTION = "interruption"
    TERMINATION = "termination"
    ACCELERATOR_MEMORY = "accelerator-memory"
    HOST_MEMORY = "host-memory"
    RECOMPILATION = "recompilation"
    INPUT_STALL = "input-stall"
    CHECKPOINT_STALL = "checkpoint-stall"
    NON_FINITE = "non-finite"
    LOSS_SPIKE = "loss-spike"
    CONFIG_DRIFT = "config-drift"


@dataclass(frozen=True)
class Threshold:
    """One tunable number of a rule."""

    default: float
    description: str


@dataclass(frozen=True)
class RuleSpec:
    """A rule as documented: what it opens, what it reads and its thresholds."""

    name: RuleName
    event_type: str
    summary: str
    thresholds: dict[str, Threshold]


def _spec(name: RuleName, event_type: str, summary: str, **thresholds: Threshold) -> RuleSpec:
    return RuleSpec(name, event_type, summary, thresholds)


MATERIALITY: dict[str, Threshold] = {
    "minDurationSteps": Threshold(
        20, "The deviation must last this many typical steps before the event opens..."
    ),
    "minDurationSeconds": Threshold(10.0, "...and at least this many seconds."),
    "minLostSteps": Threshold(
        5, "It must have cost this many typical steps' worth of time before it opens..."
    ),
    "minLostSeconds": Threshold(2.0, "...and at least this many seconds."),
    "resolveSteps": Threshold(
        20,
        "Healthy for this many typical steps before the event resolves (a relapse"
        " sooner stays the same event)...",
    ),
    "resolveSeconds": Threshold(10.0, "...and at least this many seconds."),
}
"""Thresholds every slowdown rule has: an event is worth a person's attention only once it
has lasted and cost enough (scaled to the run's step time); short blips stay in the metrics."""

SLOWDOWN_RULES = (
    RuleName.DUTY_CYCLE_DROP,
    RuleName.STEP_TIME_REGRESSION,
    RuleName.STRAGGLER,
    RuleName.INPUT_STALL,
)
"""The rules whose events are slowdowns (and so have the :data:`MATERIALITY` thresholds)."""


RULES: dict[RuleName, RuleSpec] = {
    spec.name: spec
    for spec in (
        _spec(
            RuleName.DUTY_CYCLE_DROP,
            "PERFORMANCE_DEGRADATION",
            "The run's aggregated accelerator duty cycle (mean over devices and hosts) falls"
            " by `drop` or more against its baseline (median of the first samples after"
            " warm-up) for `windowSamples` samples in a row.",
            drop=Threshold(0.15, "Relative drop that opens the event (0.15 = 15%)."),
            warmupSamples=Threshold(2, "Samples ignored at the start (compilation)."),
            baselineSamples=Threshold(6, "Samples whose median is the baseline."),
            windowSamples=Threshold(3, "Consecutive low samples needed to open or resolve."),
            **MATERIALITY,
        ),
        _spec(
            RuleName.STEP_TIME_REGRESSION,
            "PERFORMANCE_DEGRADATION",
            "Without a duty cycle: the median step time of the last `windowSteps` steps (or"
            " throughput, inverted) exceeds the baseline median + `madFactor`·MAD and by at"
            " least `minIncrease` of the baseline.",
            madFactor=Threshold(3.0, "MADs above the baseline median."),
            minIncrease=Threshold(0.15, "Smallest relative slowdown worth an event."),
            warmupSteps=Threshold(3, "Steps ignored at the start (compilation)."),
            baselineSteps=Threshold(20, "Steps whose median and MAD are the baseline."),
            windowSteps=Threshold(5, "Recent steps compared with the baseline."),
            **MATERIALITY,
        ),
        _spec(
            RuleName.STRAGGLER,
            "STRAGGLER",
            "One host's median step time over the last `windowSteps` steps is `madFactor`·MAD"
            " and at least `minSlowdown` above the median of its peers, for `windows`"
            " consecutive windows.",
            madFactor=Threshold(3.0, "MADs of the peers above their median."),
            minSlowdown=Threshold(0.15, "Smallest relative slowdown worth an event."),
            windowSteps=Threshold(5, "Steps per window."),
            windows=Threshold(3, "Consecutive slow windows needed (as many healthy ones resolve)."),
            **MATERIALITY,
        ),
        _spec(
            RuleName.HANG,
            "HANG",
            "No new step for max(`stepFactor` x typical step, `floorSeconds`) while the run is"
            " active (at least `startupSeconds` until a step time is known); heartbeats say"
            " whether its processes are still alive.",
            stepFactor=Threshold(10.0, "Multiples of the typical (median) step time."),
            floorSeconds=Threshold(300.0, "Shortest timeout, whatever the step time."),
            startupSeconds=Threshold(
                120.0,
                "Shortest timeout while no step time is known yet (before a second step:"
                " the first compilation), whatever the floor.",
            ),
        ),
        _spec(
            RuleName.INTERRUPTION,
            "ORCHESTRATOR_INTERRUPTION",
            "A SIGTERM or preemption notice reached a process, or a host recorded a step it"
            " had recorded before (a restart from a checkpoint).",
        ),
        _spec(
            RuleName.TERMINATION,
            "TERMINATION",
            "The run (or one of its processes) ended abnormally: an exception, a signal, a"
            " non-zero exit, an OOM kill. The classification is in the evidence.",
        ),
        _spec(
            RuleName.ACCELERATOR_MEMORY,
            "ACCELERATOR_MEMORY_PRESSURE",
            "A device's memory in use stays at or above `utilizationPercent` for `samples`"
            " samples.",
            utilizationPercent=Threshold(95.0, "Memory in use (%) that opens the event."),
            samples=Threshold(2, "Consecutive samples needed."),
        ),
        _spec(
            RuleName.HOST_MEMORY,
            "HOST_RESOURCE_EXHAUSTION",
            "A host's memory in use stays at or above `utilizationPercent` for `samples` samples.",
            utilizationPercent=Threshold(90.0, "Host memory in use (%) that opens the event."),
            samples=Threshold(2, "Consecutive samples needed."),
        ),
        _spec(
            RuleName.RECOMPILATION,
            "RECOMPILATION_STORM",
            "More than `maxCompiles` compilations within `windowSeconds` after step `warmupSteps`.",
            maxCompiles=Threshold(3, "Compilations tolerated per window after warm-up."),
            windowSeconds=Threshold(600.0, "Sliding window."),
            warmupSteps=Threshold(5, "Compilations up to this step are warm-up."),
        ),
        _spec(
            RuleName.INPUT_STALL,
            "INPUT_STALL",
            "Data wait is more than `waitFraction` of the step time, in median over the last"
            " `windowSteps` steps.",
            waitFraction=Threshold(0.15, "Share of the step spent waiting for input."),
            windowSteps=Threshold(5, "Steps in the window."),
            **MATERIALITY,
        ),
        _spec(
            RuleName.CHECKPOINT_STALL,
            "CHECKPOINT_STALL",
            "A checkpoint blocked training for more than `blockingFraction` of the time since"
            " the previous one.",
            blockingFraction=Threshold(0.05, "Share of the checkpoint interval spent blocked."),
            minSeconds=Threshold(1.0, "Blocking shorter than this never counts."),
        ),
        _spec(
            RuleName.NON_FINITE,
            "NUMERICAL_INSTABILITY",
            "Any metric becomes NaN or ±Inf.",
        ),
        _spec(
            RuleName.LOSS_SPIKE,
            "NUMERICAL_INSTABILITY",
            "A loss (`loss` or `*_loss`) exceeds `factor` x its running median, or its robust"
            " z-score over the last `windowSteps` steps exceeds `zScore`. It resolves after 10"
            " values in a row within bounds; a loss that spikes again sooner is the same event.",
            factor=Threshold(10.0, "Multiples of the running median (Megatron's check)."),
            zScore=Threshold(8.0, "Robust z-score: (value - median) / (1.4826·MAD)."),
            windowSteps=Threshold(50, "Steps of the running window."),
            warmupSteps=Threshold(10, "Steps before spikes are judged."),
        ),
        _spec(
            RuleName.CONFIG_DRIFT,
            "CONFIG_DRIFT",
            "Hosts of one run report different environment fingerprints (framework versions,"
            " XLA flags, packages, git commit) in their heartbeats.",
        ),
    )
}
"""Every rule with its documented defaults (docs/monitoring.md is generated from this)."""


class RuleOverride(Contract):
    """Changes to one rule: switch it off or on, and thresholds by name."""

    enabled: bool | None = Field(default=None, description="False switches the rule off.")
    thresholds: dict[str, float] = Field(
        default_factory=dict, description="Threshold name → value (see docs/monitoring.md)."
    )


class MonitoringRules(Contract):
    """Overrides of the detection rules, by rule name; rules not named keep their defaults."""

    rules: dict[RuleName, RuleOverride] = Field(
        default_factory=dict, description="Rule name → override."
    )


def unknown_thresholds(rules: MonitoringRules) -> list[str]:
    """``rule.threshold`` names an override sets that the rule does not have."""
    return [
        f"{name}.{threshold}"
        for name, override in rules.rules.items()
        for threshold in override.thresholds
        if threshold not in RULES[name].thresholds
    ]


class ProjectMonitoringRules(Contract):
    """A project's overrides (``GET|PATCH /v1/projects/{p}/locations/{l}/monitoringRules``)."""

    name: str = Field(
        default="", description="`projects/{p}/locations/{l}/monitoringRules` (output-only)."
    )
    rules: dict[RuleName, RuleOverride] = Field(
        default_factory=dict, description="Rule name → override."
    )


class MonitoringRulesChanged(Envelope):
    """A project's or a run's rule overrides changed.

    Subject: ``runs.monitoring.changed.<project>`` for a project, with ``run_id`` empty; a
    run's overrides travel on its own run messages (``Run.monitoring``).
    """

    type: Literal["runs.monitoring.changed"] = "runs.monitoring.changed"
    project: ProjectId = Field(description="The project.")
    location: LocationId = Field(description="The location.")
    rules: MonitoringRules = Field(description="The project's overrides after the change.")

    def partition(self) -> str:
        """The project: the last subject token."""
        return self.project
