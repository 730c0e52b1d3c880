"""A run's configs over HTTP and from the bus, against real PostgreSQL and NATS: the flat
view, the diff of two runs, and configs reported by workloads merged into their run.
"""

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.runs import Configs, RunConfigsReported, RunUpdated
from support import read_messages, read_stream, wait_until

pytestmark = pytest.mark.connected

RUNS = "/v1/machineLearningRuns"


async def _create(api: httpx.AsyncClient, run_id: str, configs: dict[str, Any]) -> None:
    response = await api.post(
        RUNS, json={"runId": run_id, "displayName": run_id, "configs": configs}
    )
    assert response.status_code == 200, response.text


def _report(run_id: str, **sections: dict[str, Any]) -> RunConfigsReported:
    return RunConfigsReported(
        event_id=uuid.uuid4(),
        occurred_at=datetime.now(UTC),
        run_id=run_id,
        configs=Configs.model_validate(sections),
    )


async def _user_configs(api: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    response = await api.get(f"{RUNS}/{run_id}")
    configs: dict[str, Any] = response.json()["configs"]["userConfigs"]
    return configs


async def test_the_flat_view_dots_nested_keys_and_keeps_types(api: httpx.AsyncClient) -> None:
    await _create(
        api,
        "flat",
        {"userConfigs": {"lr": 0.1, "opt": {"name": "adam"}}, "hardwareConfigs": {"chips": 8}},
    )
    response = await api.get(f"{RUNS}/flat/configs")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["run"].endswith("/machineLearningRuns/flat")
    assert body["entries"] == [
        {"section": "hardwareConfigs", "key": "chips", "value": 8},
        {"section": "userConfigs", "key": "lr", "value": 0.1},
        {"section": "userConfigs", "key": "opt.name", "value": "adam"},
    ]


async def test_diff_of_two_runs(api: httpx.AsyncClient) -> None:
    await _create(api, "base", {"userConfigs": {"lr": 0.1, "seed": 1, "opt": {"name": "adam"}}})
    await _create(api, "other", {"userConfigs": {"lr": 0.2, "seed": 1.0, "steps": 10}})
    response = await api.get(f"{RUNS}:diffConfigs", params={"base": "base", "other": "other"})
    assert response.status_code == 200, response.text
    differences = [
        (d["key"], d["change"], d["baseValue"], d["otherValue"])
        for d in response.json()["differences"]
    ]
    assert differences == [
        ("lr", "CHANGED", 0.1, 0.2),
        ("opt.name", "REMOVED", "adam", None),
        ("steps", "ADDED", None, 10),
    ]
    everything = await api.get(
        f"{RUNS}:diffConfigs", params={"base": "base", "other": "other", "includeUnchanged": "true"}
    )
    assert ("seed", "UNCHANGED") in [
        (d["key"], d["change"]) for d in everything.json()["differences"]
    ]


async def test_diff_errors(api: httpx.AsyncClient) -> None:
    await _create(api, "only", {})
    unknown = await api.get(f"{RUNS}:diffConfigs", params={"base": "only", "other": "missing"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "run_not_found"
    missing = await api.get(f"{RUNS}:diffConfigs", params={"base": "only"})
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "invalid_argument"


async def test_reported_configs_merge_into_the_run_once(
    api: httpx.AsyncClient, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    await _create(api, "reported", {"userConfigs": {"lr": 0.1, "seed": 7}})
    report = _report("reported", userConfigs={"lr": 0.3, "opt": {"name": "sgd"}})
    await publisher.publish_many([report, report])  # a redelivery: the second is a duplicate
    merged = await wait_until(
        lambda: _user_configs(api, "reported"), lambda configs: configs.get("lr") == 0.3
    )
    assert merged == {"lr": 0.3, "seed": 7, "opt": {"name": "sgd"}}
    # the same configs reported again (a new record) change nothing and publish nothing
    await publisher.publish_many([_report("reported", userConfigs={"lr": 0.3})])
    await publisher.publish_many([_report("reported", hardwareConfigs={"chips": 4})])
    await wait_until(
        lambda: api.get(f"{RUNS}/reported"),
        lambda response: response.json()["configs"]["hardwareConfigs"] == {"chips": 4},
    )
    updates = [
        m.update_mask
        for m in await read_messages(nats_settings, bus.RUN_UPDATED, RunUpdated)
        if m.run.run_id == "reported"
    ]
    assert updates == [["configs.userConfigs"], ["configs.hardwareConfigs"]]


async def test_configs_for_a_run_that_never_appears_are_dead_lettered(
    api: httpx.AsyncClient, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    await publisher.publish_many([_report("never-created", userConfigs={"lr": 1})])
    subject = f"{nats_settings.namespace}.deadletter.{bus.CONFIGS_RECEIVED}.*"
    stream = f"{nats_settings.namespace.upper()}_DEADLETTER"
    [letter] = await wait_until(
        lambda: read_stream(nats_settings.url, subject, stream), lambda letters: len(letters) == 1
    )
    reason = (letter.headers or {})["Mldiag-Reason"]
    assert reason.startswith("RunNotYetCreated") and "never-created" in reason


async def test_configs_of_a_deleted_run_are_dropped(
    api: httpx.AsyncClient, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    await _create(api, "gone", {"userConfigs": {"lr": 0.1}})
    await _create(api, "witness", {})
    run = (await api.get(f"{RUNS}/gone")).json()
    assert (await api.delete(f"{RUNS}/gone", params={"etag": run["etag"]})).status_code == 200
    await publisher.publish_many([_report("gone", userConfigs={"lr": 9})])
    await publisher.publish_many([_report("witness", userConfigs={"lr": 1})])
    await wait_until(lambda: _user_configs(api, "witness"), lambda configs: configs == {"lr": 1})
    await asyncio.sleep(0.5)  # long enough for a retried report to be dead-lettered
    subject = f"{nats_settings.namespace}.deadletter.>"
    stream = f"{nats_settings.namespace.upper()}_DEADLETTER"
    assert await read_stream(nats_settings.url, subject, stream) == []
    updated = await read_messages(nats_settings, bus.RUN_UPDATED, RunUpdated)
    assert [m.run.run_id for m in updated] == ["witness"]
