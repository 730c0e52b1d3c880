"""The scenario library's platform and workloads, shared by ``test_scenarios.py`` (which
asserts on each scenario) and ``benchmarks/event_precision.py`` (which counts over many).

:func:`serve` runs ingestion, run-registry, event-detector and analyzer for real (uvicorn
threads, real NATS and PostgreSQL); :meth:`Platform.launch` starts a scenario's workload as a
real process per simulated host, and the background CPU load the scenario asks for
(:class:`Load`, ``burner.py`` processes).
"""

import asyncio
import os
import secrets
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil

from mldiag_analyzer.app import create_app as create_analyzer
from mldiag_analyzer.settings import AnalyzerSettings
from mldiag_event_detector.app import create_app as create_detector
from mldiag_event_detector.settings import EventDetectorSettings
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from support import drop_namespace, served_in_thread

WORKLOAD = Path(__file__).with_name("workload.py")
BURNER = Path(__file__).with_name("burner.py")
BURNER_NAME = BURNER.name
"""How process listings name a burner (what an analysis of the contention must say)."""


QUIET_HOST_PERCENT = 30.0
"""A host is quiet enough to load on purpose once its CPU stays below this (% of all cores)..."""
QUIET_HOST_SECONDS = 3
"""...for this many one-second samples in a row..."""
QUIET_HOST_WAIT = 60.0
"""...waiting this long at most (then it goes ahead, as busy as it is)."""


def wait_for_quiet_host() -> float:
    """Wait until the host's CPU has calmed down (the platform digesting what the previous
    scenarios sent, their processes exiting); return the seconds waited. A scenario that
    loads the host on purpose is judged against what was normal just before its load, so
    that must not be the tail of the previous batch."""
    started = time.monotonic()
    calm = 0
    while calm < QUIET_HOST_SECONDS and time.monotonic() - started < QUIET_HOST_WAIT:
        calm = calm + 1 if psutil.cpu_percent(interval=1.0) < QUIET_HOST_PERCENT else 0
    return time.monotonic() - started


@dataclass(frozen=True)
class Load:
    """Background CPU load: ``burners`` busy processes from ``after`` seconds for ``seconds``."""

    after: float
    seconds: float
    burners: int = field(default_factory=lambda: os.cpu_count() or 1)


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
    also: tuple[str, ...] = ()
    """Other event types the workload truly causes (an OOM that kills the process is also a
    TERMINATION): not asserted by the tests, not counted as false by the precision benchmark."""
    names: str | None = None
    """Text the top cause's report must contain (in its details or evidence)."""
    env: dict[int, dict[str, str]] = field(default_factory=dict)
    kill_after: float | None = None
    """Seconds after which a hung workload is killed (it never ends on its own)."""
    then: str | None = None
    """A second life of the workload, started on the same run once the first has ended."""
    load: Load | None = None
    """Background CPU load the harness starts during the workload. Such a scenario loads the
    whole host, so it runs alone (:meth:`Platform.launch_alone`), after the others."""


class Burst:
    """CPU burners started after a delay and stopped at their end (or at :meth:`stop`); when
    they really ran is kept for the books (``started``/``ended``, UTC)."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.started: datetime | None = None
        self.ended: datetime | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="burst", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._stop.wait(self.load.after):
            return
        seconds = str(self.load.seconds)
        burners = [
            subprocess.Popen([sys.executable, str(BURNER), seconds])
            for _ in range(self.load.burners)
        ]
        self.started = datetime.now(UTC)
        self._stop.wait(self.load.seconds)
        for burner in burners:
            burner.kill()
            burner.wait(10)
        self.ended = datetime.now(UTC)

    def stop(self) -> None:
        """End the load now (or prevent it, when it has not started)."""
        self._stop.set()
        self._thread.join(15)


@dataclass
class Launched:
    """A scenario's run, processes and background load."""

    scenario: Scenario
    run_id: str
    processes: list[subprocess.Popen[bytes]]
    started: float
    bursts: list[Burst] = field(default_factory=list)


