"""The official ``google-cloud-mldiagnostics`` SDK's self-hosted contract (DIAGON_BASE_URL),
driven exactly as its ``SelfHostedDiagonServiceClient`` 1.0.10 sends it: the upsert
``PATCH /v1/machineLearningRuns`` (no id, snake_case query parameters) and the phase change
``PATCH /v1/machineLearningRuns/{id}?update_mask=workload.state``.

When ``MLDIAG_TEST_OFFICIAL_SDK_PYTHON`` names a Python with the official SDK installed, the
last test also runs the SDK's own client against a real server in a subprocess.
"""

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas import bus
from mldiag_schemas.runs import RunCreated, RunPhase, RunPhaseChanged
from support import read_messages, served_on_port, serving, with_credentials

pytestmark = pytest.mark.connected

CREATE_MASK = (
    "display_name,creator,cluster_id,workload.workload_id,workload.display_name,logical_id"
)
LOGICAL_ID = "0b6f8c4e-3f7a-4d2b-9c1e-5a6b7c8d9e0f"


@pytest.fixture
def settings(
    nats_settings: NatsSettings, database_settings: DatabaseSettings, db_schema: str
) -> RunRegistrySettings:
    return RunRegistrySettings(nats=nats_settings, database=database_settings, db_schema=db_schema)


@pytest.fixture
async def api(
    settings: RunRegistrySettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(settings), api_tokens.headers()) as client:
        yield client


def _create_body(workload_id: str = "train-llama", cluster: str = "") -> dict[str, Any]:
    return {
        "logicalId": LOGICAL_ID,
        "displayName": "llama-pretrain",
        "creator": "CREATOR_MANUAL",
        "clusterId": cluster,
        "workload": {"workloadId": workload_id, "displayName": "llama-pretrain"},
    }


async def _upsert(api: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await api.patch(
        "/v1/machineLearningRuns",
        params={"update_mask": CREATE_MASK, "allow_missing": "true"},
        json=body,
    )


async def _set_state(api: httpx.AsyncClient, run_id: str, state: str) -> httpx.Response:
    return await api.patch(
        f"/v1/machineLearningRuns/{run_id}",
        params={"update_mask": "workload.state", "allow_missing": "false"},
        json={"name": f"machineLearningRuns/{run_id}", "workload": {"state": state}},
    )


async def test_upsert_then_phase_change_as_the_sdk_sends_them(
    api: httpx.AsyncClient, nats_settings: NatsSettings, settings: RunRegistrySettings
) -> None:
    created = await _upsert(api, _create_body(cluster="cluster-a"))
    assert created.status_code == 200, created.text
    answer = created.json()
    # the SDK adopts name's last segment as the run id, and clusterId
    assert answer["name"] == f"machineLearningRuns/{LOGICAL_ID}"
    assert answer["clusterId"] == "cluster-a"
    assert answer["workload"] == {
        "workloadId": "train-llama",
        "displayName": "llama-pretrain",
        "state": "STATE_RUNNING",
    }
    run = (await api.get(f"/v1/machineLearningRuns/{LOGICAL_ID}")).json()
    assert (run["displayName"], run["workloadId"], run["logicalId"]) == (
        "llama-pretrain",
        "train-llama",
        LOGICAL_ID,
    )
    assert run["creator"] == "CREATOR_MANUAL" and run["state"] == "STATE_ACTIVE"
    # no baseBlobPath sent: the run's artifacts go under the platform's storage root
    assert run["artifacts"]["gcsPath"] == settings.storage.url
    assert answer["baseBlobPath"] == settings.storage.url

    # every host and every restart upserts the same thing: same run, nothing rewritten
    again = await _upsert(api, _create_body(cluster="cluster-a"))
    assert again.json()["name"] == answer["name"]
    assert (await api.get(f"/v1/machineLearningRuns/{LOGICAL_ID}")).json()["etag"] == run["etag"]
    listing = (await api.get("/v1/machineLearningRuns")).json()["machineLearningRuns"]
    assert len(listing) == 1

    # the periodic RUNNING heartbeat changes nothing; SUCCEEDED completes the run
    running = await _set_state(api, LOGICAL_ID, "STATE_RUNNING")
    assert running.status_code == 200, running.text
    succeeded = await _set_state(api, LOGICAL_ID, "STATE_SUCCEEDED")
    assert succeeded.status_code == 200, succeeded.text
    assert succeeded.json()["workload"]["state"] == "STATE_SUCCEEDED"
    ended = (await api.get(f"/v1/machineLearningRuns/{LOGICAL_ID}")).json()
    assert ended["state"] == "STATE_COMPLETED" and ended["endTime"] is not None

    # a restart of the same workload resumes its run
    resumed = await _upsert(api, _create_body(cluster="cluster-a"))
    assert resumed.json()["workload"]["state"] == "STATE_RUNNING"
    failed = await _set_state(api, LOGICAL_ID, "STATE_FAILED")
    assert failed.status_code == 200
    final = (await api.get(f"/v1/machineLearningRuns/{LOGICAL_ID}")).json()
    assert final["state"] == "STATE_FAILED"
    assert final["errorDetails"]["reason"] == "WORKLOAD_FAILED"

    assert len(await read_messages(nats_settings, bus.RUN_CREATED, RunCreated)) == 1
    phases = await read_messages(nats_settings, bus.RUN_PHASE_CHANGED, RunPhaseChanged)
    assert [m.run.run_phase for m in phases] == [
        RunPhase.COMPLETED,
        RunPhase.ACTIVE,
        RunPhase.FAILED,
    ]


async def test_contract_mistakes_get_clear_codes(api: httpx.AsyncClient) -> None:
    no_logical = await _upsert(api, {"displayName": "x", "workload": {"workloadId": "w"}})
    assert (no_logical.status_code, no_logical.json()["error"]["code"]) == (
        400,
        "logical_id_required",
    )
    not_allowed = await api.patch(
        "/v1/machineLearningRuns", params={"allow_missing": "false"}, json=_create_body()
    )
    assert (not_allowed.status_code, not_allowed.json()["error"]["code"]) == (404, "run_not_found")
    missing = await _set_state(api, "no-such-run", "STATE_SUCCEEDED")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "run_not_found")
    await _upsert(api, _create_body())
    bad_state = await _set_state(api, LOGICAL_ID, "STATE_EXPLODED")
    assert (bad_state.status_code, bad_state.json()["error"]["code"]) == (400, "invalid_argument")
    # a logical id that is not a resource id gets a deterministic one
    odd = {**_create_body(), "logicalId": "Job/With Spaces"}
    first, second = await _upsert(api, odd), await _upsert(api, odd)
    assert first.json()["name"] == second.json()["name"]
    assert first.json()["name"] != f"machineLearningRuns/{LOGICAL_ID}"
    # deleted: the workload's run cannot come back under the same id
    assert (await api.delete(f"/v1/machineLearningRuns/{LOGICAL_ID}")).status_code == 200
    after_delete = await _upsert(api, _create_body())
    assert (after_delete.status_code, after_delete.json()["error"]["code"]) == (409, "run_deleted")


