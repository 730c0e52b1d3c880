"""The analysis of an event: ranking, probable cause, time lost, the capture decision, and
what the service publishes."""

from collections.abc import Sequence
from datetime import timedelta

import pytest

from analyzer.analyzer_contexts import (
    NOW,
    RUNBOOKS,
    context,
    degradation,
    event,
    hang,
    hosts,
    neighbour,
    non_finite,
    report_of,
    straggler,
    termination,
)
from mldiag_analyzer.errors import NoAnalyzerForEvent
from mldiag_analyzer.service import (
    ANALYZER_VERSION,
    AnalyzerService,
    analyze,
    capture_message_id,
    capture_request,
)
from mldiag_schemas.analyses import (
    ANALYSIS_ID_NAMESPACE,
    AnalysisCompleted,
    AnalyzerReport,
    DetectionState,
)
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import EventType, WorkloadEventOpened, WorkloadEventUpdated
from mldiag_schemas.ids import derived_id
from mldiag_schemas.profiling import ProfileCaptureRequested


def _states(reports: Sequence[AnalyzerReport]) -> list[bool]:
    return [r.detection_state is DetectionState.DETECTED for r in reports]


def test_a_throttled_slow_host_ranks_first_in_a_degradation() -> None:
    slowed, ctx = degradation(
        hosts(host_2={"step_time": 1.7, "throttled": True, "clock_drop_mhz": 90.0})
    )
    analysis = analyze(slowed, ctx, RUNBOOKS, NOW)
    assert analysis.analyzer_insight_found
    assert analysis.probable_cause == "thermal-throttling"
    assert [r.analyzer for r in analysis.reports[:2]] == [
        "thermal-throttling",
        "straggler-localization",
    ]
    assert analysis.reports[0].hosts == ["host-2"]
    assert report_of(analysis, "straggler-localization").hosts == ["host-2"]
    # DETECTED first, by score; NOT_DETECTED after, each saying what it checked
    states = _states(analysis.reports)
    assert states == sorted(states, reverse=True)
    scores = [r.score for r in analysis.reports if r.detection_state is DetectionState.DETECTED]
    assert scores == sorted(scores, reverse=True)
    assert all(r.details for r in analysis.reports)
    assert report_of(analysis, "host-cpu-saturation").details.startswith(
        "Host CPU stayed at or below 38% on every host"
    )


def test_a_hang_where_one_host_stopped_heart_beating_names_it() -> None:
    stopped, ctx = hang(
        host_2={"last_heartbeat_time": NOW - timedelta(minutes=10), "last_step": 999}
    )
    analysis = analyze(stopped, ctx, RUNBOOKS, NOW)
    assert analysis.probable_cause == "dead-process"
    assert analysis.reports[0].hosts == ["host-2"]
    assert report_of(analysis, "hang-localization").hosts == ["host-2"]


def test_a_restart_without_a_word_is_an_unplanned_restart_not_a_dead_process() -> None:
    # The first life died silently; the second records steps before its first heartbeat
    # is in: the host is stepping, so it is not dead, and the restart is the cause.
    back = {
        "last_heartbeat_time": NOW - timedelta(seconds=40),
        "last_progress_time": NOW - timedelta(seconds=1),
        "restarts": 1,
    }
    interrupted = event(EventType.ORCHESTRATOR_INTERRUPTION, "interruption", ["host-0"])
    analysis = analyze(interrupted, context(hosts(1, host_0=back)), RUNBOOKS, NOW)
    assert analysis.probable_cause == "restart"
    assert "unplanned" in analysis.reports[0].details
    assert report_of(analysis, "dead-process").detection_state is DetectionState.NOT_DETECTED


def test_a_straggler_caused_by_a_different_environment() -> None:
    slow, ctx = straggler(fingerprint={"jax": "0.4.30"})
    analysis = analyze(slow, ctx, RUNBOOKS, NOW)
    assert analysis.probable_cause == "fingerprint-mismatch"
    assert analysis.reports[0].hosts == ["host-2"]


