"""The scenario library against the whole platform: each workload causes its event (type,
hosts, top-ranked cause), and the quiet ones cause none.

ingestion, run-registry, event-detector and analyzer run for real (uvicorn threads, real NATS
and PostgreSQL); every workload is a real process per simulated host using the SDK. All
scenarios start together (their steps are mostly sleeps) and each test waits for its own.
"""

import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from mldiag_analyzer.app import create_app as create_analyzer
from mldiag_analyzer.settings import AnalyzerSettings
from mldiag_event_detector.app import create_app as create_detector
from mldiag_event_detector.settings import EventDetectorSettings
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from support import served_in_thread

pytestmark = pytest.mark.e2e

WORKLOAD = Path(__file__).with_name("workload.py")

# Thresholds a user would set for short jobs (the defaults suit hours-long training).
FAST_RULES = {
    "hang": {"thresholds": {"floorSeconds": 3}},
    "step-time-regression": {"thresholds": {"baselineSteps": 10}},
    "checkpoint-stall": {"thresholds": {"minSeconds": 0.1}},
}


@dataclass(frozen=True)
class Scenario:
    """A workload, how many hosts run it, and what the platform must say about it."""

    name: str
    hosts: int = 1
    event: str | None = None
    """The event type it must cause; None: a quiet workload (no event at all)."""
    event_hosts: list[str] | None = None
    top_cause: str | None = None
    """The analyzer whose DETECTED report must rank first."""
    env: dict[int, dict[str, str]] = field(default_factory=dict)
    kill_after: float | None = None
    """Seconds after which a hung workload is killed (it never ends on its own)."""
    then: str | None = None
    """A second life of the workload, started on the same run once the first has ended."""


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
    ),
    Scenario(
        "restart_first_life",
        event="ORCHESTRATOR_INTERRUPTION",
        event_hosts=["host-0"],
        top_cause="dead-process",  # it died without a word, then came back
        then="restart",
    ),
    Scenario(
        "config_drift",
        hosts=2,
        event="CONFIG_DRIFT",
        event_hosts=["host-1"],
        env={1: {"XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=true"}},
        top_cause="fingerprint-mismatch",
    ),
]


@dataclass
class Launched:
    """A scenario's run and processes."""

    scenario: Scenario
    run_id: str
    processes: list[subprocess.Popen[bytes]]
    started: float


class Platform:
    """The served platform and the scenarios running against it."""

    def __init__(self, api: str, env: dict[str, str], token: str) -> None:
        self.api = httpx.Client(
            base_url=api, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        self.env = env
        self.launched: dict[str, Launched] = {}

    def launch(self, scenario: Scenario, run_id: str | None = None) -> Launched:
        run_id = run_id or f"{scenario.name.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
        processes = []
        for index in range(scenario.hosts):
            env = {
                **os.environ,
                **self.env,
                "MLDIAG_RUN_ID": run_id,
                "MLDIAG_HOST": f"host-{index}",
                "MLDIAG_PROCESS_INDEX": str(index),
                **scenario.env.get(index, {}),
            }
            processes.append(
                subprocess.Popen(
                    [sys.executable, str(WORKLOAD), scenario.name],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
        launched = Launched(scenario, run_id, processes, time.monotonic())
        self.launched[scenario.name] = launched
        return launched

    def events(self, run_id: str) -> list[dict[str, Any]]:
        response = self.api.get(f"/v1/machineLearningRuns/{run_id}/monitoredEvents")
        if response.status_code == 404:
            return []  # the run is not created yet
        response.raise_for_status()
        events: list[dict[str, Any]] = response.json().get("events", [])
        return events

    def finish(self, launched: Launched, timeout: float = 90) -> None:
        """Wait for the processes (killing a hung one after its time)."""
        for process in launched.processes:
            limit = launched.scenario.kill_after
            remaining = timeout if limit is None else limit - (time.monotonic() - launched.started)
            try:
                process.wait(max(remaining, 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@pytest.fixture(scope="module")
def platform(nats_url: str, database_url: str) -> Iterator[Platform]:
    """The four services, served once for the whole library, every scenario launched."""
    tag = uuid.uuid4().hex[:8]
    nats = NatsSettings(url=nats_url, namespace=f"scn{tag}")
    database = DatabaseSettings(url=database_url, pool_min_size=1, pool_max_size=4)
    token = "mldiag_" + secrets.token_urlsafe(32)
    registry = create_registry(
        RunRegistrySettings(
            nats=nats, database=database, db_schema=f"r_{tag}", bootstrap_admin_token=token
        )
    )
    ingestion = create_ingestion(IngestionSettings(nats=nats, otlp_grpc_port=0, otlp_http_port=0))
    detector = create_detector(
        EventDetectorSettings(nats=nats, database=database, db_schema=f"d_{tag}")
    )
    analyzer = create_analyzer(AnalyzerSettings(nats=nats))
    with (
        served_in_thread(registry) as api,
        served_in_thread(ingestion) as ingestion_url,
        served_in_thread(detector),
        served_in_thread(analyzer),
    ):
        served = Platform(
            api,
            {
                "MLDIAG_API_URL": api,
                "MLDIAG_INGESTION_URL": ingestion_url,
                "MLDIAG_TOKEN": token,
                "MLDIAG_HEARTBEAT_INTERVAL": "1",
                "MLDIAG_SPOOL_DIR": "",
            },
            token,
        )
        served.api.patch(
            "/v1/projects/default/locations/local/monitoringRules", json={"rules": FAST_RULES}
        ).raise_for_status()
        time.sleep(0.5)  # the detector has the project's rules before the first run
        for scenario in SCENARIOS:
            served.launch(scenario)
        yield served
        for launched in served.launched.values():
            for process in launched.processes:
                if process.poll() is None:
                    process.kill()


def _top_cause(event: dict[str, Any]) -> str | None:
    detected = [
        report
        for report in event.get("analyzerReports", [])
        if report["detectionState"] == "DETECTED"
    ]
    return detected[0]["analyzer"] if detected else None


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.name)
def test_scenario(platform: Platform, scenario: Scenario) -> None:
    launched = platform.launched[scenario.name]
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
        assert _top_cause(event) == scenario.top_cause, event["analyzerReports"]
