"""Which analyzers run for each event type: every cause worth checking, across the layers."""

from mldiag_analyzer.analyzers.common import Analyzer
from mldiag_analyzer.analyzers.contention import (
    accelerator_errors,
    cpu_steal,
    host_cpu_contention,
    host_swapping,
    io_contention,
)
from mldiag_analyzer.analyzers.framework import (
    accelerator_memory_pressure,
    accelerator_oom,
    checkpoint_blocking,
    config_change,
    exit_status,
    fingerprint_mismatch,
    hang_localization,
    input_pipeline,
    recompilation,
    workload_exception,
)
from mldiag_analyzer.analyzers.infrastructure import (
    dead_process,
    hardware_error,
    host_cpu_saturation,
    host_memory_pressure,
    host_oom_kill,
    storage_throughput,
    straggler_localization,
    thermal_throttling,
)
from mldiag_analyzer.analyzers.logs import collective_timeout
from mldiag_analyzer.analyzers.model import (
    gradient_explosion,
    learning_rate_change,
    numerical_instability,
    precision_overflow,
    single_host_numerics,
)
from mldiag_analyzer.analyzers.orchestrator import killed_by_signal, preemption, restart
from mldiag_analyzer.errors import NoAnalyzerForEvent
from mldiag_schemas.events import EventType

ANALYZERS: dict[EventType, tuple[Analyzer, ...]] = {
    EventType.PERFORMANCE_DEGRADATION: (
        host_cpu_contention,
        straggler_localization,
        thermal_throttling,
        accelerator_errors,
        cpu_steal,
        io_contention,
        host_swapping,
        host_cpu_saturation,
        host_memory_pressure,
        recompilation,
        input_pipeline,
        checkpoint_blocking,
        config_change,
        fingerprint_mismatch,
        restart,
        preemption,
        collective_timeout,
    ),
    EventType.STRAGGLER: (
        host_cpu_contention,
        thermal_throttling,
        accelerator_errors,
        cpu_steal,
        io_contention,
        host_swapping,
        host_cpu_saturation,
        host_memory_pressure,
        input_pipeline,
        fingerprint_mismatch,
        checkpoint_blocking,
        restart,
        straggler_localization,
    ),
    EventType.HANG: (
        dead_process,
        host_oom_kill,
        accelerator_oom,
        workload_exception,
        collective_timeout,
        accelerator_errors,
        hang_localization,
        preemption,
        fingerprint_mismatch,
        input_pipeline,
        checkpoint_blocking,
        recompilation,
        host_memory_pressure,
        host_swapping,
        io_contention,
    ),
    EventType.ORCHESTRATOR_INTERRUPTION: (
        preemption,
        restart,
        host_oom_kill,
        accelerator_oom,
        workload_exception,
        collective_timeout,
        dead_process,
        host_memory_pressure,
        thermal_throttling,
    ),
    EventType.TERMINATION: (
        host_oom_kill,
        accelerator_oom,
        hardware_error,
        accelerator_errors,
        collective_timeout,
        workload_exception,
        killed_by_signal,
        exit_status,
        preemption,
    ),
    EventType.ACCELERATOR_MEMORY_PRESSURE: (
        accelerator_memory_pressure,
        config_change,
        recompilation,
        fingerprint_mismatch,
    ),
    EventType.HOST_RESOURCE_EXHAUSTION: (
        host_swapping,
        host_cpu_contention,
        host_memory_pressure,
        host_cpu_saturation,
        input_pipeline,
        checkpoint_blocking,
        config_change,
    ),
    EventType.RECOMPILATION_STORM: (recompilation, restart, config_change),
    EventType.INPUT_STALL: (
        input_pipeline,
        host_cpu_contention,
        host_cpu_saturation,
        io_contention,
        storage_throughput,
        host_memory_pressure,
        checkpoint_blocking,
        config_change,
    ),
    EventType.CHECKPOINT_STALL: (
        checkpoint_blocking,
        io_contention,
        storage_throughput,
        host_memory_pressure,
        host_cpu_saturation,
        config_change,
    ),
    EventType.NUMERICAL_INSTABILITY: (
        numerical_instability,
        learning_rate_change,
        gradient_explosion,
        precision_overflow,
        single_host_numerics,
        config_change,
    ),
    EventType.CONFIG_DRIFT: (fingerprint_mismatch, config_change, restart, straggler_localization),
}
"""Every analyzer relevant to each event type (the order only breaks ties in ranking)."""


def analyzers_for(event_type: str) -> tuple[Analyzer, ...]:
    """The analyzers of an event type; a type this analyzer does not know is refused."""
    try:
        return ANALYZERS[EventType(event_type)]
    except (KeyError, ValueError):
        raise NoAnalyzerForEvent(f"no analyzer for events of type {event_type}") from None
