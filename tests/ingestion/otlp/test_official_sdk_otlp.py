"""The headline: the real official ``google-cloud-mldiagnostics`` SDK, in a subprocess,
creates its run in run-registry (``DIAGON_BASE_URL``) and exports its metrics and its user
configs (an OTLP log record) over OTLP/gRPC to ingestion (``OTEL_EXPORTER_OTLP_ENDPOINT``);
the points come back from the registry's metrics API with their steps and labels, and the
configs, still typed, on the run. Skipped unless ``MLDIAG_TEST_OFFICIAL_SDK_PYTHON``
names a Python with the SDK (``[otel]``) and jax installed.
"""

import asyncio
import os
import subprocess
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas.auth import Role
from support import served_on_port, serving, wait_until, with_credentials

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# Each step is recorded, then left for a few export intervals so its gauge is collected
# before the next step overwrites it (OTLP gauges carry the last value per collection).
_SDK_SCRIPT = """
import sys, time
from google_cloud_mldiagnostics import machinelearning_run, metrics

run = machinelearning_run(
    name="otlp-e2e", run_workload_id=sys.argv[2], base_url=sys.argv[1],
    gcs_path="gs://bucket/otlp-e2e", metrics_record_interval_sec=0,
    configs={"lr": 0.01, "layers": 4, "optimizer": {"name": "adam"}, "schedule": "cosine"},
)
print(run.name, flush=True)
for step in (1, 2, 3):
    metrics.record("loss", 1.0 / step, step=step, labels={"phase": "train"})
    metrics.record("learning_rate", 0.01 * step, step=step)
    time.sleep(0.8)
"""


async def _series(
    base: str, run_id: str, metric: str, headers: dict[str, str]
) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=base, headers=headers) as client:
        response = await client.get(f"/v1/machineLearningRuns/{run_id}/metrics/{metric}")
    if response.status_code != 200:
        return []
    points: list[dict[str, Any]] = response.json()["points"]
    return points


async def _user_configs(base: str, run_id: str, headers: dict[str, str]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, headers=headers) as client:
        response = await client.get(f"/v1/machineLearningRuns/{run_id}")
    configs: dict[str, Any] = response.json()["configs"]["userConfigs"]
    return configs


async def test_the_official_sdk_exports_metrics_to_our_otlp_receiver(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    api_tokens: ApiTokens,
) -> None:
    python = os.environ.get("MLDIAG_TEST_OFFICIAL_SDK_PYTHON")
    if not python:
        pytest.skip("set MLDIAG_TEST_OFFICIAL_SDK_PYTHON to a Python with the SDK and jax")
    registry = RunRegistrySettings(
        nats=nats_settings, database=database_settings, db_schema=db_schema
    )
    ingestion_app = create_ingestion(
        IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIAGON_", "OTEL_"))}
    async with served_on_port(create_registry(registry)) as base, serving(ingestion_app):
        grpc_port = ingestion_app.state.otlp_grpc_port
        process = await asyncio.create_subprocess_exec(
            python,
            "-c",
            _SDK_SCRIPT,
            with_credentials(base, api_tokens.editor),
            "otlp-workload",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={
                **env,
                "JAX_PLATFORMS": "cpu",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{grpc_port}",
                "OTEL_EXPORTER_OTLP_INSECURE": "true",
                # values are URL-encoded: the space of "Bearer <token>" is %20
                "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{api_tokens.editor}",
                "OTEL_METRIC_EXPORT_INTERVAL": "200",  # ms; the default is 60 s
            },
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=150)
        assert process.returncode == 0, err.decode()[-3000:]
        run_id = out.decode().split()[-1]
        viewer = api_tokens.headers(Role.VIEWER)

        loss = await wait_until(
            lambda: _series(base, run_id, "loss", viewer), lambda points: len(points) >= 3
        )
        rate = await wait_until(
            lambda: _series(base, run_id, "learning_rate", viewer), lambda points: len(points) >= 3
        )
        configs = await wait_until(lambda: _user_configs(base, run_id, viewer), bool)
    # the SDK sent every value as str(value); they are typed again
    assert configs == {"lr": 0.01, "layers": 4, "optimizer": {"name": "adam"}, "schedule": "cosine"}
    # every step once, although each gauge was exported at several collections
    assert [(p["step"], p["value"]) for p in loss] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    assert [(p["step"], round(p["value"], 6)) for p in rate] == [(1, 0.01), (2, 0.02), (3, 0.03)]
    # the user's label, plus the two the SDK adds to every point; node_id is the run itself
    assert {tuple(sorted(p["labels"].items())) for p in loss} == {
        (("location", "us-central1"), ("phase", "train"), ("unit", "1"))
    }
    assert all("phase" not in p["labels"] for p in rate)
