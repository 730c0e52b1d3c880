"""A token held to one run (``TokenGrant.run_id``, the token of a training job's replicas)
reads and writes that run only, in every service that authorises requests: the registry,
ingestion's HTTP routes, and its OTLP receiver (HTTP and gRPC), where the runs are in the
body. Against the real apps, NATS and PostgreSQL."""

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from starlette.requests import Request

from conftest import ApiTokens
from ingestion.otlp.otlp_messages import sdk_export
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.auth import (
    RUN_SCOPED_PERMISSIONS,
    RunScope,
    new_secret,
    open_token_directory,
    secret_hash,
)
from mldiag_platform.bus import connect_bus
from mldiag_platform.errors import PermissionDenied
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas.auth import Permission, Role, TokenGrant
from mldiag_schemas.bus import METRICS_RECEIVED
from mldiag_schemas.telemetry import MetricPointsReceived
from support import read_messages, serving

MINE, OTHER = "4242", "4343"
EXPORT = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
POINTS = {"series": [{"name": "loss", "steps": [1], "values": [0.5]}]}


def _request(path: str, **path_params: str) -> Request:
    return Request(
        {
            "type": "http",
            "method": "GET",
            "path": path,
            "query_string": b"",
            "headers": [],
            "path_params": path_params,
        }
    )


def test_a_run_scope_holds_what_its_role_grants_about_one_run() -> None:
    editor = RunScope(MINE, Role.EDITOR)
    assert editor.permissions == RUN_SCOPED_PERMISSIONS
    assert Permission.RUNS_LIST not in editor.permissions
    assert Permission.RUNS_DELETE not in editor.permissions
    assert Permission.TOKENS_CREATE not in RunScope(MINE, Role.ADMIN).permissions
    viewer = RunScope(MINE, Role.VIEWER)
    assert Permission.METRICS_WRITE not in viewer.permissions
    assert Permission.RUNS_GET in viewer.permissions


def test_a_run_scope_admits_paths_naming_its_run_or_its_job() -> None:
    scope = RunScope(MINE, Role.EDITOR)
    scope.admit(Permission.RUNS_GET, _request("/v1/machineLearningRuns/4242", run_id=MINE))
    scope.admit(Permission.CUSTOM_JOBS_GET, _request("/v1/customJobs/4242", job_id=MINE))
    with pytest.raises(PermissionDenied, match="4343"):
        scope.admit(Permission.RUNS_GET, _request("/v1/machineLearningRuns/4343", run_id=OTHER))
    with pytest.raises(PermissionDenied, match="names no run"):
        scope.admit(Permission.RUNS_GET, _request("/v1/machineLearningRuns"))


# --- connected --------------------------------------------------------------------------------


@dataclass
class Platform:
    api: httpx.AsyncClient
    """The registry, as an admin."""
    ingestion: httpx.AsyncClient
    """Ingestion, anonymous (each call names its token)."""
    grpc: grpc.aio.Channel
    scoped: dict[str, str]
    """The Authorization header of an editor token held to run MINE."""


@pytest.fixture
async def platform(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    api_tokens: ApiTokens,
) -> AsyncIterator[Platform]:
    secret = new_secret()
    async with (
        connect_bus(nats_settings, "test-run-token") as bus,
        open_token_directory(bus) as directory,
    ):
        grant = TokenGrant(token_id="replica-4242", role=Role.EDITOR, run_id=MINE)
        await directory.grant(secret_hash(secret), grant)
    registry = create_registry(
        RunRegistrySettings(nats=nats_settings, database=database_settings, db_schema=db_schema)
    )
    ingestion = create_ingestion(
        IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0)
    )
    async with (
        serving(registry, api_tokens.headers(Role.ADMIN)) as api,
        serving(ingestion) as door,
    ):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{ingestion.state.otlp_grpc_port}")
        try:
            for run_id in (MINE, OTHER):
                created = await api.post(
                    "/v1/machineLearningRuns", json={"runId": run_id, "displayName": run_id}
                )
                assert created.status_code == 200, created.text
            yield Platform(api, door, channel, {"Authorization": f"Bearer {secret}"})
        finally:
            await channel.close()


def _denied(response: httpx.Response, run: str | None = None) -> None:
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "permission_denied"
    assert MINE in error["message"]
    if run is not None:
        assert run in error["message"]


