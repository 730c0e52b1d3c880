"""Contention analyzers: a neighbour's CPU, saturated disks, swapping, CPU steal and GPU
faults, each found from a realistic host's sampled contention or ruled out with its numbers,
and placed against the hosts the event singles out."""

import pytest

from analyzer.analyzer_contexts import (
    NOW,
    RUNBOOKS,
    context,
    degradation,
    detected,
    event,
    hang,
    host,
    hosts,
    neighbour,
    quiet,
    report_of,
    run,
    straggler,
    termination,
)
from mldiag_analyzer.analyzers import Analyzer
from mldiag_analyzer.analyzers.contention import (
    accelerator_errors,
    cpu_steal,
    host_cpu_contention,
    host_swapping,
    io_contention,
)
from mldiag_analyzer.analyzers.infrastructure import host_cpu_saturation
from mldiag_analyzer.service import analyze
from mldiag_schemas.analyses import DetectionState, Layer
from mldiag_schemas.events import EventType, ProcessShare

CONTENTION = (host_cpu_contention, io_contention, host_swapping, cpu_steal, accelerator_errors)
GIB = 2**30
MIB = 2**20


def _everywhere(**fields: object) -> dict[str, dict[str, object]]:
    return {f"host_{i}": dict(fields) for i in range(4)}


def test_a_neighbour_taking_the_cpu_is_named_with_its_share() -> None:
    report = run(host_cpu_contention, *degradation(hosts(**_everywhere(contention=neighbour()))))
    assert detected(report)
    assert report.layer is Layer.INFRASTRUCTURE
    assert report.score == 0.9  # the run lost share and tasks queue for cores
    assert report.hosts == ["host-0", "host-1", "host-2", "host-3"]
    assert report.details.startswith(
        "Other processes take the CPU the run needs on host-0, host-1, host-2 and host-3"
        " (4 of 4 hosts): 40% of the host's CPU on host-0 against 3% before it began,"
        " while the run's own share was 28% (baseline 45%); the top ones: python stress.py"
        " (pid 4242) 37% of the host's CPU, gzip (pid 5150) 2.5% of the host's CPU"
    )
    assert "host-0: the run's own processes 28% of the host's CPU, 45% in its baseline" in (
        report.evidence
    )
    assert "host-0: load 1.60 per CPU" in report.evidence
    assert report.recommended_actions[0].documentation_url == "docs/runbooks/host-contention.md"


def test_shares_are_said_in_cores_too_where_the_host_sampled_its_count() -> None:
    counted = neighbour().model_copy(update={"cpu_count": 16})
    report = run(host_cpu_contention, *degradation(hosts(1, host_0={"contention": counted})))
    assert "40% of the host's CPU (6.4 of 16 cores) on host-0" in report.details
    assert "python stress.py (pid 4242) 37% of the host's CPU (5.9 of 16 cores)" in (report.details)
    assert "host-0: other processes 40% of the host's CPU (6.4 of 16 cores)" in report.evidence[0]


def test_contention_ranks_first_in_a_degradation_over_saturation_and_framework_causes() -> None:
    # host-0's own run saturates its CPU while waiting for data, and XLA recompiled at the
    # onset: real causes that rank below a neighbour starving every host
    snapshots = hosts(
        host_0={"host_cpu_utilization": 97.0, "data_wait_fraction": 0.3},
        **{f"host_{i}": {"contention": neighbour(), "data_wait_fraction": 0.3} for i in (1, 2, 3)},
    )
    analysis = analyze(*degradation(snapshots, compile_steps=[985, 990]), RUNBOOKS, NOW)
    assert analysis.probable_cause == "host-cpu-contention"
    assert detected(report_of(analysis, "host-cpu-saturation"))
    assert detected(report_of(analysis, "input-pipeline"))
    assert detected(report_of(analysis, "recompilation"))
    top = analysis.reports[0]
    assert top.score > max(r.score for r in analysis.reports[1:])
    assert "python stress.py (pid 4242)" in top.details


def test_saturation_by_others_is_contention_not_saturation() -> None:
    busy = hosts(**_everywhere(host_cpu_utilization=98.0, contention=neighbour()))
    analysis = analyze(*degradation(busy), RUNBOOKS, NOW)
    saturation = report_of(analysis, "host-cpu-saturation")
    assert saturation.detection_state is DetectionState.NOT_DETECTED
    assert "mostly by other processes, not the run's own: see host-cpu-contention" in (
        saturation.details
    )
    assert analysis.probable_cause == "host-cpu-contention"