def test_a_cause_that_healthy_hosts_share_does_not_explain_a_straggler() -> None:
    busy = {f"host_{i}": {"host_cpu_utilization": 97.0} for i in range(4)}
    slow, _ = straggler()
    snapshots = hosts(**{**busy, "host_2": {"host_cpu_utilization": 97.0, "step_time": 1.6}})
    analysis = analyze(slow, context(snapshots), RUNBOOKS, NOW)
    cpu = report_of(analysis, "host-cpu-saturation")
    assert cpu.detection_state is DetectionState.DETECTED
    assert cpu.score == 0.3
    assert "healthy hosts show it too, so it does not explain why host-2 is slower" in cpu.details
    assert analysis.probable_cause == "straggler-localization"


def test_an_oom_kill_ranks_above_the_signal_that_delivered_it() -> None:
    ended, _ = termination(classification="oom_host", signal="SIGKILL", exitCode=137)
    analysis = analyze(ended, context(run_phase="FAILED"), RUNBOOKS, NOW)
    assert analysis.probable_cause == "host-oom-kill"
    assert report_of(analysis, "killed-by-signal").detection_state is DetectionState.NOT_DETECTED


def test_nothing_found_leaves_the_probable_cause_empty() -> None:
    analysis = analyze(*degradation(), RUNBOOKS, NOW)
    assert not analysis.analyzer_insight_found
    assert analysis.probable_cause == ""
    assert len(analysis.reports) == 17


def test_numerical_instability_without_a_cause_names_the_symptom() -> None:
    analysis = analyze(*non_finite(hosts_=[f"host-{i}" for i in range(4)]), RUNBOOKS, NOW)
    assert analysis.probable_cause == "numerical-instability"


def test_time_lost_is_the_detectors_or_the_estimate() -> None:
    # duty cycle 60% against 90% for 30 s: a third of 30 s lost
    assert analyze(*degradation(), RUNBOOKS, NOW).time_lost_seconds == pytest.approx(10.0)
    # the detector counted 300 s; no progress for 10 minutes says 600 s
    assert analyze(*hang(), RUNBOOKS, NOW).time_lost_seconds == pytest.approx(600.0)
    counted = event(EventType.CHECKPOINT_STALL, "checkpoint-stall", time_lost_seconds=12.5)
    assert analyze(counted, None, RUNBOOKS, NOW).time_lost_seconds == 12.5


def test_analysis_id_is_stable_for_an_event() -> None:
    slowed, ctx = degradation()
    assert analyze(slowed, ctx, "", NOW).analysis_id == analyze(slowed, None, "x/", NOW).analysis_id
    # the id analyses of opened events had before re-analysis existed: nothing stored changes
    assert analyze(slowed, ctx, "", NOW).analysis_id == derived_id(
        ANALYSIS_ID_NAMESPACE, str(slowed.event_id), ANALYZER_VERSION
    )


def test_each_revision_of_an_update_has_its_own_stable_analysis_id() -> None:
    slowed, ctx = degradation()
    opened = analyze(slowed, ctx, "", NOW).analysis_id
    second = slowed.model_copy(update={"revision": 2})
    third = slowed.model_copy(update={"revision": 3})
    ids = {
        analyze(second, ctx, "", NOW, reanalysis=True).analysis_id,
        analyze(third, ctx, "", NOW, reanalysis=True).analysis_id,
    }
    assert len(ids) == 2
    assert opened not in ids
    later = NOW + timedelta(minutes=5)
    assert analyze(second, None, "x/", later, reanalysis=True).analysis_id in ids


def test_unknown_event_types_are_refused() -> None:
    slowed, ctx = degradation()
    with pytest.raises(NoAnalyzerForEvent):
        analyze(slowed.model_copy(update={"type": "SOMETHING_NEW"}), ctx, "", NOW)


def test_capture_for_a_degradation_of_an_active_run() -> None:
    slowed, ctx = degradation()
    request = capture_request(slowed, ctx, NOW)
    assert request is not None
    assert request.kind == "SNAPSHOT"
    assert request.workload_event_id == slowed.event_id
    assert request.event_id == capture_message_id(slowed)
    assert request.run_id == "run-1"
    assert request.hosts == []  # the whole run
    assert request.duration_seconds == 5.0  # five 1 s steps
    assert "performance degradation" in request.reason
    assert capture_request(slowed, ctx, NOW + timedelta(seconds=1)) is not None
    assert capture_request(slowed, ctx, NOW).event_id == request.event_id  # type: ignore[union-attr]