@pytest.mark.connected
async def test_the_registry_serves_a_run_token_its_own_run_only(platform: Platform) -> None:
    api, scoped = platform.api, platform.scoped
    mine = f"/v1/machineLearningRuns/{MINE}"
    run = await api.get(mine, headers=scoped)
    assert run.status_code == 200, run.text
    full = f"/v1/projects/default/locations/local/machineLearningRuns/{MINE}"
    assert (await api.get(full + "/heartbeats", headers=scoped)).status_code == 200
    assert (await api.get(mine + "/metrics", headers=scoped)).status_code == 200
    updated = await api.patch(
        mine, json={"etag": run.json()["etag"], "labels": {"a": "b"}}, headers=scoped
    )
    assert updated.status_code == 200, updated.text

    _denied(await api.get(f"/v1/machineLearningRuns/{OTHER}", headers=scoped), OTHER)
    _denied(await api.get(f"/v1/machineLearningRuns/{OTHER}/metrics", headers=scoped), OTHER)
    _denied(await api.get("/v1/machineLearningRuns", headers=scoped))  # listing: many runs
    _denied(await api.get("/v1/monitoredEvents", headers=scoped))
    _denied(await api.post("/v1/machineLearningRuns", json={"displayName": "x"}, headers=scoped))
    _denied(await api.delete(mine, headers=scoped))  # its own run, but not deleting it
    _denied(await api.get("/v1/apiTokens", headers=scoped))
    _denied(await api.post("/v1/shareLinks", json={"resource": mine[4:]}, headers=scoped))

    caller = (await api.get("/v1/caller", headers=scoped)).json()
    assert set(caller["permissions"]) == {p.value for p in RUN_SCOPED_PERMISSIONS}


@pytest.mark.connected
async def test_ingestion_takes_a_run_tokens_writes_to_its_run_only(
    platform: Platform, nats_settings: NatsSettings
) -> None:
    door, scoped = platform.ingestion, platform.scoped
    written = await door.post(
        f"/v1/machineLearningRuns/{MINE}/metrics:write", json=POINTS, headers=scoped
    )
    assert written.status_code == 202, written.text
    beat = await door.post(
        f"/v1/machineLearningRuns/{MINE}:heartbeat",
        json={"host": "workerpool0-0", "pid": 7, "intervalSeconds": 5},
        headers=scoped,
    )
    assert beat.status_code == 204, beat.text
    signal = await door.post(
        f"/v1/projects/default/locations/local/machineLearningRuns/{MINE}:reportSignal",
        json={"kind": "PROCESS_EXITED", "host": "workerpool0-0", "exitCode": 1},
        headers=scoped,
    )
    assert signal.status_code == 204, signal.text

    for path in (
        f"/v1/machineLearningRuns/{OTHER}/metrics:write",
        f"/v1/machineLearningRuns/{OTHER}:heartbeat",
        f"/v1/projects/default/locations/local/machineLearningRuns/{OTHER}:reportSignal",
    ):
        _denied(await door.post(path, json=POINTS, headers=scoped), OTHER)

    # OTLP names its runs in the body: one run that is not the token's refuses the export.
    protobuf = {**scoped, "Content-Type": "application/x-protobuf"}
    mine = await door.post(
        "/v1/metrics", content=sdk_export(MINE, 2, loss=0.4).SerializeToString(), headers=protobuf
    )
    assert mine.status_code == 200, mine.text
    both = ExportMetricsServiceRequest()
    both.resource_metrics.extend(sdk_export(MINE, 3, loss=0.3).resource_metrics)
    both.resource_metrics.extend(sdk_export(OTHER, 3, loss=9.0).resource_metrics)
    _denied(await door.post("/v1/metrics", content=both.SerializeToString(), headers=protobuf))

    call = platform.grpc.unary_unary(
        EXPORT,
        request_serializer=ExportMetricsServiceRequest.SerializeToString,
        response_deserializer=ExportMetricsServiceResponse.FromString,
    )
    metadata = (("authorization", scoped["Authorization"]),)
    await call(sdk_export(MINE, 4, loss=0.2), timeout=10, metadata=metadata)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call(sdk_export(OTHER, 4, loss=9.0), timeout=10, metadata=metadata)
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert OTHER in (refused.value.details() or "")

    stored = await read_messages(nats_settings, METRICS_RECEIVED, MetricPointsReceived)
    steps = sorted((m.run_id, p.step) for m in stored for p in m.points if p.name == "loss")
    assert steps == [(MINE, 1), (MINE, 2), (MINE, 4)]  # nothing of the refused exports
