"""Rule overrides: a project's ``monitoringRules`` (replaced by PATCH, announced on the bus
after commit) and a run's ``monitoring`` field, both validated (real NATS and PostgreSQL)."""

from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.auth import Role
from mldiag_schemas.monitoring import MonitoringRulesChanged, RuleName
from mldiag_schemas.runs import RunUpdated
from support import read_messages

pytestmark = pytest.mark.connected

RULES = "/v1/projects/default/locations/local/monitoringRules"
RUNS = "/v1/machineLearningRuns"

HANG_60 = {"rules": {"hang": {"thresholds": {"floorSeconds": 60}}, "straggler": {"enabled": False}}}


async def test_project_rules_are_replaced_and_announced(
    api: httpx.AsyncClient, nats_settings: NatsSettings, api_tokens: ApiTokens
) -> None:
    empty = await api.get(RULES)
    assert empty.status_code == 200
    assert empty.json() == {"name": "projects/default/locations/local/monitoringRules", "rules": {}}

    first = await api.patch(RULES, json=HANG_60)
    assert first.status_code == 200, first.text
    assert first.json()["rules"] == {
        "hang": {"enabled": None, "thresholds": {"floorSeconds": 60.0}},
        "straggler": {"enabled": False, "thresholds": {}},
    }
    assert (await api.get("/v1/monitoringRules")).json() == first.json()  # the short form

    # PATCH replaces the whole set
    second = await api.patch(
        RULES, json={"rules": {"input-stall": {"thresholds": {"waitFraction": 0.3}}}}
    )
    assert list(second.json()["rules"]) == ["input-stall"]
    other = await api.patch(
        "/v1/projects/p2/locations/l2/monitoringRules", json={"rules": {"hang": {"enabled": False}}}
    )
    assert other.json()["name"] == "projects/p2/locations/l2/monitoringRules"
    assert list((await api.get(RULES)).json()["rules"]) == ["input-stall"]

    changes = await read_messages(
        nats_settings, bus.MONITORING_RULES_CHANGED, MonitoringRulesChanged
    )
    assert [(m.project, m.location) for m in changes] == [
        ("default", "local"),
        ("default", "local"),
        ("p2", "l2"),
    ]
    assert changes[0].rules.rules[RuleName.HANG].thresholds == {"floorSeconds": 60.0}
    assert changes[0].rules.rules[RuleName.STRAGGLER].enabled is False
    assert list(changes[1].rules.rules) == [RuleName.INPUT_STALL]

    viewer = api_tokens.headers(Role.VIEWER)
    assert (await api.get(RULES, headers=viewer)).status_code == 200
    refused = await api.patch(RULES, json=HANG_60, headers=viewer)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "permission_denied")
    editor = await api.patch(RULES, json=HANG_60, headers=api_tokens.headers(Role.EDITOR))
    assert editor.status_code == 200


INVALID: list[tuple[dict[str, Any], str]] = [
    ({"rules": {"hang": {"thresholds": {"floorSecs": 60}}}}, "hang.floorSecs"),
    ({"rules": {"hang": {"thresholds": {"floorSeconds": -1}}}}, "hang.floorSeconds"),
    ({"rules": {"no-such-rule": {"enabled": False}}}, "no-such-rule"),
    ({"rules": {"hang": {"thresholds": {"floorSeconds": "soon"}}}}, "floorSeconds"),
]


@pytest.mark.parametrize(("body", "field"), INVALID)
async def test_invalid_project_rules_are_refused_and_not_announced(
    api: httpx.AsyncClient, nats_settings: NatsSettings, body: dict[str, Any], field: str
) -> None:
    response = await api.patch(RULES, json=body)
    assert (response.status_code, response.json()["error"]["code"]) == (
        400,
        "invalid_monitoring_rules",
    )
    assert any(field in detail["field"] for detail in response.json()["error"]["details"])
    assert (await api.get(RULES)).json()["rules"] == {}
    assert (
        await read_messages(nats_settings, bus.MONITORING_RULES_CHANGED, MonitoringRulesChanged)
        == []
    )


@pytest.mark.parametrize(("body", "field"), INVALID)
async def test_invalid_run_rules_are_refused(
    api: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    created = await api.post(RUNS, json={"displayName": "bad", "monitoring": body})
    assert (created.status_code, created.json()["error"]["code"]) == (
        400,
        "invalid_monitoring_rules",
    ), created.text
    assert any(field in detail["field"] for detail in created.json()["error"]["details"])

    run = (await api.post(RUNS, json={"displayName": "ok"})).json()["response"]
    updated = await api.patch(
        f"{RUNS}/{run['runId']}",
        params={"updateMask": "monitoring"},
        json={"etag": run["etag"], "monitoring": body},
    )
    assert (updated.status_code, updated.json()["error"]["code"]) == (
        400,
        "invalid_monitoring_rules",
    )


async def test_a_run_keeps_its_overrides_and_announces_them(
    api: httpx.AsyncClient, nats_settings: NatsSettings
) -> None:
    created = await api.post(
        RUNS, json={"runId": "tuned", "displayName": "tuned", "monitoring": HANG_60}
    )
    assert created.status_code == 200, created.text
    run = created.json()["response"]
    assert run["monitoring"]["rules"]["hang"]["thresholds"] == {"floorSeconds": 60.0}
    assert (await api.get(f"{RUNS}/tuned")).json()["monitoring"] == run["monitoring"]

    replaced = await api.patch(
        f"{RUNS}/tuned",
        params={"updateMask": "monitoring"},
        json={"etag": run["etag"], "monitoring": {"rules": {"loss-spike": {"enabled": False}}}},
    )
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["response"]["monitoring"] == {
        "rules": {"loss-spike": {"enabled": False, "thresholds": {}}}
    }
    # an update without the field in its mask keeps the overrides
    etag = replaced.json()["response"]["etag"]
    renamed = await api.patch(f"{RUNS}/tuned", json={"etag": etag, "displayName": "renamed"})
    assert renamed.json()["response"]["monitoring"] == replaced.json()["response"]["monitoring"]

    updates = await read_messages(nats_settings, bus.RUN_UPDATED, RunUpdated)
    assert [m.update_mask for m in updates] == [["monitoring"], ["displayName"]]
    assert updates[0].run.monitoring.rules[RuleName.LOSS_SPIKE].enabled is False
