"""Orchestrator analyzers: preemption notices, restarts and processes stopped by a signal."""

from analyzer.analyzer_contexts import context, detected, event, hang, hosts, run, termination
from mldiag_analyzer.analyzers.orchestrator import killed_by_signal, preemption, restart
from mldiag_schemas.analyses import Layer
from mldiag_schemas.events import EventType, Evidence


def test_a_preemption_notice_before_a_hang_is_planned() -> None:
    stopped, ctx = hang()
    ctx = ctx.model_copy(
        update={"signals": ["PREEMPTION_NOTICE on host-1: maintenance event scheduled"]}
    )
    report = run(preemption, stopped, ctx)
    assert detected(report)
    assert report.layer is Layer.ORCHESTRATOR
    assert report.hosts == ["host-1"]
    assert report.score == 0.8
    assert "planned" in report.details
    assert "the hang follows it" in report.details
    assert report.evidence == ["signal: PREEMPTION_NOTICE on host-1: maintenance event scheduled"]


def test_sigterm_without_a_notice_is_less_certain() -> None:
    interrupted = event(
        EventType.ORCHESTRATOR_INTERRUPTION,
        "interruption",
        ["host-0"],
        Evidence(facts={"signal": "SIGTERM"}),
    )
    report = run(preemption, interrupted, context())
    assert detected(report)
    assert report.hosts == ["host-0"]
    assert report.score == 0.65
    assert "SIGTERM" in report.details


def test_no_interruption_signal() -> None:
    report = run(preemption, *hang())
    assert not detected(report)
    assert "checked 0 recent lifecycle signal(s)" in report.details


def test_an_unplanned_restart_from_a_checkpoint() -> None:
    interrupted = event(
        EventType.ORCHESTRATOR_INTERRUPTION,
        "interruption",
        ["host-3"],
        Evidence(facts={"lostSteps": 120}),
    )
    report = run(restart, interrupted, context(hosts(host_3={"restarts": 2})))
    assert detected(report)
    assert report.hosts == ["host-3"]
    assert report.score == 0.65
    assert "unplanned" in report.details
    assert "crash loop" in report.details
    assert "120 steps redone since the last checkpoint" in report.evidence


def test_a_restart_explains_a_recompilation_storm() -> None:
    storm = event(EventType.RECOMPILATION_STORM, "recompilation")
    report = run(restart, storm, context(hosts(host_0={"restarts": 1})))
    assert detected(report)
    assert "compile their programs again" in report.details
    quiet = run(restart, storm, context())
    assert not detected(quiet)
    assert quiet.details == "No host restarted (4 hosts, no step recorded twice)."


def test_killed_by_sigterm_after_a_notice() -> None:
    ended, ctx = termination(classification="killed", signal="SIGTERM", exitCode=143)
    ctx = ctx.model_copy(update={"signals": ["PREEMPTION_NOTICE on host-1: spot reclaim"]})
    report = run(killed_by_signal, ended, ctx)
    assert detected(report)
    assert report.score == 0.85
    assert report.details.startswith("The process on host-1 was killed by SIGTERM after a")


def test_killed_signal_from_the_exit_code() -> None:
    report = run(killed_by_signal, *termination(exitCode=137))
    assert detected(report)
    assert "SIGKILL" in report.details


def test_an_oom_kill_is_not_an_outside_signal() -> None:
    report = run(killed_by_signal, *termination(classification="oom_host", signal="SIGKILL"))
    assert not detected(report)
    assert "'oom_host'" in report.details


def test_the_detectors_interruption_facts_and_signal_lines() -> None:
    interrupted = event(
        EventType.ORCHESTRATOR_INTERRUPTION,
        "interruption",
        ["host-1"],
        Evidence(facts={"causes": ["preemption notice"], "preemption": "maintenance"}),
    )
    lines = [
        "2026-01-01T11:58:00+00:00 preemption notice on host-1: maintenance",
        "2026-01-01T11:59:00+00:00 new process on host-3: pid 41 → 97",
    ]
    ctx = context(signals=lines)
    planned = run(preemption, interrupted, ctx)
    assert detected(planned)
    assert planned.hosts == ["host-1"]
    assert f"signal: {lines[0]}" in planned.evidence
    restarted = run(restart, interrupted, ctx)
    assert detected(restarted)
    assert restarted.hosts == ["host-3"]
    assert "after a stop request (planned)" in restarted.details


def test_other_events_facts_are_not_read_as_signals() -> None:
    spike = event(
        EventType.NUMERICAL_INSTABILITY, "loss-spike", [], Evidence(facts={"kind": "preempt"})
    )
    assert not detected(run(preemption, spike, context()))


def test_a_termination_of_the_whole_run_names_no_host() -> None:
    ended = event(
        EventType.TERMINATION,
        "termination",
        [],
        Evidence(facts={"classification": "killed", "signal": "SIGTERM", "source": "runPhase"}),
    )
    report = run(killed_by_signal, ended, None)
    assert detected(report)
    assert report.details.startswith("The process was killed by SIGTERM: by the scheduler")