def test_capture_of_a_straggler_targets_its_host() -> None:
    request = capture_request(*straggler(), NOW)
    assert request is not None
    assert request.hosts == ["host-2"]


def test_no_capture_when_it_cannot_help_or_the_run_ended() -> None:
    slowed, ctx = degradation()
    assert capture_request(slowed, ctx.model_copy(update={"run_phase": "COMPLETED"}), NOW) is None
    assert capture_request(slowed, None, NOW) is None
    assert capture_request(*termination(classification="oom_host"), NOW) is None
    assert capture_request(*non_finite(), NOW) is None


def test_a_hang_is_captured_only_on_live_processes() -> None:
    alive = capture_request(*hang(), NOW)
    assert alive is not None
    assert alive.hosts == ["host-0", "host-1", "host-2", "host-3"]
    assert alive.duration_seconds == 2.0
    partly = capture_request(*hang(host_2={"last_heartbeat_time": NOW - timedelta(minutes=5)}), NOW)
    assert partly is not None
    assert partly.hosts == ["host-0", "host-1", "host-3"]
    gone = {f"host_{i}": {"last_heartbeat_time": NOW - timedelta(minutes=5)} for i in range(4)}
    assert capture_request(*hang(**gone), NOW) is None


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[list[Envelope]] = []

    async def publish_many(self, messages: Sequence[Envelope]) -> None:
        self.calls.append(list(messages))


async def test_service_publishes_the_analysis_and_capture_together() -> None:
    recorder = _Recorder()
    service = AnalyzerService(recorder, RUNBOOKS, clock=lambda: NOW)
    slowed, ctx = degradation()
    ended, ended_ctx = termination(classification="oom_host")
    openings = [
        WorkloadEventOpened(event=slowed, context=ctx),
        WorkloadEventOpened(event=ended, context=ended_ctx),
    ]
    analyses = await service.on_opened(openings)
    [published] = recorder.calls
    assert [type(m) for m in published] == [
        AnalysisCompleted,
        ProfileCaptureRequested,
        AnalysisCompleted,
    ]
    first, capture, _ = published
    assert isinstance(first, AnalysisCompleted)
    assert isinstance(capture, ProfileCaptureRequested)
    assert first.event_id == analyses[0].analysis_id
    assert first.analysis.capture_requested
    assert not analyses[1].capture_requested
    assert capture.workload_event_id == slowed.event_id
    # a redelivery publishes the very same message ids (JetStream drops them)
    await service.on_opened(openings)
    assert [m.event_id for m in recorder.calls[1]] == [m.event_id for m in published]


async def test_an_update_with_context_is_analysed_again_without_a_second_capture() -> None:
    recorder = _Recorder()
    service = AnalyzerService(recorder, RUNBOOKS, clock=lambda: NOW)
    slowed, quiet_ctx = degradation()
    opened = await service.on_opened([WorkloadEventOpened(event=slowed, context=quiet_ctx)])
    assert opened[0].probable_cause == ""
    # the contention became visible after the event opened: the update brings it
    revised = slowed.model_copy(update={"revision": 2})
    contended = context(hosts(**{f"host_{i}": {"contention": neighbour()} for i in range(4)}))
    updates = [
        WorkloadEventUpdated(event=revised.model_copy(update={"revision": 3})),  # no context
        WorkloadEventUpdated(event=revised, context=contended),
    ]
    [analysis] = await service.on_updated(updates)
    assert analysis.event_id == slowed.event_id
    assert analysis.probable_cause == "host-cpu-contention"
    assert not analysis.capture_requested
    assert analysis.analysis_id != opened[0].analysis_id
    [published] = recorder.calls[1:]
    assert [type(m) for m in published] == [AnalysisCompleted]
    assert published[0].event_id == analysis.analysis_id
    # redelivered: the same analysis under the same message id
    [again] = await service.on_updated(updates)
    assert again.analysis_id == analysis.analysis_id
    assert recorder.calls[2][0].event_id == published[0].event_id


async def test_updates_without_context_publish_nothing() -> None:
    recorder = _Recorder()
    service = AnalyzerService(recorder, RUNBOOKS, clock=lambda: NOW)
    slowed, _ = degradation()
    assert await service.on_updated([WorkloadEventUpdated(event=slowed)]) == []
    assert recorder.calls == []
