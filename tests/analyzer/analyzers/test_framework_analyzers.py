"""Framework analyzers: recompiles, input, checkpoints, configs, fingerprints, stuck
collectives, accelerator memory and how a process ended."""

from datetime import timedelta

from analyzer.analyzer_contexts import (
    NOW,
    context,
    degradation,
    detected,
    event,
    hang,
    hosts,
    run,
    straggler,
    termination,
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
from mldiag_schemas.analyses import Layer
from mldiag_schemas.events import EventType, Evidence


def test_recompiles_at_the_onset_of_a_degradation() -> None:
    report = run(recompilation, *degradation(compile_steps=[400, 981, 990], compile_seconds=42.0))
    assert detected(report)
    assert report.layer is Layer.FRAMEWORK
    assert report.score == 0.6
    assert "recompiled 2 time(s) at the onset (step 980)" in report.details
    assert report.evidence == ["compiled at steps 981, 990", "42 s spent compiling so far"]


def test_compiles_long_before_the_onset_do_not_count() -> None:
    report = run(recompilation, *degradation(compile_steps=[400]))
    assert not detected(report)
    assert (
        report.details
        == "No compilation after warm-up near step 980 (the last one was at step 400)."
    )


def test_storm_patterns() -> None:
    storm = event(EventType.RECOMPILATION_STORM, "recompilation")
    every_step = run(recompilation, storm, context(compile_steps=[100, 101, 102, 103]))
    assert "on every step" in every_step.details
    periodic = run(recompilation, storm, context(compile_steps=[100, 200, 300, 400]))
    assert "every 100 steps" in periodic.details
    assert periodic.score == 0.75
    irregular = run(recompilation, storm, context(compile_steps=[100, 137, 301]))
    assert "irregular" in irregular.details


def test_input_stall_on_idle_cpus_points_at_storage_or_prefetch() -> None:
    stall = event(EventType.INPUT_STALL, "input-stall", ["host-0", "host-1"])
    ctx = context(hosts(host_0={"data_wait_fraction": 0.35}, host_1={"data_wait_fraction": 0.3}))
    report = run(input_pipeline, stall, ctx)
    assert detected(report)
    assert report.hosts == ["host-0", "host-1"]
    assert report.score == 0.65
    assert "waits on storage or the prefetch buffer is too small" in report.details
    assert "host-0: data wait 35% of the step, CPU 38%" in report.evidence


def test_a_straggler_waiting_for_input() -> None:
    report = run(input_pipeline, *straggler(data_wait_fraction=0.4))
    assert detected(report)
    assert report.hosts == ["host-2"]
    assert report.score == 0.7
    assert "only the slow hosts wait" in report.details


def test_input_stall_not_detected_and_not_measured() -> None:
    quiet = run(input_pipeline, *degradation())
    assert not detected(quiet)
    assert quiet.details.startswith("Data wait stayed at or below 2% of the step on every host")
    unmeasured = run(
        input_pipeline,
        *degradation(
            hosts(2, host_0={"data_wait_fraction": None}, host_1={"data_wait_fraction": None})
        ),
    )
    assert "No host reported data wait time" in unmeasured.details


def test_checkpoint_blocking() -> None:
    report = run(checkpoint_blocking, *degradation(checkpoint_fraction=0.12))
    assert detected(report)
    assert "blocked training for 12% of their interval (threshold 5%)" in report.details
    assert "the slow steps are save steps" in report.details
    quiet = run(checkpoint_blocking, *degradation(checkpoint_fraction=0.01))
    assert not detected(quiet)
    assert "1% of its interval" in quiet.details


def test_config_change_that_sizes_device_memory() -> None:
    pressure = event(EventType.ACCELERATOR_MEMORY_PRESSURE, "accelerator-memory", ["host-0"])
    report = run(config_change, pressure, context(config_changes=["userConfigs.batch_size"]))
    assert detected(report)
    assert report.score == 0.75
    assert report.evidence == ["changed: userConfigs.batch_size"]
    assert not detected(run(config_change, pressure, context()))


def test_fingerprint_mismatch_names_the_odd_host() -> None:
    drift = event(EventType.CONFIG_DRIFT, "config-drift")
    ctx = context(
        hosts(
            host_1={
                "fingerprint": {
                    "jax": "0.4.30",
                    "jaxlib": "0.4.35",
                    "xla_flags": "a1b2c3",
                    "git": "9f8e7d",
                }
            }
        )
    )
    report = run(fingerprint_mismatch, drift, ctx)
    assert detected(report)
    assert report.hosts == ["host-1"]
    assert report.score == 0.85
    assert report.evidence == ["jax: 0.4.35 on 3 host(s); 0.4.30 on host-1"]
    same = run(fingerprint_mismatch, drift, context())
    assert not detected(same)
    assert same.details == "All 4 hosts report the same environment fingerprint (4 entries)."


def test_hang_with_one_host_behind_names_it() -> None:
    report = run(hang_localization, *hang(host_1={"last_step": 999}))
    assert detected(report)
    assert report.hosts == ["host-1"]
    assert report.score == 0.8
    assert report.details.startswith(
        "host-1 stopped first, at step 999, while 3 of 4 hosts reached step 1000"
    )
    assert "stuck, not dead" in report.details


def test_hang_with_every_host_at_the_same_step() -> None:
    report = run(
        hang_localization,
        *hang(host_3={"last_progress_time": NOW - timedelta(minutes=11)}),
    )
    assert detected(report)
    assert len(report.hosts) == 4
    assert "All 4 hosts stopped at step 1000 together" in report.details
    assert "host-3 made its last progress first" in report.details


def test_no_live_process_is_not_a_stuck_collective() -> None:
    gone = {f"host_{i}": {"last_heartbeat_time": NOW - timedelta(minutes=5)} for i in range(4)}
    assert not detected(run(hang_localization, *hang(**gone)))


def test_accelerator_memory_pressure_on_one_host() -> None:
    pressure = event(EventType.ACCELERATOR_MEMORY_PRESSURE, "accelerator-memory", ["host-2"])
    report = run(
        accelerator_memory_pressure,
        pressure,
        context(hosts(host_2={"accelerator_memory_utilization": 98.5})),
    )
    assert detected(report)
    assert report.hosts == ["host-2"]
    assert "uneven sharding" in report.details
    quiet = run(accelerator_memory_pressure, pressure, context())
    assert "at or below 72% on every host" in quiet.details


def test_accelerator_oom_from_the_error_text() -> None:
    report = run(
        accelerator_oom,
        *termination(
            classification="user_exception",
            errorType="XlaRuntimeError",
            message="RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2.1G",
        ),
    )
    assert detected(report)
    assert report.score == 0.9
    assert report.evidence[0] == "error: RESOURCE_EXHAUSTED"


def test_workload_exception_and_exit_status() -> None:
    raised = run(
        workload_exception,
        *termination(
            classification="user_exception",
            errorType="KeyError",
            message="Traceback (most recent call last):\n...\nKeyError: 'labels'",
        ),
    )
    assert detected(raised)
    assert raised.details == "The workload raised KeyError on host-1: KeyError: 'labels'."
    assert not detected(run(workload_exception, *termination(classification="oom_host")))
    exited = run(exit_status, *termination(classification="exit_code", exitCode=3))
    assert detected(exited)
    assert "exited with status 3" in exited.details
    assert not detected(run(exit_status, *termination(classification="killed", exitCode=137)))


def test_facts_are_read_only_where_they_are_typed() -> None:
    odd = event(EventType.TERMINATION, "termination", ["h"], Evidence(facts={"exitCode": "3"}))
    assert not detected(run(exit_status, odd, None))


def test_config_changes_after_the_onset_do_not_count() -> None:
    later = ["2026-01-01T11:59:50+00:00 user_configs reported at step 995"]
    report = run(config_change, *degradation(config_changes=later))
    assert not detected(report)
    assert "only after the onset (step 980)" in report.details


def test_a_config_change_just_before_the_onset_scores_higher() -> None:
    just = ["2026-01-01T11:59:00+00:00 user_configs reported at step 978"]
    long_ago = ["2026-01-01T10:00:00+00:00 configs updated at step 100"]
    close = run(config_change, *degradation(config_changes=just))
    far = run(config_change, *degradation(config_changes=long_ago))
    assert detected(close)
    assert detected(far)
    assert "2 step(s) before the onset" in close.details
    assert close.score > far.score


def test_checkpoint_stall_reads_the_rules_facts() -> None:
    stall = event(
        EventType.CHECKPOINT_STALL,
        "checkpoint-stall",
        ["host-0"],
        Evidence(
            metric="checkpoint_time",
            first_bad_value=12.0,
            facts={"blockingFraction": 0.1, "intervalSeconds": 120.0},
        ),
    )
    report = run(checkpoint_blocking, stall, context())
    assert detected(report)
    assert "saves come every 120 s, which is often" in report.details
    assert "blocked 12 s of the 120 s since the last" in report.evidence


def test_a_single_host_hang_is_a_stuck_step() -> None:
    stopped, ctx = hang()
    one = ctx.model_copy(update={"hosts": ctx.hosts[:1]})
    report = run(hang_localization, stopped.model_copy(update={"hosts": ["host-0"]}), one)
    assert detected(report)
    assert report.details.startswith(
        "host-0 stopped at step 1000 and the processes still heart-beat: it is stuck inside a step"
    )
