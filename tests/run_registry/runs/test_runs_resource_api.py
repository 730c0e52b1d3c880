"""The run resource end to end over HTTP against real PostgreSQL and NATS: create, get,
list with filter/orderBy/paging, update with etags, the lifecycle, soft delete, bus facts.
"""

import asyncio
import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_platform.database import load_migrations
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.runs import RunCreated, RunDeleted, RunPhase, RunPhaseChanged, RunUpdated
from mldiag_schemas.telemetry import MetricPointsReceived
from support import read_messages, wait_until

pytestmark = pytest.mark.connected

RUNS = "/v1/machineLearningRuns"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def _create(api: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    response = await api.post(RUNS, json={"displayName": "run", **fields})
    assert response.status_code == 200, response.text
    operation: dict[str, Any] = response.json()
    assert operation["done"] is True
    run: dict[str, Any] = operation["response"]
    return run


async def _patch(
    api: httpx.AsyncClient, run_id: str, body: dict[str, Any], **params: str
) -> httpx.Response:
    return await api.patch(f"{RUNS}/{run_id}", json=body, params=params)


async def test_create_keeps_every_field_typed(api: httpx.AsyncClient) -> None:
    body = {
        "runId": "typed-run",
        "displayName": "typed",
        "runSet": "sweep-1",
        "labels": {"team": "ml"},
        "configs": {
            "softwareConfigs": {"framework": "jax", "xla_flags": ["--a", "--b"]},
            "hardwareConfigs": {"num_slices": 2, "devices_per_slice": 8},
            "userConfigs": {"lr": 0.001, "layers": 12, "nested": {"dropout": 0.1}, "bad": math.nan},
        },
        "artifacts": {"gcsPath": "file:///tmp/artifacts"},
        "orchestrator": "SLURM",
        "workloadDetails": {
            "slurm": {"jobId": "1234", "cluster": "c1"},
            "targets": [{"hostname": "node-0", "zone": "rack-1"}],
        },
        "workloadId": "slurm-1234",
    }
    response = await api.post(RUNS, content=json.dumps(body))  # json writes NaN as NaN
    assert response.status_code == 200, response.text
    run = response.json()["response"]
    assert run["name"] == "projects/default/locations/local/machineLearningRuns/typed-run"
    assert run["state"] == "STATE_ACTIVE" and run["runPhase"] == "ACTIVE"
    assert run["etag"] and run["endTime"] is None and run["deleteTime"] is None
    assert run["configs"]["userConfigs"]["layers"] == 12
    assert run["configs"]["userConfigs"]["nested"] == {"dropout": 0.1}
    assert math.isnan(run["configs"]["userConfigs"]["bad"])
    assert run["configs"]["hardwareConfigs"]["num_slices"] == 2
    assert run["workloadDetails"]["slurm"]["jobId"] == "1234"
    assert run["workloadDetails"]["targets"][0]["hostname"] == "node-0"
    assert run["metrics"] == {
        "avgStepTime": None,
        "avgMfu": None,
        "avgThroughput": None,
        "avgLatency": None,
    }
    fetched = (await api.get(f"{RUNS}/typed-run")).json()
    assert fetched["configs"]["userConfigs"]["lr"] == 0.001
    assert fetched["etag"] == run["etag"]
    full = await api.get("/v1/projects/default/locations/local/machineLearningRuns/typed-run")
    assert full.json()["etag"] == run["etag"]


async def test_list_filters_orders_and_pages(api: httpx.AsyncClient) -> None:
    for index in range(6):
        labels = {"i": str(index)}
        if index < 2:
            labels["gpu"] = "h100"
        await _create(
            api,
            runId=f"r{index}",
            displayName=f"run {index}",
            runSet="even" if index % 2 == 0 else "odd",
            labels=labels,
            orchestrator="GKE" if index == 5 else "LOCAL",
        )
    r1 = (await api.get(f"{RUNS}/r1")).json()
    done = await _patch(api, "r1", {"etag": r1["etag"], "runPhase": "COMPLETED"})
    assert done.status_code == 200, done.text

    async def ids(**params: Any) -> list[str]:
        response = await api.get(RUNS, params=params)
        assert response.status_code == 200, response.text
        return [run["runId"] for run in response.json()["machineLearningRuns"]]

    assert await ids() == ["r5", "r4", "r3", "r2", "r1", "r0"]  # newest first
    assert await ids(filter='runSet = "even"') == ["r4", "r2", "r0"]
    assert await ids(filter="state = STATE_COMPLETED") == ["r1"]
    assert await ids(filter="runPhase = ACTIVE AND labels:gpu") == ["r0"]
    assert await ids(filter='labels.i = "3" OR labels.i = "4"') == ["r4", "r3"]
    assert await ids(filter='runSet = "odd" AND (labels.i = "1" OR labels.i = "5")') == [
        "r5",
        "r1",
    ]
    assert await ids(filter='NOT runSet = "odd"') == ["r4", "r2", "r0"]
    assert await ids(filter='labels.gpu != "h100"') == ["r5", "r4", "r3", "r2"]
    assert await ids(filter='displayName:"run 2"') == ["r2"]
    assert await ids(filter="orchestrator = GKE") == ["r5"]
    future = '"2999-01-01T00:00:00Z"'
    assert await ids(filter=f"createTime > {future}") == []
    assert len(await ids(filter=f"createTime < {future} AND updateTime < {future}")) == 6
    assert await ids(orderBy="displayName") == ["r0", "r1", "r2", "r3", "r4", "r5"]
    assert await ids(orderBy="runSet desc, displayName") == ["r1", "r3", "r5", "r0", "r2", "r4"]
    assert (await ids(orderBy="updateTime desc"))[0] == "r1"

    # pages walk the whole ordering, with the filter, and tokens are bound to the query
    seen: list[str] = []
    token = ""
    params: dict[str, str | int] = {
        "pageSize": 2,
        "orderBy": "runSet, displayName desc",
        "filter": "state = ACTIVE",
    }
    while True:
        page = (await api.get(RUNS, params={**params, "pageToken": token})).json()
        assert len(page["machineLearningRuns"]) <= 2
        seen.extend(run["runId"] for run in page["machineLearningRuns"])
        token = page["nextPageToken"]
        if not token:
            break
    assert seen == ["r4", "r2", "r0", "r5", "r3"]
    first = (await api.get(RUNS, params={"pageSize": 1})).json()
    reused = await api.get(
        RUNS, params={"pageSize": 1, "pageToken": first["nextPageToken"], "orderBy": "runSet"}
    )
    assert (reused.status_code, reused.json()["error"]["code"]) == (400, "invalid_page_token")
    capped = await api.get(RUNS, params={"pageSize": 5000})
    assert capped.status_code == 200


async def test_bad_list_parameters_get_stable_codes(api: httpx.AsyncClient) -> None:
    bad_filter = await api.get(RUNS, params={"filter": 'displayName = "x" AND bogus = 1'})
    assert bad_filter.status_code == 400
    error = bad_filter.json()["error"]
    assert error["code"] == "invalid_filter"
    assert error["details"][0]["position"] == 22
    assert "position 22" in error["message"]
    bad_order = await api.get(RUNS, params={"orderBy": "labels"})
    assert (bad_order.status_code, bad_order.json()["error"]["code"]) == (400, "invalid_order_by")
    negative = await api.get(RUNS, params={"pageSize": -1})
    assert (negative.status_code, negative.json()["error"]["code"]) == (400, "invalid_page_size")


async def test_update_needs_a_fresh_etag_and_honours_the_mask(api: httpx.AsyncClient) -> None:
    run = await _create(api, runId="etags", labels={"a": "1"}, runSet="s1")
    missing = await _patch(api, "etags", {"displayName": "renamed"})
    assert (missing.status_code, missing.json()["error"]["code"]) == (400, "etag_required")

    # no mask: the fields present change, the others stay
    first = await _patch(api, "etags", {"etag": run["etag"], "displayName": "renamed"})
    assert first.status_code == 200, first.text
    operation = first.json()
    assert operation["metadata"]["verb"] == "update"
    assert operation["metadata"]["target"] == run["name"]
    updated = operation["response"]
    assert updated["displayName"] == "renamed" and updated["labels"] == {"a": "1"}
    assert updated["etag"] != run["etag"]
    assert updated["updateTime"] > run["updateTime"]

    stale = await _patch(api, "etags", {"etag": run["etag"], "displayName": "again"})
    assert (stale.status_code, stale.json()["error"]["code"]) == (409, "etag_mismatch")
    assert "stale" in stale.json()["error"]["message"]

    # the mask names what changes: labels cleared (absent from the body), runSet ignored
    masked = await _patch(
        api,
        "etags",
        {"etag": updated["etag"], "runSet": "ignored", "configs": {"userConfigs": {"lr": 0.5}}},
        updateMask="labels,configs.userConfigs",
    )
    assert masked.status_code == 200, masked.text
    after = masked.json()["response"]
    assert after["labels"] == {} and after["runSet"] == "s1"
    assert after["configs"]["userConfigs"] == {"lr": 0.5}

    # a GET, edited and PATCHed back whole (output-only fields are ignored)
    whole = {**after, "displayName": "round trip"}
    round_trip = await _patch(api, "etags", whole, update_mask="display_name")
    assert round_trip.status_code == 200, round_trip.text
    assert round_trip.json()["response"]["displayName"] == "round trip"

    bad_mask = await _patch(api, "etags", {"etag": "x"}, updateMask="state")
    assert (bad_mask.status_code, bad_mask.json()["error"]["code"]) == (400, "invalid_update_mask")
    absent = await _patch(api, "no-such-run", {"etag": "x", "displayName": "x"})
    assert (absent.status_code, absent.json()["error"]["code"]) == (404, "run_not_found")


async def test_lifecycle_end_refusal_and_resume(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    run = await _create(api, runId="life", workloadId="job-7")
    failed = await _patch(
        api,
        "life",
        {
            "etag": run["etag"],
            "runPhase": "FAILED",
            "errorDetails": {"code": "ValueError", "message": "loss is NaN", "stackTrace": "tb"},
        },
    )
    assert failed.status_code == 200, failed.text
    ended = failed.json()["response"]
    assert ended["state"] == "STATE_FAILED" and ended["endTime"] is not None
    assert ended["errorDetails"]["message"] == "loss is NaN"

    refused = await _patch(api, "life", {"etag": ended["etag"], "displayName": "late"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "failed_precondition")
    other = await _patch(
        api, "life", {"etag": ended["etag"], "runPhase": "ACTIVE", "workloadId": "job-8"}
    )
    assert (other.status_code, other.json()["error"]["code"]) == (409, "failed_precondition")
    no_identity = await _patch(api, "life", {"etag": ended["etag"], "runPhase": "ACTIVE"})
    assert no_identity.status_code == 409

    resumed = await _patch(
        api, "life", {"etag": ended["etag"], "runPhase": "ACTIVE", "workloadId": "job-7"}
    )
    assert resumed.status_code == 200, resumed.text
    again = resumed.json()["response"]
    assert again["state"] == "STATE_ACTIVE" and again["endTime"] is None
    assert again["errorDetails"] is None
    completed = await _patch(api, "life", {"etag": again["etag"], "runPhase": "COMPLETED"})
    assert completed.json()["response"]["state"] == "STATE_COMPLETED"

    # the facts, published after each commit, in order
    created = await read_messages(nats_settings, bus.RUN_CREATED, RunCreated)
    assert [m.run.run_id for m in created] == ["life"]
    changes = await read_messages(nats_settings, bus.RUN_PHASE_CHANGED, RunPhaseChanged)
    assert [(m.previous_phase, m.run.run_phase) for m in changes] == [
        (RunPhase.ACTIVE, RunPhase.FAILED),
        (RunPhase.FAILED, RunPhase.ACTIVE),
        (RunPhase.ACTIVE, RunPhase.COMPLETED),
    ]
    updates = await read_messages(nats_settings, bus.RUN_UPDATED, RunUpdated)
    assert len(updates) == 3
    assert updates[0].update_mask == ["runPhase", "errorDetails"]
    assert updates[-1].run.etag == completed.json()["response"]["etag"]


async def test_patch_with_allow_missing_upserts(api: httpx.AsyncClient) -> None:
    created = await _patch(
        api, "upserted", {"displayName": "up", "labels": {"k": "v"}}, allowMissing="true"
    )
    assert created.status_code == 200, created.text
    assert created.json()["metadata"]["verb"] == "create"
    run = created.json()["response"]
    assert (run["runId"], run["labels"]) == ("upserted", {"k": "v"})
    # existing: an update, etag optional (checked when sent)
    updated = await _patch(api, "upserted", {"displayName": "up 2"}, allow_missing="true")
    assert updated.json()["metadata"]["verb"] == "update"
    assert updated.json()["response"]["displayName"] == "up 2"
    stale = await _patch(
        api, "upserted", {"etag": run["etag"], "displayName": "x"}, allowMissing="true"
    )
    assert stale.status_code == 409
    nameless = await _patch(api, "nameless", {"labels": {}}, allowMissing="true")
    assert (nameless.status_code, nameless.json()["error"]["code"]) == (400, "invalid_argument")
    bad_flag = await _patch(api, "upserted", {}, allowMissing="maybe")
    assert bad_flag.status_code == 400


async def test_soft_delete_hides_the_run_and_its_data(
    api: httpx.AsyncClient, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    run = await _create(api, runId="doomed")
    await publisher.publish(
        MetricPointsReceived.model_validate(
            {
                "runId": "doomed",
                "batchId": uuid.uuid4(),
                "chunk": 0,
                "points": [{"name": "loss", "step": 1, "value": 0.5, "time": NOW}],
            }
        )
    )

    async def metric_names() -> list[object]:
        listing: list[object] = (await api.get(f"{RUNS}/doomed/metrics")).json()["metrics"]
        return listing

    await wait_until(metric_names)
    stale = await api.delete(f"{RUNS}/doomed", params={"etag": "not-it"})
    assert (stale.status_code, stale.json()["error"]["code"]) == (409, "etag_mismatch")

    deleted = await api.delete(f"{RUNS}/doomed", params={"etag": run["etag"]})
    assert deleted.status_code == 200, deleted.text
    operation = deleted.json()
    assert operation["done"] is True and operation["metadata"]["verb"] == "delete"
    assert operation["response"]["deleteTime"] is not None

    for path in ("", "/metrics", "/metrics/loss", "/events", "/analyses"):
        gone = await api.get(f"{RUNS}/doomed{path}")
        assert (gone.status_code, gone.json()["error"]["code"]) == (404, "run_not_found"), path
    assert (await api.get(RUNS)).json()["machineLearningRuns"] == []
    assert (await api.delete(f"{RUNS}/doomed")).status_code == 404
    refused = await _patch(api, "doomed", {"etag": "x", "displayName": "y"})
    assert refused.status_code == 404
    reused = await api.post(RUNS, json={"runId": "doomed", "displayName": "again"})
    assert (reused.status_code, reused.json()["error"]["code"]) == (409, "run_already_exists")
    facts = await read_messages(nats_settings, bus.RUN_DELETED, RunDeleted)
    assert [m.run.run_id for m in facts] == ["doomed"]
    assert facts[0].run.delete_time is not None


async def test_bad_input_gets_stable_codes(api: httpx.AsyncClient) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"displayName": "x", "orchestrator": "KUBERNETES"}, "orchestrator"),
        ({"displayName": "x", "runPhase": "RUNNING"}, "runPhase"),
        ({"displayName": "x", "state": "STATE_ACTIVE"}, "state"),
        ({"displayName": "x", "labels": {"a": 1}}, "labels.a"),
        ({"displayName": "x", "runId": "Not_Valid"}, "runId"),
        (
            {"displayName": "x", "workloadDetails": {"gke": {"bogus": 1}}},
            "workloadDetails.gke.bogus",
        ),
    ]
    for body, field in cases:
        response = await api.post(RUNS, json=body)
        assert response.status_code == 400, body
        error = response.json()["error"]
        assert error["code"] == "invalid_argument"
        assert error["details"][0]["field"] == field, error
    await _create(api, runId="target")
    not_json = await api.patch(f"{RUNS}/target", content=b"{oops")
    assert (not_json.status_code, not_json.json()["error"]["code"]) == (400, "invalid_argument")
    bad_id = await api.patch(f"{RUNS}/Bad.Id", json={"etag": "x"})
    assert (bad_id.status_code, bad_id.json()["error"]["code"]) == (400, "invalid_run_id")
    cleared = await _patch(api, "target", {"etag": "x"}, updateMask="displayName")
    assert cleared.status_code == 400


async def test_concurrent_updates_with_one_etag_let_exactly_one_win(
    api: httpx.AsyncClient,
) -> None:
    run = await _create(api, runId="race")
    responses = await asyncio.gather(
        *(
            _patch(api, "race", {"etag": run["etag"], "displayName": f"writer {index}"})
            for index in range(8)
        )
    )
    codes = sorted(response.status_code for response in responses)
    assert codes == [200] + [409] * 7
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 409} == {
        "etag_mismatch"
    }
    winner = next(r for r in responses if r.status_code == 200).json()["response"]
    assert (await api.get(f"{RUNS}/race")).json()["displayName"] == winner["displayName"]