def test_the_run_saturating_its_own_cpu_is_saturation_not_contention() -> None:
    own = quiet(run_cpu_percent=92.0, run_cpu_baseline_percent=90.0, load_per_cpu=1.2)
    slowed, ctx = degradation(hosts(**_everywhere(host_cpu_utilization=96.0, contention=own)))
    assert not detected(run(host_cpu_contention, slowed, ctx))
    saturation = run(host_cpu_saturation, slowed, ctx)
    assert detected(saturation)
    assert "host-0: the run's own processes 92% of the host's CPU" in saturation.evidence


def test_busy_neighbours_with_cores_to_spare_are_not_contention() -> None:
    # others rose 27 points, but the run kept its share, the host has room and no task waits
    roomy = quiet(other_cpu_percent=30.0, load_per_cpu=0.8)
    report = run(host_cpu_contention, *degradation(hosts(**_everywhere(contention=roomy))))
    assert not detected(report)
    assert report.details.startswith(
        "Other processes took at most 30% of the host's CPU (on host-0), no more than before"
        " or with cores to spare (4 host(s) sampled;"
    )


def test_neighbours_as_busy_as_in_the_baseline_did_not_cause_a_slowdown() -> None:
    steady = quiet(other_cpu_percent=60.0, other_cpu_baseline_percent=58.0, load_per_cpu=1.4)
    report = run(host_cpu_contention, *degradation(hosts(**_everywhere(contention=steady))))
    assert not detected(report)
    # ...unless the run lost share to them
    starved = quiet(
        other_cpu_percent=60.0,
        other_cpu_baseline_percent=58.0,
        run_cpu_percent=30.0,
        load_per_cpu=1.4,
    )
    report = run(host_cpu_contention, *degradation(hosts(**_everywhere(contention=starved))))
    assert detected(report)
    assert report.score == 0.9


def test_a_run_that_hardly_uses_the_cpu_is_not_starved_of_it() -> None:
    # A straggler whose steps sleep on its peers: 2% of a 2-core host (0.04 of a core) in
    # its baseline, 0% now, while busy neighbours took less than before.
    idle = quiet(
        cpu_count=2,
        run_cpu_percent=0.0,
        run_cpu_baseline_percent=2.0,
        other_cpu_percent=61.0,
        other_cpu_baseline_percent=98.0,
        load_per_cpu=2.5,
    )
    report = run(host_cpu_contention, *straggler(contention=idle))
    assert not detected(report)
    # the same fall from a run that used a core is starvation, when the neighbours held on
    busy = quiet(
        cpu_count=2,
        run_cpu_percent=20.0,
        run_cpu_baseline_percent=50.0,
        other_cpu_percent=61.0,
        other_cpu_baseline_percent=58.0,
        load_per_cpu=2.5,
    )
    assert detected(run(host_cpu_contention, *straggler(contention=busy)))


def test_neighbours_that_take_less_than_before_did_not_slow_the_run() -> None:
    fewer = quiet(
        run_cpu_percent=20.0,
        run_cpu_baseline_percent=50.0,
        other_cpu_percent=61.0,
        other_cpu_baseline_percent=90.0,
        load_per_cpu=1.5,
    )
    report = run(host_cpu_contention, *degradation(hosts(**_everywhere(contention=fewer))))
    assert not detected(report)


def test_without_a_baseline_a_busy_host_full_of_others_is_contention() -> None:
    unknown = quiet(
        other_cpu_percent=55.0,
        other_cpu_baseline_percent=None,
        run_cpu_baseline_percent=None,
        load_per_cpu=1.2,
    )
    report = run(host_cpu_contention, *degradation(hosts(**_everywhere(contention=unknown))))
    assert detected(report)
    assert report.score == 0.82


def test_a_quiet_host_rules_every_contention_cause_out() -> None:
    slowed, ctx = degradation(hosts(**_everywhere(contention=quiet())))
    for check in CONTENTION:
        report = run(check, slowed, ctx)
        assert not detected(report), check.name
        assert report.score == 0.0
        assert report.details
    analysis = analyze(slowed, ctx, RUNBOOKS, NOW)
    assert not analysis.analyzer_insight_found


@pytest.mark.parametrize("check", CONTENTION, ids=lambda a: a.name)
def test_without_samples_or_context_they_say_so(check: Analyzer) -> None:
    slowed, ctx = degradation()
    unsampled = run(check, slowed, ctx)
    assert not detected(unsampled)
    assert unsampled.details.startswith("No host sampled")
    no_context = run(check, slowed, None)
    assert no_context.details.startswith("No run context came with the event")


def test_contention_only_on_the_straggler_explains_it() -> None:
    slow, ctx = straggler(contention=neighbour())
    report = run(host_cpu_contention, slow, ctx)
    assert detected(report)
    assert report.hosts == ["host-2"]
    assert report.score == pytest.approx(0.95)
    assert "host-2 also stand out as slow" in report.details
    analysis = analyze(slow, ctx, RUNBOOKS, NOW)
    assert analysis.probable_cause == "host-cpu-contention"


