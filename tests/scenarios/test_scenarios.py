"""The scenario library against the whole platform: each workload causes its event (type,
hosts, top-ranked cause), and the quiet ones cause none.

ingestion, run-registry, event-detector and analyzer run for real (uvicorn threads, real NATS
and PostgreSQL, ``harness.py``); every workload is a real process per simulated host using
the SDK. The scenarios start together (their steps are mostly sleeps) and each test waits for
its own; one that loads the host with CPU burners (``cpu_contention``, ~50 s) runs alone once
the others have ended, so that its load slows no other scenario.
"""

import time
from collections.abc import Iterator
from typing import Any

import pytest

from scenarios.harness import (
    BURNER_NAME,
    Load,
    Platform,
    Scenario,
    report_names,
    serve,
    top_cause,
    top_report,
)

pytestmark = pytest.mark.e2e

# Thresholds a user would set for short jobs (the defaults suit hours-long training).
FAST_RULES = {
    "hang": {"thresholds": {"floorSeconds": 3}},
    "step-time-regression": {"thresholds": {"baselineSteps": 10}},
    "checkpoint-stall": {"thresholds": {"minSeconds": 0.1}},
}


SCENARIOS = [
    Scenario("quiet", hosts=2),
    Scenario("quiet_jax"),
    Scenario(
        "nan_loss",
        event="NUMERICAL_INSTABILITY",
        event_hosts=["host-0"],
        top_cause="numerical-instability",
    ),
    Scenario("recompilation", event="RECOMPILATION_STORM", top_cause="recompilation"),
    Scenario(
        "straggler",
        hosts=3,
        event="STRAGGLER",
        event_hosts=["host-2"],
        top_cause="straggler-localization",
    ),
    Scenario("slowdown", event="PERFORMANCE_DEGRADATION", event_hosts=["host-0"]),
    Scenario(
        "hang", event="HANG", event_hosts=["host-0"], top_cause="hang-localization", kill_after=20
    ),
    Scenario("crash", event="TERMINATION", event_hosts=["host-0"], top_cause="workload-exception"),
    Scenario(
        "accelerator_oom",
        event="ACCELERATOR_MEMORY_PRESSURE",
        event_hosts=["host-0"],
        top_cause="accelerator-memory-pressure",
        also=("TERMINATION",),  # the allocation that fails kills the process
    ),
    Scenario(
        "host_memory",
        event="HOST_RESOURCE_EXHAUSTION",
        event_hosts=["host-0"],
        top_cause="host-memory-pressure",
    ),
    Scenario(
        "input_stall", event="INPUT_STALL", event_hosts=["host-0"], top_cause="input-pipeline"
    ),
    Scenario("checkpoint_stall", event="CHECKPOINT_STALL", top_cause="checkpoint-blocking"),
    Scenario(
        "preempted",
        event="ORCHESTRATOR_INTERRUPTION",
        event_hosts=["host-0"],
        top_cause="preemption",
        also=("TERMINATION",),  # the SIGTERM that follows the notice ends it
    ),
    Scenario(
        "restart_first_life",
        event="ORCHESTRATOR_INTERRUPTION",
        event_hosts=["host-0"],
        # It died without a word and came back: an unplanned restart. Its process is stepping
        # again when the event opens, so it is not dead.
        top_cause="restart",
        then="restart",
        also=("HANG",),  # silent and dead until the second life: with a 3 s floor, a hang
    ),
    Scenario(
        "config_drift",
        hosts=2,
        event="CONFIG_DRIFT",
        event_hosts=["host-1"],
        env={1: {"XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=true"}},
        top_cause="fingerprint-mismatch",
    ),
    Scenario(
        "cpu_contention",
        event="PERFORMANCE_DEGRADATION",
        event_hosts=["host-0"],
        top_cause="host-cpu-contention",
        names=BURNER_NAME,
        # One core for the fit (no BLAS threads), the host sampled every second.
        env={0: {"MLDIAG_SYSTEM_METRICS_INTERVAL": "1", "OPENBLAS_NUM_THREADS": "1"}},
        load=Load(after=15, seconds=20),  # a burner per core, 20 s after 15 s of steady steps
    ),
]


@pytest.fixture(scope="module")
def platform(nats_url: str, database_url: str) -> Iterator[Platform]:
    """The four services, served once for the whole library, every scenario launched (those
    that load the host wait for their test, alone)."""
    with serve(nats_url, database_url, FAST_RULES) as served:
        for scenario in SCENARIOS:
            if scenario.load is None:
                served.launch(scenario)
        yield served


@pytest.mark.parametrize(
    "scenario",
    # A scenario that loads the host judges timing the rest of a busy machine disturbs
    # (fresh-clone CI saw it miss and misattribute): `pytest -m load` on a quiet machine, and
    # benchmarks/event_precision.py, run it.
    [
        pytest.param(scenario, id=scenario.name, marks=pytest.mark.load)
        if scenario.load is not None
        else pytest.param(scenario, id=scenario.name)
        for scenario in SCENARIOS
    ],
)
def test_scenario(platform: Platform, scenario: Scenario) -> None:
    launched = platform.launched.get(scenario.name) or platform.launch_alone(scenario)
    if scenario.event is None:
        platform.finish(launched)
        for process in launched.processes:
            assert process.returncode == 0, process.stderr.read().decode() if process.stderr else ""
        time.sleep(2.0)  # anything the detector would open from the tail, it has by now
        raised = [f"{e['type']}: {e['displayName']}" for e in platform.events(launched.run_id)]
        assert raised == [], "a quiet workload raised events"
        return
    if scenario.then is not None:
        platform.finish(launched)
        launched = platform.launch(Scenario(scenario.then), launched.run_id)
    deadline = time.monotonic() + 60
    matching: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        events = platform.events(launched.run_id)
        matching = [event for event in events if event["type"] == scenario.event]
        if matching and (scenario.top_cause is None or matching[0].get("analyzerReports")):
            break
        time.sleep(0.2)
    platform.finish(launched)
    if scenario.load is not None:  # the load is over: one event for it, never a relapse
        matching = [e for e in platform.events(launched.run_id) if e["type"] == scenario.event]
    assert matching, (
        f"no {scenario.event}; events: {[e['type'] for e in platform.events(launched.run_id)]}"
    )
    assert len(matching) == 1, [  # opened once, never a flood
        (e["displayName"], e["hosts"], e["state"], e["startTime"]) for e in matching
    ]
    [event] = matching
    if scenario.event_hosts is not None:
        assert event["hosts"] == scenario.event_hosts
    if scenario.top_cause is not None:
        assert top_cause(event) == scenario.top_cause, event["analyzerReports"]
    if scenario.names is not None:
        assert report_names(top_report(event), scenario.names), top_report(event)
