"""Every endpoint is closed without a token and open only to the roles that hold its
permission; tokens are created, listed, revoked and expire, across services.
"""

import asyncio
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import SecretStr
from starlette.routing import BaseRoute

from conftest import ApiTokens
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas.auth import Permission, Role
from mldiag_xprof_provisioner.app import create_app as create_xprof
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from support import serving, wait_until

pytestmark = pytest.mark.connected

_PATH_VALUES = {"project": "default", "location": "local", "metric": "loss"}


ANY_CALLER = "any authenticated caller"


def _permission(route: APIRoute) -> Permission | str | None:
    for dependency in route.dependant.dependencies:
        permission = getattr(dependency.call, "permission", None)
        if isinstance(permission, Permission):
            return permission
        if getattr(dependency.call, "any_caller", False):
            return ANY_CALLER
    return None


def _api_routes(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (included := getattr(route, "original_router", None)) is not None:
            yield from _api_routes(included.routes)  # FastAPI keeps included routers lazily


def _guarded_routes(app: FastAPI) -> list[tuple[str, str, Permission | str]]:
    """(method, concrete path, permission) of every API route; fails on an unguarded one."""
    found = []
    for route in _api_routes(app.routes):
        if not route.path.startswith("/v1/"):
            continue
        permission = _permission(route)
        assert permission is not None, f"{route.path} checks no permission"
        path = re.sub(
            r"\{(\w+)(?::path)?\}", lambda m: _PATH_VALUES.get(m.group(1), "x-1"), route.path
        )
        found.extend((method, path, permission) for method in sorted(route.methods))
    return found


@pytest.fixture
def registry_settings(
    nats_settings: NatsSettings, database_settings: DatabaseSettings, db_schema: str
) -> RunRegistrySettings:
    return RunRegistrySettings(nats=nats_settings, database=database_settings, db_schema=db_schema)


async def _walk(client: httpx.AsyncClient, app: FastAPI, tokens: ApiTokens) -> int:
    routes = _guarded_routes(app)
    for method, path, permission in routes:
        anonymous = await client.request(method, path, content=b"{}")
        assert anonymous.status_code == 401, (method, path, anonymous.text)
        assert anonymous.json()["error"]["code"] == "unauthenticated"
        for role in Role:
            allowed = permission == ANY_CALLER or permission in role.permissions
            if allowed and path.endswith(":watch"):
                continue  # a live stream never ends, and in-process calls read to the end
            answer = await client.request(method, path, content=b"{}", headers=tokens.headers(role))
            if allowed:
                assert answer.status_code not in (401, 403), (method, path, role, answer.text)
            else:
                assert answer.status_code == 403, (method, path, role, answer.text)
                assert answer.json()["error"]["code"] == "permission_denied"
    return len(routes)


async def test_every_endpoint_with_every_role_and_without_a_token(
    registry_settings: RunRegistrySettings,
    nats_settings: NatsSettings,
    api_tokens: ApiTokens,
    tmp_path: Path,
) -> None:
    registry = create_registry(registry_settings)
    ingestion = create_ingestion(
        IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0)
    )
    xprof = create_xprof(XProfProvisionerSettings(nats=nats_settings, work_dir=tmp_path))
    walked = 0
    for app in (registry, ingestion, xprof):
        async with serving(app) as client:
            walked += await _walk(client, app, api_tokens)
    assert walked >= 40  # both forms of every registry route, and the other services'


@pytest.fixture
async def platform(
    registry_settings: RunRegistrySettings, nats_settings: NatsSettings, api_tokens: ApiTokens
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """An admin's registry client and an anonymous ingestion client."""
    ingestion = create_ingestion(
        IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0)
    )
    async with (
        serving(create_registry(registry_settings), api_tokens.headers(Role.ADMIN)) as api,
        serving(ingestion) as door,
    ):
        yield api, door


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


WRITE = "/v1/machineLearningRuns/run-1/metrics:write"
POINTS = b'{"series": [{"name": "loss", "steps": [1], "values": [0.5]}]}'


