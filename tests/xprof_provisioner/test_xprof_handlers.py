"""The HTTP API over the real router and error boundary, with the service on fakes."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from mldiag_platform.http import create_http_app
from mldiag_schemas.auth import Role
from mldiag_xprof_provisioner import handlers
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from support import StaticTokens
from xprof_provisioner.xprof_fakes import World


@asynccontextmanager
async def _no_connections(_app: FastAPI) -> AsyncIterator[None]:
    yield


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, World]]:
    world = World(tmp_path, max_instances=2)
    app = create_http_app("xprof-provisioner", _no_connections, {})
    app.state.service = world.service
    tokens = app.state.tokens = StaticTokens()
    app.include_router(handlers.router)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://test", headers=tokens.headers(Role.EDITOR)
    ) as client:
        yield client, world


async def test_start_get_list_and_stop(api: tuple[httpx.AsyncClient, World]) -> None:
    client, _ = api
    created = await client.post("/v1/xprofInstances", json={"runId": "run-1"})
    assert created.status_code == 201
    body = created.json()
    assert body["state"] == "RUNNING"
    assert body["runId"] == "run-1"
    assert body["url"].startswith("http://xprof.example:")
    instance_id = body["instanceId"]

    again = await client.post("/v1/xprofInstances", json={"runId": "run-1"})
    assert again.status_code == 200
    assert again.json()["instanceId"] == instance_id

    got = await client.get(f"/v1/xprofInstances/{instance_id}")
    assert got.status_code == 200
    assert got.json()["name"] == f"xprofInstances/{instance_id}"

    listed = await client.get("/v1/xprofInstances")
    assert listed.status_code == 200
    assert [i["instanceId"] for i in listed.json()["xprofInstances"]] == [instance_id]

    deleted = await client.delete(f"/v1/xprofInstances/{instance_id}")
    assert deleted.status_code == 200
    assert deleted.json()["state"] == "STOPPED"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"runId": "Bad.Run"}', "invalid_run_id"),
        (b'{"runId": ""}', "invalid_run_id"),
        (b"{}", "invalid_start_request"),
        (b'{"runId": "r", "extra": 1}', "invalid_start_request"),
        (b"not json", "invalid_start_request"),
        (b"", "invalid_start_request"),
        (b'{"runId": "' + b"a" * 70_000 + b'"}', "invalid_start_request"),
    ],
)
async def test_bad_start_requests_are_400_with_stable_codes(
    api: tuple[httpx.AsyncClient, World], body: bytes, code: str
) -> None:
    client, world = api
    response = await client.post(
        "/v1/xprofInstances", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert world.launcher.launched == []


async def test_unknown_instances_are_404(api: tuple[httpx.AsyncClient, World]) -> None:
    client, _ = api
    for response in (
        await client.get("/v1/xprofInstances/nope"),
        await client.delete("/v1/xprofInstances/nope"),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


async def test_capacity_and_start_failures_map_to_their_codes(
    api: tuple[httpx.AsyncClient, World],
) -> None:
    client, world = api
    world.launcher.behaviour = "exit"
    failed = await client.post("/v1/xprofInstances", json={"runId": "run-0"})
    assert failed.status_code == 503
    error = failed.json()["error"]
    assert error["code"] == "xprof_start_failed"
    assert "boom" in error["message"]
    assert error["details"][0]["instance"].startswith("xprofInstances/")

    world.launcher.behaviour = "ready"
    for run in ("run-1", "run-2"):
        assert (await client.post("/v1/xprofInstances", json={"runId": run})).status_code == 201
    refused = await client.post("/v1/xprofInstances", json={"runId": "run-3"})
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_instances"


async def test_the_start_body_is_documented(api: tuple[httpx.AsyncClient, World]) -> None:
    client, _ = api
    spec = (await client.get("/openapi.json")).json()
    start = spec["paths"]["/v1/xprofInstances"]["post"]
    schema = start["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["runId"]
    assert {"200", "201", "400", "429", "503"} <= set(start["responses"])


def test_settings_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = XProfProvisionerSettings()
    assert (defaults.host, defaults.port) == ("127.0.0.1", 8084)
    assert defaults.work_dir == Path(".mldiag/xprof")
    assert defaults.instance_ports == range(9100, 9200)
    assert (defaults.max_instances, defaults.idle_timeout_seconds) == (4, 900.0)
    assert defaults.startup_timeout_seconds == 30.0
    assert defaults.advertised_host == "127.0.0.1"
    monkeypatch.setenv("MLDIAG_XPROF_PROVISIONER_MAX_INSTANCES", "9")
    monkeypatch.setenv("MLDIAG_XPROF_PROVISIONER_FIRST_INSTANCE_PORT", "20000")
    monkeypatch.setenv("MLDIAG_NATS_NAMESPACE", "other")
    configured = XProfProvisionerSettings()
    assert configured.max_instances == 9
    assert configured.instance_ports.start == 20000
    assert configured.nats.namespace == "other"
    with pytest.raises(ValueError, match="past 65535"):
        XProfProvisionerSettings(first_instance_port=65500, instance_port_count=100)