def test_migration_sets_are_numbered_without_gaps() -> None:
    for component, package in [
        ("run-registry-runs", "mldiag_run_registry.runs.migrations"),
        ("run-registry-operations", "mldiag_run_registry.operations.migrations"),
    ]:
        migrations = load_migrations(component, package)
        assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
        assert migrations


async def test_the_output_only_summary_follows_the_metrics_and_survives_updates(
    api: httpx.AsyncClient, publisher: Publisher
) -> None:
    run = await _create(api, runId="summarised")
    assert run["metrics"] == {
        "avgStepTime": None,
        "avgMfu": None,
        "avgThroughput": None,
        "avgLatency": None,
    }
    points = [
        {"name": name, "step": step, "value": value, "time": NOW}
        for step, (step_time, throughput) in enumerate([(0.25, 400.0), (0.75, 200.0)])
        for name, value in (("step_time", step_time), ("throughput", throughput))
    ]
    await publisher.publish(
        MetricPointsReceived.model_validate(
            {"runId": "summarised", "batchId": uuid.uuid4(), "chunk": 0, "points": points}
        )
    )

    async def described() -> dict[str, Any]:
        body: dict[str, Any] = (await api.get(f"{RUNS}/summarised")).json()
        return body

    summarised = await wait_until(described, lambda r: r["metrics"]["avgStepTime"] is not None)
    assert summarised["metrics"]["avgStepTime"] == 0.5
    assert summarised["metrics"]["avgThroughput"] == 300.0
    assert summarised["etag"] == run["etag"]  # output-only: nobody changed the run
    renamed = await _patch(api, "summarised", {"etag": run["etag"], "displayName": "renamed"})
    assert renamed.status_code == 200, renamed.text
    after = await described()
    assert after["displayName"] == "renamed" and after["metrics"]["avgStepTime"] == 0.5
    listed = (await api.get(RUNS)).json()["machineLearningRuns"]
    assert listed[0]["metrics"]["avgThroughput"] == 300.0