def test_contention_healthy_hosts_share_does_not_explain_a_straggler() -> None:
    slow, _ = straggler()
    snapshots = hosts(
        **{
            **_everywhere(contention=neighbour()),
            "host_2": {"contention": neighbour(), "step_time": 1.6},
        }
    )
    report = run(host_cpu_contention, slow, context(snapshots))
    assert detected(report)
    assert report.score == 0.35
    assert "healthy hosts show it too" in report.details


def test_saturated_disks_with_others_traffic() -> None:
    busy_disk = quiet(
        cpu_iowait_percent=34.0,
        disk_busy_percent=97.0,
        disk_read_bytes_per_second=300 * MIB,
        disk_write_bytes_per_second=60 * MIB,
        disk_bytes_per_second_baseline=22 * MIB,
        top_processes=[ProcessShare(name="rsync", pid=777, cpu_percent=6.0)],
    )
    report = run(io_contention, *degradation(hosts(host_1={"contention": busy_disk})))
    assert detected(report)
    assert report.hosts == ["host-1"]
    assert report.score == 0.78
    assert "traffic on host-1 is 2x or more the run's baseline" in report.details
    assert report.evidence == [
        "host-1: CPU waiting on I/O 34%",
        "host-1: busiest disk busy 97%",
        "host-1: disk reads 300.0 MiB/s, writes 60.0 MiB/s (16.4x the baseline 22.0 MiB/s)",
        "host-1: top other processes: rsync (pid 777) 6.0% of the host's CPU",
    ]


def test_a_busy_disk_while_checkpoints_block_may_be_the_runs_own_saves() -> None:
    writing = quiet(disk_busy_percent=99.0, disk_write_bytes_per_second=400 * MIB)
    slowed, ctx = degradation(hosts(**_everywhere(contention=writing)), checkpoint_fraction=0.4)
    report = run(io_contention, slowed, ctx)
    assert detected(report)
    assert report.score == 0.45
    assert "the traffic may be the run's own saves" in report.details
    analysis = analyze(slowed, ctx, RUNBOOKS, NOW)
    assert analysis.probable_cause == "checkpoint-blocking"
    stalled = event(EventType.CHECKPOINT_STALL, "checkpoint-stall")
    analysis = analyze(stalled, ctx, RUNBOOKS, NOW)
    assert analysis.probable_cause == "checkpoint-blocking"


def test_a_busy_disk_in_a_hang_is_a_weaker_cause() -> None:
    waiting = quiet(cpu_iowait_percent=45.0)
    stuck, ctx = hang(**_everywhere(contention=waiting))
    report = run(io_contention, stuck, ctx)
    assert detected(report)
    assert report.score == pytest.approx(0.48)


def test_swapping_from_the_runs_own_growth() -> None:
    grown = quiet(
        swap_io_bytes_per_second=40 * MIB,
        swap_used_percent=60.0,
        run_memory_rss_bytes=30 * GIB,
        run_memory_rss_baseline_bytes=12 * GIB,
    )
    report = run(
        host_swapping,
        *degradation(hosts(host_3={"contention": grown, "host_memory_utilization": 97.0})),
    )
    assert detected(report)
    assert report.hosts == ["host-3"]
    assert report.score == 0.8
    assert "verdict: own-growth: the run's own memory grew on host-3" in report.details
    assert "host-3: the run's resident memory 30.0 GiB, 2.50x its baseline 12.0 GiB" in (
        report.evidence
    )
    assert report.recommended_actions[0].description.startswith("Find what grows in the run")


def test_swapping_from_a_noisy_neighbour() -> None:
    crowded = quiet(
        swap_io_bytes_per_second=12 * MIB,
        top_processes=[ProcessShare(name="java", pid=3030, cpu_percent=4.0, memory_percent=41.0)],
    )
    report = run(host_swapping, *degradation(hosts(**_everywhere(contention=crowded))))
    assert detected(report)
    assert "verdict: noisy-neighbour: other processes hold the memory" in report.details
    assert "host-0: top other processes: java (pid 3030) 41% of host memory" in report.evidence


def test_in_a_memory_exhaustion_event_only_a_neighbour_outranks_the_symptom() -> None:
    grown = quiet(
        swap_io_bytes_per_second=40 * MIB,
        run_memory_rss_bytes=30 * GIB,
        run_memory_rss_baseline_bytes=12 * GIB,
    )
    full = {"host_0": {"contention": grown, "host_memory_utilization": 97.0}}
    exhausted = event(EventType.HOST_RESOURCE_EXHAUSTION, "host-memory", ["host-0"])
    analysis = analyze(exhausted, context(hosts(**full)), RUNBOOKS, NOW)
    assert analysis.probable_cause == "host-memory-pressure"
    assert report_of(analysis, "host-swapping").score == 0.45
    java = ProcessShare(name="java", pid=3030, memory_percent=41.0)
    crowded = quiet(swap_io_bytes_per_second=40 * MIB, top_processes=[java])
    full = {"host_0": {"contention": crowded, "host_memory_utilization": 97.0}}
    analysis = analyze(exhausted, context(hosts(**full)), RUNBOOKS, NOW)
    assert analysis.probable_cause == "host-swapping"
    assert "verdict: noisy-neighbour" in analysis.reports[0].details