_SDK_SCRIPT = """
import json, sys
from google_cloud_mldiagnostics.clients.self_hosted_diagon_service_client import (
    SelfHostedDiagonServiceClient,
)
from google_cloud_mldiagnostics.api.mlrun import _generate_self_hosted_run_identifier

base, workload = sys.argv[1], sys.argv[2]
run_id = _generate_self_hosted_run_identifier(workload, "default", "")
client = SelfHostedDiagonServiceClient(base)
created = client.create_ml_run(
    name=run_id, display_name="sdk-run", run_phase="ACTIVE",
    workload_details={"id": workload}, artifacts={"gcsPath": "gs://bucket/runs"},
)
adopted = created["name"].strip("/").split("/")[-1]
client.update_ml_run(name=adopted, run_phase="ACTIVE")
done = client.update_ml_run(name=adopted, run_phase="COMPLETED")
print(json.dumps({"run_id": run_id, "adopted": adopted, "done": done}))
"""


async def test_the_official_sdk_client_itself(
    settings: RunRegistrySettings, api_tokens: ApiTokens
) -> None:
    python = os.environ.get("MLDIAG_TEST_OFFICIAL_SDK_PYTHON")
    if not python:
        pytest.skip(
            "set MLDIAG_TEST_OFFICIAL_SDK_PYTHON to a Python with google-cloud-mldiagnostics"
        )
    async with served_on_port(create_app(settings)) as base:
        process = await asyncio.create_subprocess_exec(
            python,
            "-c",
            _SDK_SCRIPT,
            with_credentials(base, api_tokens.editor),
            "train-42",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=60)
        assert process.returncode == 0, err.decode()
        result = json.loads(out.decode().strip().splitlines()[-1])
        # our run id is the SDK's own deterministic id, so its OTLP node_id matches
        assert result["adopted"] == result["run_id"]
        assert result["done"]["workload"]["state"] == "STATE_SUCCEEDED"
        async with httpx.AsyncClient(base_url=base, headers=api_tokens.headers()) as client:
            run = (await client.get(f"/v1/machineLearningRuns/{result['run_id']}")).json()
        assert run["state"] == "STATE_COMPLETED"
        assert run["artifacts"]["gcsPath"] == "gs://bucket/runs"
        assert run["workloadId"] == "train-42" and run["displayName"] == "sdk-run"


_SDK_RUN_SCRIPT = """
import sys
from google_cloud_mldiagnostics import machinelearning_run

run = machinelearning_run(
    name="sdk-e2e", run_workload_id=sys.argv[2], base_url=sys.argv[1],
    gcs_path="gs://bucket/sdk-e2e", metrics_record_interval_sec=0,
)
print(run.name, flush=True)
if sys.argv[3] == "fail":
    raise RuntimeError("training diverged")
"""


@pytest.mark.parametrize("outcome", ["complete", "fail"])
async def test_the_official_sdk_machinelearning_run(
    settings: RunRegistrySettings, api_tokens: ApiTokens, outcome: str
) -> None:
    python = os.environ.get("MLDIAG_TEST_OFFICIAL_SDK_PYTHON")
    if not python:
        pytest.skip("set MLDIAG_TEST_OFFICIAL_SDK_PYTHON to a Python with the SDK and jax")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIAGON_", "OTEL_"))}
    async with served_on_port(create_app(settings)) as base:
        process = await asyncio.create_subprocess_exec(
            python,
            "-c",
            _SDK_RUN_SCRIPT,
            with_credentials(base, api_tokens.editor),
            f"workload-{outcome}",
            outcome,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env, "JAX_PLATFORMS": "cpu"},
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
        assert (process.returncode == 0) == (outcome == "complete"), err.decode()[-3000:]
        run_id = out.decode().split()[-1]
        async with httpx.AsyncClient(base_url=base, headers=api_tokens.headers()) as client:
            run = (await client.get(f"/v1/machineLearningRuns/{run_id}")).json()
    assert run["displayName"] == "sdk-e2e", run
    assert run["workloadId"] == f"workload-{outcome}"
    assert run["logicalId"] == run_id
    assert run["state"] == ("STATE_COMPLETED" if outcome == "complete" else "STATE_FAILED")
