"""The console's browser tests' harness: the real platform and a real browser, once for the package.

run-registry (serving the built console), ingestion, event-detector, analyzer and
xprof-provisioner are served in threads against real NATS and PostgreSQL, once for every
console test file; data goes in through the public write APIs, as a user's job writes it, and
a real JAX workload serves its profiler. One browser (Debian's chromium, headless) for the
package, a fresh context per page user; no page may raise an uncaught script error. Without
chromium or a built console every test here is skipped. (The screenshots in ``docs/console/``
come from the real platform, through ``tools/console_screenshots``, not from these tests.)
"""

import asyncio
import contextlib
import math
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, sync_playwright

from console.helpers import (
    ALPHA,
    BETA,
    GAMMA,
    PROFILED,
    SEED_STEPS,
    UNSTABLE,
    Pages,
    Platform,
    ServiceSettings,
    loss_curve,
    series,
    wait_for,
)
from mldiag_analyzer.app import create_app as create_analyzer
from mldiag_analyzer.settings import AnalyzerSettings
from mldiag_event_detector.app import create_app as create_detector
from mldiag_event_detector.settings import EventDetectorSettings
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import DatabaseSettings, NatsSettings, StorageSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.console.handlers import BUILT_DIR
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_xprof_provisioner.app import create_app as create_provisioner
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from support import drop_namespace, free_port, served_in_thread

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


