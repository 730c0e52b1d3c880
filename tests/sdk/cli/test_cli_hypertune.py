"""The replica launcher forwards a trial's ``cloudml-hypertune`` reports to its run.

Real programs under the real launcher (``replica_launcher.py`` by its path, as executors run
it), a real run-registry and ingestion, and the points read back from the bus subject the
tuning controller consumes (``telemetry.metrics.received.<run>``): the name is the report's
tag, the step its ``global_step``, each report once, the chief's only.
"""

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

import mldiag.cli
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.telemetry import MetricPointsReceived
from sdk.cli.conftest import Platform
from support import read_messages

pytestmark = pytest.mark.connected

LAUNCHER = Path(mldiag.cli.__file__).parent / "replica_launcher.py"
TIMEOUT = 120

PACED, BURST = 120, 20
"""Reports a little apart (several polls see the file), then a burst the final read gets:
more than the library's 100 in all."""
LIBRARY_PROGRAM = f"""
import json, os, sys, time, urllib.request
import hypertune

def reached_the_run():
    request = urllib.request.Request(
        os.environ["MLDIAG_API_URL"]
        + "/v1/machineLearningRuns/" + os.environ["MLDIAG_RUN_ID"] + "/metrics/accuracy",
        headers={{"Authorization": "Bearer " + os.environ["MLDIAG_TOKEN"]}},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return bool(json.load(response)["points"])
    except OSError:
        return False

print(os.environ["CLOUD_ML_HP_METRIC_FILE"], flush=True)
chief = os.environ["MLDIAG_REPLICA"] == "workerpool0-0"
sign = 1 if chief else -1
hpt = hypertune.HyperTune()
for step in range(1, {PACED + BURST + 1}):
    hpt.report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag="accuracy", metric_value=sign * step / 1000, global_step=step
    )
    if step == 1 and chief:
        # The launcher imports the SDK after the program started: on a busy machine its
        # first look may come after 100 quick reports, which the library keeps no longer.
        deadline = time.monotonic() + 60
        while not reached_the_run() and time.monotonic() < deadline:
            time.sleep(0.1)
    if step <= {PACED}:
        time.sleep(0.04)
hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="", metric_value=sign * 0.5)
"""


def _vertex_python() -> str:
    named = os.environ.get("MLDIAG_TEST_VERTEX_SDK_PYTHON")
    if not named:
        pytest.skip("set MLDIAG_TEST_VERTEX_SDK_PYTHON to a Python with cloudml-hypertune")
    return named


async def _create_run(platform: Platform, run_id: str) -> None:
    created = await asyncio.to_thread(
        httpx.post,
        f"{platform.api_url}/v1/machineLearningRuns",
        json={"runId": run_id, "displayName": "trial", "runSet": "training-jobs"},
        headers=platform.tokens.headers(),
        timeout=10,
    )
    assert created.status_code < 300, created.text


