"""Share links through the API (real NATS and PostgreSQL): created for a run, an event or a
session; the holder reads exactly that and nothing else (other runs, lists, writes, a
run's other parts); expiry and revocation end it at once; forged tokens are refused."""

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.bus import Publisher
from mldiag_run_registry.app import create_app
from mldiag_schemas.auth import Role
from mldiag_schemas.events import WorkloadEventOpened
from run_registry.events.test_monitored_events_api import event, new_run
from run_registry.helpers import RegistrySettings
from support import serving, wait_until

pytestmark = pytest.mark.connected

RUNS = "/v1/machineLearningRuns"


@pytest.fixture
async def registry(
    registry_settings_with: RegistrySettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    """An editor's client of a registry whose links point at ``https://mldiag.example``."""
    settings = registry_settings_with(public_url="https://mldiag.example")
    async with serving(create_app(settings), api_tokens.headers(Role.EDITOR)) as client:
        yield client


def _holder(client: httpx.AsyncClient, token: str) -> httpx.AsyncClient:
    """A client sending only the share token (no account)."""
    return httpx.AsyncClient(
        transport=client._transport,  # the same app, in-process
        base_url="http://test",
        headers={"Authorization": f"Bearer {token}"},
    )


async def _share(client: httpx.AsyncClient, resource: str, **body: Any) -> dict[str, Any]:
    answer = await client.post("/v1/shareLinks", json={"resource": resource, **body})
    assert answer.status_code == 200, answer.text
    created: dict[str, Any] = answer.json()
    return created


def _code(answer: httpx.Response) -> str:
    code: str = answer.json()["error"]["code"]
    return code


async def test_a_run_link_reads_that_run_and_nothing_else(registry: httpx.AsyncClient) -> None:
    await new_run(registry, "shared-run")
    await new_run(registry, "other-run")
    created = await _share(registry, "machineLearningRuns/shared-run", displayName="for review")
    link = created["shareLink"]
    assert link["kind"] == "RUN"
    assert link["resource"] == "projects/default/locations/local/machineLearningRuns/shared-run"
    assert link["state"] == "ACTIVE"
    assert link["createdBy"] == "test-editor"
    assert created["url"] == "https://mldiag.example/console/#/share/" + created["token"]

    async with _holder(registry, created["token"]) as holder:
        caller = (await holder.get("/v1/caller")).json()
        assert caller["role"] == "shared"
        assert caller["share"]["linkId"] == link["linkId"]
        assert "machineLearningRuns.list" not in caller["permissions"]
        for path in (
            f"{RUNS}/shared-run",
            f"{RUNS}/shared-run/metrics",
            f"{RUNS}/shared-run/configs",
            f"{RUNS}/shared-run/monitoredEvents",
            f"{RUNS}/shared-run/analyses",
            f"{RUNS}/shared-run/profilerSessions",
            "/v1/projects/default/locations/local/machineLearningRuns/shared-run",
        ):
            answer = await holder.get(path)
            assert answer.status_code == 200, (path, answer.text)

        outside = {
            f"{RUNS}/other-run": 403,
            f"{RUNS}/other-run/metrics": 403,
            f"{RUNS}": 403,  # the list of runs
            f"{RUNS}:compareMetrics?runs=shared-run,other-run&metric=loss": 403,
            f"{RUNS}:diffConfigs?base=shared-run&other=other-run": 403,
            "/v1/monitoredEvents": 403,
            f"{RUNS}/shared-run/profilerTargets": 403,  # where its workers listen
            "/v1/projects/elsewhere/locations/local/machineLearningRuns/shared-run": 403,
            "/v1/shareLinks": 403,
            "/v1/apiTokens": 403,
        }
        for path, status in outside.items():
            answer = await holder.get(path)
            assert answer.status_code == status, (path, answer.text)
            assert _code(answer) in ("outside_share_scope", "permission_denied"), path
        writes = [
            holder.patch(f"{RUNS}/shared-run", json={"displayName": "changed"}),
            holder.delete(f"{RUNS}/shared-run"),
            holder.post(f"{RUNS}/shared-run/profilerSessions:capture", json={}),
            holder.post("/v1/shareLinks", json={"resource": "machineLearningRuns/other-run"}),
        ]
        for answer in await asyncio.gather(*writes):
            assert answer.status_code == 403, answer.text
            assert _code(answer) == "permission_denied"
    assert (await registry.get(f"{RUNS}/shared-run")).json()["displayName"] == "shared-run"


async def test_an_event_link_reads_the_event_and_its_analyses_only(
    registry: httpx.AsyncClient, publisher: Publisher
) -> None:
    await new_run(registry, "evented")
    shared, other = event("evented"), event("evented")
    await publisher.publish_many([WorkloadEventOpened(event=e) for e in (shared, other)])
    path = f"{RUNS}/evented/monitoredEvents"
    await wait_until(lambda: _served(registry, f"{path}/{other.event_id}"))

    created = await _share(
        registry, f"machineLearningRuns/evented/monitoredEvents/{shared.event_id}"
    )
    assert created["shareLink"]["kind"] == "EVENT"
    async with _holder(registry, created["token"]) as holder:
        assert (await holder.get(f"{path}/{shared.event_id}")).status_code == 200
        assert (await holder.get(f"{RUNS}/evented")).status_code == 200  # the page header
        mine = await holder.get(f"{RUNS}/evented/analyses", params={"event": str(shared.event_id)})
        assert mine.status_code == 200
        for refused in (
            await holder.get(f"{path}/{other.event_id}"),
            await holder.get(path),
            await holder.get(f"{RUNS}/evented/analyses"),
            await holder.get(f"{RUNS}/evented/analyses", params={"event": str(other.event_id)}),
            await holder.get(f"{RUNS}/evented/metrics"),
        ):
            assert refused.status_code == 403, refused.text
            assert _code(refused) == "outside_share_scope"


async def _served(client: httpx.AsyncClient, path: str) -> bool:
    return (await client.get(path)).status_code == 200


async def test_revoking_a_link_ends_it_on_the_next_call(registry: httpx.AsyncClient) -> None:
    await new_run(registry, "revoked-run")
    created = await _share(registry, "machineLearningRuns/revoked-run")
    link_id = created["shareLink"]["linkId"]
    async with _holder(registry, created["token"]) as holder:
        assert (await holder.get(f"{RUNS}/revoked-run")).status_code == 200
        revoked = await registry.delete(f"/v1/shareLinks/{link_id}")
        assert revoked.status_code == 200
        assert revoked.json()["state"] == "REVOKED"
        after = await holder.get(f"{RUNS}/revoked-run")
        assert after.status_code == 401
        assert _code(after) == "share_link_revoked"
    again = await registry.delete(f"/v1/shareLinks/{link_id}")
    assert again.json()["revokeTime"] == revoked.json()["revokeTime"]
    listed = await registry.get(
        "/v1/shareLinks", params={"resource": "machineLearningRuns/revoked-run"}
    )
    assert [link["state"] for link in listed.json()["shareLinks"]] == ["REVOKED"]
    missing = await registry.delete("/v1/shareLinks/share-nope")
    assert missing.status_code == 404
    assert _code(missing) == "share_link_not_found"


async def test_an_expired_link_is_refused(registry: httpx.AsyncClient) -> None:
    await new_run(registry, "brief-run")
    created = await _share(registry, "machineLearningRuns/brief-run", ttlSeconds=1)
    await asyncio.sleep(1.1)
    async with _holder(registry, created["token"]) as holder:
        answer = await holder.get(f"{RUNS}/brief-run")
    assert answer.status_code == 401
    assert _code(answer) == "share_link_expired"
    listed = await registry.get("/v1/shareLinks")
    assert listed.json()["shareLinks"][0]["state"] == "EXPIRED"


async def test_a_forged_or_altered_token_is_refused(registry: httpx.AsyncClient) -> None:
    await new_run(registry, "forged-run")
    token = (await _share(registry, "machineLearningRuns/forged-run"))["token"]
    for bad in (token[:-2] + "xx", token + "x", "mldiag_share_e30.AAAA", "mldiag_share_"):
        async with _holder(registry, bad) as holder:
            answer = await holder.get(f"{RUNS}/forged-run")
        assert answer.status_code == 401, bad
        assert _code(answer) == "share_link_invalid", bad


async def test_what_cannot_be_shared_is_refused_clearly(registry: httpx.AsyncClient) -> None:
    await new_run(registry, "real-run")
    cases = {
        "machineLearningRuns/ghost-run": (404, "run_not_found"),
        f"machineLearningRuns/real-run/monitoredEvents/{uuid.uuid4()}": (404, "event_not_found"),
        "machineLearningRuns/real-run/profilerSessions/nope": (404, "session_not_found"),
        "machineLearningRuns/real-run/monitoredEvents/not-a-uuid": (400, "invalid_share_resource"),
        "apiTokens/bootstrap": (400, "invalid_share_resource"),
        "machineLearningRuns/Bad_Id": (400, "invalid_share_resource"),
    }
    for resource, (status, code) in cases.items():
        answer = await registry.post("/v1/shareLinks", json={"resource": resource})
        assert (answer.status_code, _code(answer)) == (status, code), resource
    too_long = await registry.post(
        "/v1/shareLinks", json={"resource": "machineLearningRuns/real-run", "ttlSeconds": 10**9}
    )
    assert too_long.status_code == 400


async def test_a_viewer_cannot_share(registry: httpx.AsyncClient, api_tokens: ApiTokens) -> None:
    await new_run(registry, "viewed-run")
    answer = await registry.post(
        "/v1/shareLinks",
        json={"resource": "machineLearningRuns/viewed-run"},
        headers=api_tokens.headers(Role.VIEWER),
    )
    assert answer.status_code == 403
    caller = await registry.get("/v1/caller", headers=api_tokens.headers(Role.VIEWER))
    assert caller.json()["role"] == "viewer"
    assert "shareLinks.create" not in caller.json()["permissions"]
