"""A capture nobody finishes (no xprof-provisioner here) fails as ``capture_timed_out`` once
its trace length plus the grace has passed, its hosts FAILED; one not yet due stays pending
(real NATS and PostgreSQL)."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.settings import StorageSettings
from mldiag_run_registry.app import create_app
from mldiag_schemas.auth import Role
from run_registry.helpers import RegistrySettings
from run_registry.profiles.helpers import STORAGE_ROOT, new_run, register
from support import serving

pytestmark = pytest.mark.connected

RUNS = "/v1/machineLearningRuns"


@pytest.fixture
async def api(
    registry_settings_with: RegistrySettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    """An editor's registry that gives captures half a second past their trace length."""
    settings = registry_settings_with(
        storage=StorageSettings(url=STORAGE_ROOT),
        capture_grace_seconds=0.5,
        capture_sweep_seconds=0.1,
    )
    async with serving(create_app(settings), api_tokens.headers(Role.EDITOR)) as client:
        yield client


async def _capture(api: httpx.AsyncClient, run_id: str, **body: Any) -> dict[str, Any]:
    answer = await api.post(f"{RUNS}/{run_id}/profilerSessions:capture", json=body)
    assert answer.status_code == 200, answer.text
    operation: dict[str, Any] = answer.json()
    assert not operation["done"]
    return operation


async def _operation(api: httpx.AsyncClient, name: str) -> dict[str, Any]:
    answer = await api.get(f"/v1/operations/{name.rsplit('/', 1)[-1]}")
    operation: dict[str, Any] = answer.json()
    return operation


async def test_an_unanswered_capture_times_out_and_a_later_one_waits(
    api: httpx.AsyncClient,
) -> None:
    await new_run(api, "unanswered")
    await register(api, "unanswered", "host-0")
    brief = await _capture(api, "unanswered", sessionId="brief", durationSeconds=0.3)
    long = await _capture(api, "unanswered", sessionId="long", durationSeconds=300)

    waited = await api.post(
        f"/v1/operations/{brief['name'].rsplit('/', 1)[-1]}:wait", json={"timeout": "10s"}
    )
    operation = waited.json()
    assert operation["done"], operation
    assert operation["error"]["code"] == "capture_timed_out"
    assert "xprof-provisioner" in operation["error"]["message"]
    session = (await api.get(f"{RUNS}/unanswered/profilerSessions/brief")).json()
    assert session["phase"] == "FAILED"
    assert [(h["host"], h["phase"]) for h in session["hosts"]] == [("host-0", "FAILED")]

    assert not (await _operation(api, long["name"]))["done"]  # 300 s of tracing not over yet