# The order the pages ran in as one file: the events page after the others have given the
# seeded runs a few seconds on the time axis (its timeline and screenshot read as a run, not a
# blip), the capture last, once the JAX job has had time to start.
PAGE_ORDER = ("test_runs.py", "test_metrics.py", "test_events.py", "test_sharing.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the console's test files in ``PAGE_ORDER`` (others after), each in file order."""
    here = Path(__file__).parent
    slots = [index for index, item in enumerate(items) if item.path.parent == here]
    rank = {name: position for position, name in enumerate(PAGE_ORDER)}
    ordered = sorted(
        (items[index] for index in slots),
        key=lambda item: rank.get(item.path.name, len(PAGE_ORDER)),
    )
    for index, item in zip(slots, ordered, strict=True):
        items[index] = item


@pytest.fixture(scope="package", autouse=True)
def _console_prerequisites() -> None:
    """Skip every console test, before any server starts, without chromium or a built console."""
    if not CHROMIUM.is_file():
        pytest.skip(f"no chromium at {CHROMIUM}")
    if not (BUILT_DIR / "index.html").is_file():
        pytest.skip(f"the console is not built (no {BUILT_DIR}/index.html): run `make console`")


def _seed(platform: Platform) -> None:
    steps = range(1, SEED_STEPS + 1)
    platform.create_run(
        ALPHA,
        "alpha baseline",
        runSet="resnet",
        labels={"team": "vision"},
        configs={"userConfigs": {"lr": 0.1, "optimizer": "sgd", "batch": 256}},
    )
    platform.create_run(
        BETA,
        "beta finished",
        runSet="resnet",
        runPhase="COMPLETED",
        configs={"userConfigs": {"lr": 0.05, "optimizer": "adam", "batch": 256}},
    )
    platform.create_run(GAMMA, "gamma failed", runSet="bert", runPhase="FAILED")
    platform.create_run(UNSTABLE, "unstable lr=3", runSet="resnet")  # its steps come later
    platform.write(
        ALPHA,
        series("loss", steps, loss_curve(steps)),
        series("loss", steps, loss_curve(steps, 0.08), host="host-1"),
        series("accuracy", steps, [min(0.95, 0.3 + s / 300) for s in steps]),
        series("step_time", steps, [0.21 + 0.01 * math.sin(s / 7) for s in steps]),
    )
    platform.write(BETA, series("loss", steps, loss_curve(steps, 0.15)))
    wait_for(lambda: platform.point_count(ALPHA, "loss") == 2 * SEED_STEPS, "alpha's points")
    wait_for(lambda: platform.point_count(BETA, "loss") == SEED_STEPS, "beta's points")


@pytest.fixture(scope="package")
def platform(
    nats_url: str, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    """The five services for the console tests, seeded, with the profiled job starting."""
    tmp = tmp_path_factory.mktemp("console")
    tag = uuid.uuid4().hex[:8]
    namespace = f"console{tag}"
    bus = NatsSettings(url=nats_url, namespace=namespace)
    database = DatabaseSettings(url=database_url, pool_min_size=1, pool_max_size=4)
    storage = StorageSettings(url=f"file://{tmp / 'storage'}")
    admin = "mldiag_" + secrets.token_urlsafe(32)
    provisioner = create_provisioner(
        XProfProvisionerSettings(
            nats=bus,
            storage=storage,
            work_dir=tmp / "xprof",
            first_instance_port=min(free_port(), 65000),
            instance_port_count=20,
            idle_timeout_seconds=120,
        )
    )
    detector = create_detector(
        EventDetectorSettings(nats=bus, database=database, db_schema=f"d_{tag}")
    )
    analyzer = create_analyzer(AnalyzerSettings(nats=bus))
    ingestion = create_ingestion(IngestionSettings(nats=bus, otlp_enabled=False))
    stop = tmp / "stop"
    try:
        with (
            served_in_thread(provisioner) as xprof_url,
            served_in_thread(detector),
            served_in_thread(analyzer),
            served_in_thread(ingestion) as ingestion_url,
        ):
            registry = create_registry(
                RunRegistrySettings(
                    nats=bus,
                    database=database,
                    db_schema=f"r_{tag}",
                    bootstrap_admin_token=admin,
                    storage=storage,
                    xprof_url=xprof_url,
                )
            )
            with served_in_thread(registry) as api_url:
                services = ServiceSettings(bus, database, storage, tag)
                platform = Platform(api_url, ingestion_url, admin, services)
                # JAX takes seconds to start: the job warms up while the other tests run.
                platform.start_profiled_job(
                    PROFILED,
                    stop,
                    {
                        "MLDIAG_API_URL": api_url,
                        "MLDIAG_INGESTION_URL": ingestion_url,
                        "MLDIAG_TOKEN": admin,
                        "MLDIAG_HEARTBEAT_INTERVAL": "0",
                        "MLDIAG_SPOOL_DIR": "",
                        "MLDIAG_PROFILER_ADVERTISE_HOST": "127.0.0.1",
                        "JAX_PLATFORMS": "cpu",
                    },
                )
                try:
                    _seed(platform)
                    yield platform
                finally:
                    stop.touch()
                    for process in platform.processes:
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            process.wait(10)
                        if process.poll() is None:
                            process.kill()
                            process.wait(10)
                    platform.close()
    finally:
        asyncio.run(drop_namespace(nats_url, namespace))


@pytest.fixture(scope="package")
def unstable_event(platform: Platform) -> dict[str, Any]:
    """A run whose loss went NaN at step 41, and the event the detector opened for it."""
    # The run was created with the others; its steps came evenly since then, until now.
    run = platform.get(f"/v1/machineLearningRuns/{UNSTABLE}")
    start = datetime.fromisoformat(run["createTime"].replace("Z", "+00:00"))
    tick = (datetime.now(UTC) - start) / 43

    def timed(name: str, steps: range, values: list[float]) -> dict[str, Any]:
        times = [(start + tick * s).isoformat() for s in steps]
        return {**series(name, steps, values), "times": times}

    steps = range(1, 41)
    platform.write(
        UNSTABLE,
        timed("loss", steps, loss_curve(steps)),
        timed("step_time", steps, [0.2 + 0.002 * s for s in steps]),
    )
    platform.write(UNSTABLE, timed("loss", range(41, 43), [math.nan, math.nan]))

    def event() -> dict[str, Any] | None:
        events = platform.get(f"/v1/machineLearningRuns/{UNSTABLE}/monitoredEvents")["events"]
        found = [e for e in events if e["type"] == "NUMERICAL_INSTABILITY"]
        return found[0] if found else None

    found: dict[str, Any] = wait_for(event, "NUMERICAL_INSTABILITY event")
    return found


@pytest.fixture(scope="package")
def browser(platform: Platform) -> Iterator[Browser]:
    """Debian's chromium, headless, for the console tests (closed before the platform stops, so no
    live stream holds a server open)."""
    del platform
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def pages(browser: Browser, platform: Platform) -> Iterator[Pages]:
    """This test's browser contexts; none of their pages may raise a script error."""
    opened = Pages(browser, platform)
    try:
        yield opened
    finally:
        opened.close()
    assert opened.errors == [], opened.errors
