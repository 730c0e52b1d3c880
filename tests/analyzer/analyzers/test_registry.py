"""The registry: every event type has analyzers, every analyzer links a runbook that exists."""

import re
from pathlib import Path

import pytest

from analyzer.analyzer_contexts import (
    NOW,
    RUNBOOKS,
    context,
    degradation,
    event,
    hang,
    hosts,
    non_finite,
    straggler,
    termination,
)
from mldiag_analyzer.analyzers import ANALYZERS, analyzers_for
from mldiag_analyzer.errors import NoAnalyzerForEvent
from mldiag_analyzer.service import analyze
from mldiag_schemas.events import EventType, RunContext, WorkloadEvent

RUNBOOK_DIR = Path(__file__).parents[3] / "docs" / "runbooks"
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def test_every_event_type_has_analyzers() -> None:
    for event_type in EventType:
        assert analyzers_for(event_type), event_type


def test_unknown_event_types_are_refused() -> None:
    with pytest.raises(NoAnalyzerForEvent):
        analyzers_for("SOMETHING_NEW")


def test_analyzer_names_are_kebab_case_and_unique_per_event() -> None:
    for event_type, analyzers in ANALYZERS.items():
        names = [a.name for a in analyzers]
        assert len(names) == len(set(names)), event_type
        assert all(KEBAB.match(name) for name in names), names


def test_one_runbook_per_event_type() -> None:
    for event_type in EventType:
        name = event_type.lower().replace("_", "-") + ".md"
        assert (RUNBOOK_DIR / name).is_file(), name


def test_every_analyzer_runbook_exists() -> None:
    runbooks = {a.runbook for analyzers in ANALYZERS.values() for a in analyzers}
    missing = [name for name in runbooks if not (RUNBOOK_DIR / name).is_file()]
    assert not missing


def _scenarios() -> list[tuple[WorkloadEvent, RunContext | None]]:
    """Events where many analyzers find their cause, so that their links are emitted."""
    troubled = context(
        hosts(
            host_1={
                "throttled": True,
                "host_cpu_utilization": 97.0,
                "host_memory_utilization": 96.0,
                "accelerator_memory_utilization": 99.0,
                "data_wait_fraction": 0.4,
                "step_time": 1.8,
                "restarts": 1,
                "fingerprint": {"jax": "0.4.30"},
            }
        ),
        compile_steps=[980, 990, 1000],
        checkpoint_fraction=0.3,
        config_changes=["userConfigs.batch_size", "userConfigs.learning_rate"],
        signals=["PREEMPTION_NOTICE on host-1", "SIGTERM on host-1"],
    )
    scenarios: list[tuple[WorkloadEvent, RunContext | None]] = [
        (event(event_type, "rule", ["host-1"]), troubled) for event_type in EventType
    ]
    scenarios += [(event(event_type, "rule"), None) for event_type in EventType]
    scenarios += [degradation(), straggler(throttled=True), hang(), non_finite()]
    for facts in (
        {"classification": "oom_host"},
        {"classification": "oom_accelerator"},
        {"classification": "hardware_error"},
        {"classification": "user_exception", "errorType": "ValueError", "message": "bad"},
        {"classification": "killed", "signal": "SIGKILL"},
        {"classification": "exit_code", "exitCode": 2},
    ):
        scenarios.append(termination(**facts))
    return scenarios


def test_every_emitted_documentation_url_points_to_a_runbook() -> None:
    urls = set()
    for scenario_event, scenario_context in _scenarios():
        analysis = analyze(scenario_event, scenario_context, RUNBOOKS, NOW)
        urls |= {
            action.documentation_url
            for report in analysis.reports
            for action in report.recommended_actions
        }
    assert len(urls) >= 10  # most runbooks are linked by some scenario
    for url in urls:
        assert url.startswith(RUNBOOKS)
        assert (RUNBOOK_DIR / url.removeprefix(RUNBOOKS)).is_file(), url


def test_reports_of_the_same_inputs_are_the_same() -> None:
    first = analyze(*degradation(), RUNBOOKS, NOW)
    assert first == analyze(*degradation(), RUNBOOKS, NOW)