class Platform:
    """The served platform and the scenarios running against it."""

    def __init__(self, api: str, env: dict[str, str], token: str) -> None:
        self.api = httpx.Client(
            base_url=api, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        self.env = env
        self.launched: dict[str, Launched] = {}

    def launch(
        self, scenario: Scenario, run_id: str | None = None, env: dict[str, str] | None = None
    ) -> Launched:
        """Start the scenario's processes (``env`` added to each) and its load, if any."""
        run_id = run_id or f"{scenario.name.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
        processes = []
        for index in range(scenario.hosts):
            process_env = {
                **os.environ,
                **self.env,
                **(env or {}),
                "MLDIAG_RUN_ID": run_id,
                "MLDIAG_HOST": f"host-{index}",
                "MLDIAG_PROCESS_INDEX": str(index),
                **scenario.env.get(index, {}),
            }
            processes.append(
                subprocess.Popen(
                    [sys.executable, str(WORKLOAD), scenario.name],
                    env=process_env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
        launched = Launched(scenario, run_id, processes, time.monotonic())
        if scenario.load is not None:
            launched.bursts.append(Burst(scenario.load))
        self.launched[scenario.name] = launched
        return launched

    def launch_alone(self, scenario: Scenario, env: dict[str, str] | None = None) -> Launched:
        """Let every other scenario end and the host calm down first, then launch this one
        (it loads the host)."""
        for launched in list(self.launched.values()):
            self.finish(launched)
        wait_for_quiet_host()
        return self.launch(scenario, env=env)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events as the API lists them (none while the run does not exist)."""
        response = self.api.get(f"/v1/machineLearningRuns/{run_id}/monitoredEvents")
        if response.status_code == 404:
            return []  # the run is not created yet
        response.raise_for_status()
        events: list[dict[str, Any]] = response.json().get("events", [])
        return events

    def ended(self, launched: Launched, timeout: float = 90) -> bool:
        """Whether the processes have ended, or are due to be killed (:meth:`finish`)."""
        elapsed = time.monotonic() - launched.started
        limit = launched.scenario.kill_after
        due = elapsed >= timeout or (limit is not None and elapsed >= limit)
        return due or all(process.poll() is not None for process in launched.processes)

    def finish(self, launched: Launched, timeout: float = 90) -> None:
        """Wait for the processes (killing a hung one after its time) and the load."""
        for process in launched.processes:
            limit = launched.scenario.kill_after
            remaining = timeout if limit is None else limit - (time.monotonic() - launched.started)
            try:
                process.wait(max(remaining, 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        for burst in launched.bursts:
            burst.stop()

    def stop(self) -> None:
        """Kill whatever still runs."""
        for launched in self.launched.values():
            for burst in launched.bursts:
                burst.stop()
            for process in launched.processes:
                if process.poll() is None:
                    process.kill()
                    process.wait(10)


@contextmanager
def serve(
    nats_url: str, database_url: str, rules: dict[str, Any], env: dict[str, str] | None = None
) -> Iterator[Platform]:
    """The four services on a fresh namespace and schemas, the project's monitoring ``rules``
    set; workloads get ``env`` too. Leftover processes are killed and the namespace's
    streams deleted on exit."""
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
    try:
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
                    **(env or {}),
                },
                token,
            )
            served.api.patch(
                "/v1/projects/default/locations/local/monitoringRules", json={"rules": rules}
            ).raise_for_status()
            time.sleep(0.5)  # the detector has the project's rules before the first run
            try:
                yield served
            finally:
                served.stop()
    finally:
        asyncio.run(drop_namespace(nats_url, nats.namespace))


def top_report(event: dict[str, Any]) -> dict[str, Any] | None:
    """The event's most probable cause: its first DETECTED analyzer report."""
    for report in event.get("analyzerReports", []):
        if report["detectionState"] == "DETECTED":
            found: dict[str, Any] = report
            return found
    return None


def top_cause(event: dict[str, Any]) -> str | None:
    """The analyzer of :func:`top_report`."""
    report = top_report(event)
    return None if report is None else str(report["analyzer"])


def report_names(report: dict[str, Any] | None, text: str) -> bool:
    """Whether ``report`` says ``text`` (in its details or evidence)."""
    if report is None:
        return False
    said = [report.get("details", ""), *report.get("evidence", [])]
    return any(text in line for line in said)
