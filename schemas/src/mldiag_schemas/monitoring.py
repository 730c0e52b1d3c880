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
        ),
        _spec(
            RuleName.HANG,
            "HANG",
            "No new step for max(`stepFactor` x typical step, `floorSeconds`) while the run is"
            " active; heartbeats say whether its processes are still alive.",
            stepFactor=Threshold(10.0, "Multiples of the typical (median) step time."),
            floorSeconds=Threshold(300.0, "Shortest timeout, whatever the step time."),
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
            " z-score over the last `windowSteps` steps exceeds `zScore`.",
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