async def test_a_token_works_everywhere_until_revoked(
    platform: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    api, ingestion = platform
    created = await api.post("/v1/apiTokens", json={"role": "editor", "displayName": "ci"})
    assert created.status_code == 200, created.text
    secret = created.json()["secret"]
    token = created.json()["token"]
    assert secret.startswith("mldiag_") and token["secretPrefix"] == secret[:12]
    assert token["state"] == "ACTIVE" and token["role"] == "editor"

    listed = (await api.get("/v1/apiTokens")).json()["apiTokens"]
    assert token["tokenId"] in {t["tokenId"] for t in listed}
    assert secret not in str(listed)  # only hashes are kept

    # as Bearer and as the password of HTTP Basic (a base URL with user:token@)
    assert (await api.get("/v1/machineLearningRuns", headers=_bearer(secret))).status_code == 200
    basic = await api.get("/v1/machineLearningRuns", auth=("anyone", secret))
    assert basic.status_code == 200, basic.text
    written = await ingestion.post(WRITE, content=POINTS, headers=_bearer(secret))
    assert written.status_code == 202, written.text

    revoked = await api.delete(f"/v1/apiTokens/{token['tokenId']}")
    assert revoked.json()["state"] == "REVOKED"
    refused = await api.get("/v1/machineLearningRuns", headers=_bearer(secret))
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthenticated"

    async def ingestion_answer() -> int:
        answer = await ingestion.post(WRITE, content=POINTS, headers=_bearer(secret))
        return answer.status_code

    # ingestion learns of the revocation through the token directory's watch
    assert await wait_until(ingestion_answer, lambda status: status == 401, timeout=5) == 401
    again = await api.delete(f"/v1/apiTokens/{token['tokenId']}")  # revoking twice is fine
    assert again.status_code == 200
    missing = await api.delete("/v1/apiTokens/tok-nope")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "token_not_found")


async def test_a_viewer_cannot_write_and_an_expired_token_is_refused(
    platform: tuple[httpx.AsyncClient, httpx.AsyncClient], api_tokens: ApiTokens
) -> None:
    api, ingestion = platform
    viewer = api_tokens.headers(Role.VIEWER)
    create = await api.post("/v1/machineLearningRuns", json={"displayName": "x"}, headers=viewer)
    assert create.status_code == 403
    assert create.json()["error"] == {
        "code": "permission_denied",
        "message": "the viewer role does not grant machineLearningRuns.create",
        "details": [{"permission": "machineLearningRuns.create", "role": "viewer"}],
    }
    write = await ingestion.post(WRITE, content=POINTS, headers=viewer)
    assert (write.status_code, write.json()["error"]["code"]) == (403, "permission_denied")
    tokens = await api.get("/v1/apiTokens", headers=api_tokens.headers(Role.EDITOR))
    assert tokens.status_code == 403  # managing tokens is for admins

    short = (await api.post("/v1/apiTokens", json={"role": "viewer", "ttlSeconds": 1})).json()
    assert (await api.get("/v1/apiTokens", headers=_bearer(short["secret"]))).status_code == 403
    await asyncio.sleep(1.1)
    expired = await api.get("/v1/machineLearningRuns", headers=_bearer(short["secret"]))
    assert expired.status_code == 401 and "expired" in expired.json()["error"]["message"]
    states = {
        t["tokenId"]: t["state"] for t in (await api.get("/v1/apiTokens")).json()["apiTokens"]
    }
    assert states[short["token"]["tokenId"]] == "EXPIRED"


async def test_bad_credentials_get_a_clear_401(
    platform: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    api, _ = platform
    for header, problem in (
        ("Token abc", "unsupported Authorization scheme"),
        ("Basic !!!", "not valid base64"),
        ("Bearer mldiag_nope", "not valid"),
    ):
        answer = await api.get("/v1/machineLearningRuns", headers={"Authorization": header})
        assert answer.status_code == 401
        assert problem in answer.json()["error"]["message"]


async def test_the_bootstrap_token_is_an_admin_and_survives_restarts(
    registry_settings: RunRegistrySettings,
) -> None:
    secret = "mldiag_bootstrap-secret-for-this-test"
    settings = registry_settings.model_copy(update={"bootstrap_admin_token": SecretStr(secret)})
    for _ in range(2):
        async with serving(create_registry(settings), _bearer(secret)) as api:
            listed = await api.get("/v1/apiTokens")
            assert listed.status_code == 200, listed.text
            [bootstrap] = [t for t in listed.json()["apiTokens"] if t["tokenId"] == "bootstrap"]
            assert bootstrap["role"] == "admin"