def test_swap_in_use_without_paging_or_memory_short_is_not_swapping() -> None:
    idle_swap = quiet(swap_used_percent=40.0, swap_io_bytes_per_second=1024.0)
    report = run(host_swapping, *degradation(hosts(**_everywhere(contention=idle_swap))))
    assert not detected(report)
    assert report.details.startswith("No host swapped: at most 0.0 MiB/s paged in or out")


def test_cpu_steal_points_at_the_hypervisor() -> None:
    stolen = quiet(cpu_steal_percent=22.0)
    report = run(cpu_steal, *degradation(hosts(**_everywhere(contention=stolen))))
    assert detected(report)
    assert report.score == 0.75
    assert "The hypervisor gives host-0, host-1, host-2 and host-3's CPU time" in report.details
    assert "host-0: CPU steal 22% of the host's CPU" in report.evidence
    assert not detected(run(cpu_steal, *degradation(hosts(**_everywhere(contention=quiet())))))


def test_a_gpu_fallen_off_the_bus_ends_a_run() -> None:
    ended, ctx = termination(classification="unknown", exitCode=1)
    faulty = quiet(accelerator_ecc_errors=2.0, accelerator_xid_errors=[79, 79])
    ctx = ctx.model_copy(update={"hosts": hosts(host_1={"contention": faulty})})
    report = run(accelerator_errors, ended, ctx)
    assert detected(report)
    assert report.hosts == ["host-1"]
    assert report.score == 0.95  # a hardware fault on the very host that ended
    assert report.evidence == [
        "host-1: 2 uncorrected ECC error(s)",
        "host-1: XID 79: GPU has fallen off the bus",
    ]
    assert "the process ended on or after them" in report.details
    assert report.recommended_actions[0].documentation_url == "docs/runbooks/accelerator-errors.md"


def test_an_application_xid_and_throttle_reasons() -> None:
    app = quiet(
        accelerator_xid_errors=[13], accelerator_throttle_reasons=["idle", "power", "hw-slowdown"]
    )
    report = run(accelerator_errors, *degradation(hosts(**_everywhere(contention=app))))
    assert detected(report)
    assert report.score == 0.65
    assert (
        "host-0: XID 13: graphics engine exception (usually the application" in (report.evidence[0])
    )
    assert "host-0: clocks held down: hw-slowdown" in report.evidence
    idle = quiet(accelerator_throttle_reasons=["idle", "power"])  # a busy GPU at its power cap
    assert not detected(
        run(accelerator_errors, *degradation(hosts(**_everywhere(contention=idle))))
    )


def test_a_pcie_collapse_on_the_straggler() -> None:
    slow, _ = straggler()
    snapshots = hosts(
        **{
            **_everywhere(contention=quiet()),
            "host_2": {"step_time": 1.6, "contention": quiet(pcie_bytes_per_second=0.4 * GIB)},
        }
    )
    report = run(accelerator_errors, slow, context(snapshots))
    assert detected(report)
    assert report.hosts == ["host-2"]
    assert report.evidence == [
        "host-2: PCIe 409.6 MiB/s against a median of 6144.0 MiB/s on its peers"
    ]
    assert report.score == 0.7
    assert report.details.startswith("The GPUs of host-2 move far less over PCIe than their")
    # the same collapse in a slowdown of the whole run explains little
    dull = hosts(
        host_0={"contention": quiet(pcie_bytes_per_second=0.4 * GIB)},
        host_1={"contention": quiet()},
        host_2={"contention": quiet()},
    )
    report = run(accelerator_errors, *degradation(dull))
    assert detected(report)
    assert report.score == 0.45


def test_evidence_of_a_large_run_names_the_worst_hosts_and_counts_the_rest() -> None:
    snapshots = [
        host(f"host-{i:03d}", contention=quiet(other_cpu_percent=20.0 + i / 10, load_per_cpu=1.5))
        for i in range(300)
    ]
    report = run(host_cpu_contention, *degradation(snapshots))
    assert detected(report)
    assert len(report.hosts) == 300
    assert report.evidence[0] == "host-299: other processes 50% of the host's CPU (baseline 3%)"
    assert report.evidence[-1] == "... and 292 more host(s)"