def _launch(
    platform: Platform,
    run_id: str,
    replica: str,
    attempt_dir: Path,
    program: list[str],
    *,
    launcher: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    """``launcher`` (the replica launcher by its path, as executors start it, by default)
    running ``program`` as ``replica`` with the attempt's exit file in ``attempt_dir``."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MLDIAG_", "CLOUD_ML_")) or key == "MLDIAG_HOME"
    }
    environment.update(
        MLDIAG_API_URL=platform.api_url,
        MLDIAG_INGESTION_URL=platform.ingestion_url,
        MLDIAG_TOKEN=platform.tokens.admin,
        MLDIAG_SPOOL_DIR=str(attempt_dir / "spool"),
        MLDIAG_RUN_ID=run_id,
        MLDIAG_REPLICA=replica,
        MLDIAG_SYSTEM_METRICS_INTERVAL="0",
        MLDIAG_HEARTBEAT_INTERVAL="0",
        CLOUD_ML_TRIAL_ID="1",
    )
    exit_file = attempt_dir / "exit.json"
    options = ["--replica", replica, "--exit-file", str(exit_file)]
    return subprocess.Popen(
        [*(launcher or [sys.executable, str(LAUNCHER)]), *options, "--", *program],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def _finished(process: subprocess.Popen[bytes]) -> tuple[str, str]:
    out, err = await asyncio.to_thread(process.communicate, timeout=TIMEOUT)
    assert process.returncode == 0, err.decode()
    return out.decode(), err.decode()


async def _points(
    nats_settings: NatsSettings, run_id: str, expected: dict[str, int]
) -> dict[str, list[tuple[str, int, float]]]:
    """(host, step, value) by metric name, once ``expected`` (name → count) have arrived."""
    deadline = time.monotonic() + 30
    while True:
        found: dict[str, list[tuple[str, int, float]]] = {}
        for message in await read_messages(
            nats_settings, bus.METRICS_RECEIVED, MetricPointsReceived
        ):
            if message.run_id != run_id:
                continue
            for series in message.series:
                found.setdefault(series.name, []).extend(
                    (series.host, step, value)
                    for step, value in zip(series.steps, series.values, strict=True)
                )
        counts = {name: len(found.get(name, [])) for name in expected}
        if counts == expected or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.2)


async def test_the_chiefs_library_reports_reach_the_run_once_each_and_a_workers_do_not(
    platform_apps: Platform, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    python = _vertex_python()
    run_id = "880001"
    await _create_run(platform_apps, run_id)
    program = [python, "-c", textwrap.dedent(LIBRARY_PROGRAM)]
    chief_dir, worker_dir = tmp_path / "p0-i0-a1", tmp_path / "p1-i0-a1"
    # both at once, as a trial's replicas run: each writes a file of its own
    chief = _launch(platform_apps, run_id, "workerpool0-0", chief_dir, program)
    worker = _launch(platform_apps, run_id, "workerpool1-0", worker_dir, program)
    (chief_out, chief_err), (worker_out, worker_err) = await asyncio.gather(
        _finished(chief), _finished(worker)
    )
    assert chief_out.strip() == str(chief_dir / "hypertune" / "output.metrics")
    assert worker_out.strip() == str(worker_dir / "hypertune" / "output.metrics")
    assert "mldiag.hypertune.ignored replica=workerpool1-0" in worker_err
    assert "mldiag.hypertune" not in chief_err  # no bad line, nothing ignored

    reports = PACED + BURST
    points = await _points(
        nats_settings, run_id, {"accuracy": reports, "training/hptuning/metric": 1}
    )
    # the metric is the tag, the step the global step, each report once, the chief's alone
    assert sorted(points["accuracy"]) == [
        ("workerpool0-0", step, step / 1000) for step in range(1, reports + 1)
    ]
    # the library writes global_step "0" when none is given
    assert points["training/hptuning/metric"] == [("workerpool0-0", 0, 0.5)]
    assert set(points) == {"accuracy", "training/hptuning/metric"}
    # and they were in before the exit file told the executor the replica ended (the tuning
    # controller finalises a trial once its job ended)
    ended_at = datetime.fromisoformat(json.loads((chief_dir / "exit.json").read_text())["ended_at"])
    received = [
        message.occurred_at
        for message in await read_messages(
            nats_settings, bus.METRICS_RECEIVED, MetricPointsReceived
        )
        if message.run_id == run_id
    ]
    assert received
    assert max(received) <= ended_at


SDK_PROGRAM = """
import mldiag

# no run in the program: the call writes the library's file, which the launcher forwards
mldiag.report_hyperparameter_tuning_metric("fallback/loss", 1.5, global_step=4)
mldiag.report_hyperparameter_tuning_metric("fallback/loss", 1.25)  # no step: numbered 0, 1...
# a run (the job's, from MLDIAG_RUN_ID): recorded on it, the name unchanged
run = mldiag.init(heartbeat_interval=0, log_system_metrics=False)
run.log({"objective": 0.25}, step=3)
mldiag.metrics.record("objective", 0.375, step=4)
mldiag.report_hyperparameter_tuning_metric("objective", 0.5, global_step=5)
run.finish()
"""


@pytest.mark.parametrize(
    ("run_id", "launcher"),
    [
        ("880002", None),
        ("880003", [sys.executable, "-m", "mldiag.cli", "run"]),  # mldiag run --replica
    ],
    ids=["replica-launcher", "mldiag-run"],
)
async def test_the_sdk_call_and_plain_logging_reach_the_run_by_the_objectives_name(
    platform_apps: Platform,
    nats_settings: NatsSettings,
    tmp_path: Path,
    run_id: str,
    launcher: list[str] | None,
) -> None:
    await _create_run(platform_apps, run_id)
    process = _launch(
        platform_apps,
        run_id,
        "workerpool0-0",
        tmp_path / "attempt",
        [sys.executable, "-c", textwrap.dedent(SDK_PROGRAM)],
        launcher=launcher,
    )
    await _finished(process)
    points = await _points(nats_settings, run_id, {"objective": 3, "fallback/loss": 2})
    assert sorted((step, value) for _, step, value in points["objective"]) == [
        (3, 0.25),
        (4, 0.375),
        (5, 0.5),
    ]
    assert sorted((step, value) for _, step, value in points["fallback/loss"]) == [
        (0, 1.25),
        (4, 1.5),
    ]
