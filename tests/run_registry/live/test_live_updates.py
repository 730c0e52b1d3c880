"""Live updates over a real HTTP server (real NATS and PostgreSQL): a run's stream says
``ready``, then hints after metrics are stored and after the run changes; the runs stream
hears about every run; a missing run is 404; a run's share link may follow that run only."""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.bus import Publisher
from mldiag_run_registry.app import create_app
from mldiag_schemas.auth import Role
from mldiag_schemas.telemetry import MetricPoint, MetricPointsReceived
from run_registry.helpers import RegistrySettings
from support import served_on_port

pytestmark = pytest.mark.connected

RUNS = "/v1/machineLearningRuns"
NOW = datetime(2026, 5, 1, tzinfo=UTC)


@pytest.fixture
async def api(
    registry_settings_with: RegistrySettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    """An editor's client of a registry served on a real port (streams need one)."""
    settings = registry_settings_with()
    async with (
        served_on_port(create_app(settings)) as url,
        httpx.AsyncClient(base_url=url, headers=api_tokens.headers(Role.EDITOR)) as client,
    ):
        yield client


class Stream:
    """The server-sent events of one open stream, read in the background."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()

    async def next(self, kind: str | None = None, within: float = 10.0) -> dict[str, Any]:
        """The next ``update`` (of ``kind``, when given), skipping others."""
        async with asyncio.timeout(within):
            while True:
                name, data = await self.events.get()
                if name == "update" and (kind is None or data["kind"] == kind):
                    return data


async def _read(response: httpx.Response, stream: Stream) -> None:
    name, data = "message", ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = line.removeprefix("data: ")
        elif line == "" and data:
            await stream.events.put((name, json.loads(data)))
            name, data = "message", ""


async def _open(client: httpx.AsyncClient, path: str, **kwargs: Any) -> AsyncIterator[Stream]:
    async with client.stream("GET", path, timeout=None, **kwargs) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = Stream()
        reader = asyncio.create_task(_read(response, stream))
        try:
            name, _ = await asyncio.wait_for(stream.events.get(), 10)
            assert name == "ready"
            yield stream
        finally:
            reader.cancel()


async def _new_run(client: httpx.AsyncClient, run_id: str) -> None:
    answer = await client.post(RUNS, json={"runId": run_id, "displayName": run_id})
    assert answer.status_code == 200, answer.text


def _points(run_id: str, name: str, steps: range) -> MetricPointsReceived:
    points = [MetricPoint(name=name, step=step, value=1.0, time=NOW) for step in steps]
    return MetricPointsReceived(run_id=run_id, batch_id=uuid.uuid4(), chunk=0, points=points)


async def test_a_run_stream_hints_once_metrics_are_stored_and_when_the_run_changes(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    await _new_run(api, "live-run")
    await _new_run(api, "quiet-run")
    async for stream in _open(api, f"{RUNS}/live-run:watch"):
        await publisher.publish_many(
            [_points("quiet-run", "loss", range(5)), _points("live-run", "loss", range(10))]
        )
        hint = await stream.next("metrics")
        assert hint == {"runId": "live-run", "kind": "metrics", "metrics": ["loss"]}
        # The hint follows the commit: a read now sees the points.
        listed = (await api.get(f"{RUNS}/live-run/metrics")).json()["metrics"]
        assert [(m["name"], m["pointCount"]) for m in listed] == [("loss", 10)]

        etag = (await api.get(f"{RUNS}/live-run")).json()["etag"]
        renamed = await api.patch(
            f"{RUNS}/live-run",
            params={"updateMask": "displayName"},
            json={"displayName": "new", "etag": etag},
        )
        assert renamed.status_code == 200, renamed.text
        assert (await stream.next("run"))["runId"] == "live-run"
        while not stream.events.empty():  # nothing about the other run ever came
            _, data = stream.events.get_nowait()
            assert data.get("runId", "live-run") == "live-run"


async def test_the_runs_stream_hears_about_every_run(api: httpx.AsyncClient) -> None:
    async for stream in _open(api, f"{RUNS}:watch"):
        await _new_run(api, "fresh-run")
        assert await stream.next("run") == {"runId": "fresh-run", "kind": "run", "metrics": []}


async def test_a_missing_run_has_no_stream(api: httpx.AsyncClient) -> None:
    answer = await api.get(f"{RUNS}/ghost-run:watch")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "run_not_found"


async def test_a_share_link_follows_its_run_only(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    await _new_run(api, "shared-live")
    await _new_run(api, "private-live")
    token = (
        await api.post("/v1/shareLinks", json={"resource": "machineLearningRuns/shared-live"})
    ).json()["token"]
    holder = {"Authorization": f"Bearer {token}"}
    refused = await api.get(f"{RUNS}/private-live:watch", headers=holder)
    assert refused.status_code == 403
    assert (await api.get(f"{RUNS}:watch", headers=holder)).status_code == 403
    async for stream in _open(api, f"{RUNS}/shared-live:watch", headers=holder):
        await publisher.publish(_points("shared-live", "accuracy", range(3)))
        assert (await stream.next("metrics"))["metrics"] == ["accuracy"]
