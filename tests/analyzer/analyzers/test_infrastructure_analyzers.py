"""Infrastructure analyzers: throttling, host CPU and memory, slow hosts, dead processes,
storage, OOM kills and hardware faults, each found or ruled out with its numbers."""

from datetime import timedelta

from analyzer.analyzer_contexts import (
    NOW,
    context,
    degradation,
    detected,
    event,
    hang,
    host,
    hosts,
    run,
    straggler,
    termination,
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
from mldiag_schemas.analyses import Layer
from mldiag_schemas.events import EventType


def test_throttling_on_the_slow_host_explains_a_straggler() -> None:
    report = run(thermal_throttling, *straggler(throttled=True, clock_drop_mhz=120.0))
    assert detected(report)
    assert report.layer is Layer.INFRASTRUCTURE
    assert report.hosts == ["host-2"]
    assert report.score >= 0.85
    assert "host-2 also stands out as slow" in report.details
    assert (
        "host-2: GPU clocks held down (throttle reason reported), SM clock 120 MHz below its"
        " baseline" in report.evidence
    )
    assert report.recommended_actions[0].documentation_url == "docs/runbooks/thermal-throttling.md"


def test_throttling_on_a_fast_host_is_a_weaker_cause() -> None:
    slowed, ctx = straggler()
    ctx = context(hosts(host_0={"clock_drop_mhz": 40.0}, host_2={"step_time": 1.6}))
    report = run(thermal_throttling, slowed, ctx)
    assert detected(report)
    assert report.hosts == ["host-0"]
    assert report.score < 0.6


def test_throttling_everywhere_points_at_cooling() -> None:
    all_hot = {f"host_{i}": {"temperature_celsius": 91.0} for i in range(4)}
    report = run(thermal_throttling, *degradation(hosts(**all_hot)))
    assert detected(report)
    assert "cooling or power capping" in report.details
    assert len(report.hosts) == 4


def test_no_throttling_says_what_was_checked() -> None:
    report = run(thermal_throttling, *degradation())
    assert not detected(report)
    assert report.score == 0.0
    assert report.details == (
        "No GPU reported throttling on 4 of 4 hosts; SM clocks stayed within 0 MHz of baseline;"
        " temperatures stayed at or below 64 °C."
    )


def test_throttling_without_readings_or_context() -> None:
    bare = [
        host(f"h{i}", throttled=None, clock_drop_mhz=None, temperature_celsius=None)
        for i in range(2)
    ]
    slowed, _ = degradation()
    assert "could not be checked" in run(thermal_throttling, slowed, context(bare)).details
    assert "No run context" in run(thermal_throttling, slowed, None).details


def test_cpu_saturation_with_data_wait_is_an_input_bound_pipeline() -> None:
    stall = event(EventType.INPUT_STALL, "input-stall", ["host-1"])
    ctx = context(hosts(host_1={"host_cpu_utilization": 99.0, "data_wait_fraction": 0.4}))
    report = run(host_cpu_saturation, stall, ctx)
    assert detected(report)
    assert report.hosts == ["host-1"]
    assert report.score == 0.8
    assert "host-1: CPU 99%" in report.evidence
    assert "host-1: data wait 40% of the step" in report.evidence


def test_cpu_below_saturation() -> None:
    report = run(host_cpu_saturation, *degradation(hosts(host_0={"host_cpu_utilization": 41.0})))
    assert not detected(report)
    assert report.details.startswith("Host CPU stayed at or below 41% on every host")


def test_host_memory_uses_the_rule_threshold_of_the_run() -> None:
    full = event(
        EventType.HOST_RESOURCE_EXHAUSTION,
        "host-memory",
        ["host-0"],
        thresholds={"utilizationPercent": 80.0},
    )
    report = run(
        host_memory_pressure, full, context(hosts(host_0={"host_memory_utilization": 85.0}))
    )
    assert detected(report)
    assert report.hosts == ["host-0"]
    assert "only some hosts" in report.details
    quiet = run(host_memory_pressure, *degradation())
    assert not detected(quiet)
    assert "at or below 55%" in quiet.details
    assert "limit is 90%" in quiet.details


def test_slow_host_localises_one_outlier() -> None:
    report = run(straggler_localization, *degradation(hosts(host_3={"step_time": 1.5})))
    assert detected(report)
    assert report.hosts == ["host-3"]
    assert report.score == 0.7
    assert report.evidence[0] == (
        "host-3: step 1.5 s, 50% slower than the median of its peers (1 s)"
    )


def test_slow_host_says_when_every_host_slowed_together() -> None:
    slow = {f"host_{i}": {"step_time": 1.4 + i / 100} for i in range(4)}
    report = run(straggler_localization, *degradation(hosts(**slow)))
    assert not detected(report)
    assert "All 4 hosts slowed down together" in report.details
    assert "shared" in report.details


def test_slow_host_needs_peers() -> None:
    report = run(straggler_localization, *degradation([host("only")]))
    assert not detected(report)
    assert "Only one host" in report.details


def test_a_host_that_stopped_heart_beating_is_named() -> None:
    stopped, ctx = hang(host_2={"last_heartbeat_time": NOW - timedelta(minutes=9)})
    report = run(dead_process, stopped, ctx)
    assert detected(report)
    assert report.hosts == ["host-2"]
    assert report.score == 0.9
    assert report.details.startswith("host-2 stopped heart-beating (1 of 4 hosts)")
    assert report.evidence == [
        "host-2: last heartbeat at 11:51:00 UTC, 540 s before the event (interval 10 s)"
    ]


def test_every_host_silent_means_the_job_is_gone() -> None:
    gone = {f"host_{i}": {"last_heartbeat_time": NOW - timedelta(minutes=5 + i)} for i in range(4)}
    report = run(dead_process, *hang(**gone))
    assert detected(report)
    assert report.score == 0.7
    assert "Every host stopped heart-beating, host-3 first" in report.details


def test_all_heart_beating_rules_out_a_dead_process() -> None:
    report = run(dead_process, *hang())
    assert not detected(report)
    assert "Every host (4) was still heart-beating" in report.details


def test_storage_is_slow_when_checkpoints_and_input_are_both_slow() -> None:
    stall = event(EventType.CHECKPOINT_STALL, "checkpoint-stall")
    slow = context(hosts(host_0={"data_wait_fraction": 0.3}), checkpoint_fraction=0.2)
    report = run(storage_throughput, stall, slow)
    assert detected(report)
    assert report.hosts == ["host-0"]
    fine = run(storage_throughput, stall, context(checkpoint_fraction=0.2))
    assert not detected(fine)
    assert "0 host(s) waiting for input beyond 15%" in fine.details


def test_host_oom_kill_from_the_classification_and_from_corroboration() -> None:
    classified = run(host_oom_kill, *termination(classification="oom_host", signal="SIGKILL"))
    assert detected(classified)
    assert classified.score == 0.95
    assert classified.hosts == ["host-1"]
    ended, _ = termination(classification="killed", signal="SIGKILL", exitCode=137)
    full = context(hosts(host_1={"host_memory_utilization": 97.0}), run_phase="FAILED")
    corroborated = run(host_oom_kill, ended, full)
    assert detected(corroborated)
    assert corroborated.score == 0.75
    assert "host-1: memory 97% in use" in corroborated.evidence
    not_oom = run(
        host_oom_kill, *termination(classification="user_exception", errorType="KeyError")
    )
    assert not detected(not_oom)


def test_hardware_error_from_an_xid_in_the_message() -> None:
    report = run(
        hardware_error,
        *termination(
            classification="exit_code",
            exitCode=1,
            message="NVRM: Xid 79: GPU has fallen off the bus",
        ),
    )
    assert detected(report)
    assert report.hosts == ["host-1"]
    assert any("Xid" in line for line in report.evidence)
    assert not detected(
        run(hardware_error, *termination(classification="killed", signal="SIGTERM"))
    )
