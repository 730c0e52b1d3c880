"""The retention policy resource: defaults, PATCH with an update mask, validation with a
stable code, and who may read and change it (real NATS and PostgreSQL)."""

import pytest

from conftest import ApiTokens
from mldiag_schemas.auth import Role
from run_registry.retention.conftest import Retention

pytestmark = pytest.mark.connected

POLICY = "/v1/projects/default/locations/local/retentionPolicy"


async def test_a_project_without_a_policy_reads_the_defaults(retention: Retention) -> None:
    response = await retention.api.get(POLICY)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "name": "projects/default/locations/local/retentionPolicy",
        "rawPointsDays": 0,
        "rollupsDays": 0,
        "deletedRunsDays": 30,
        "updateTime": None,
    }
    short = await retention.api.get("/v1/retentionPolicy")  # the short parent
    assert short.json() == response.json()


async def test_patch_sets_the_masked_fields_only(retention: Retention) -> None:
    api = retention.api
    first = await api.patch(
        POLICY,
        params={"updateMask": "rawPointsDays,rollupsDays"},
        json={"rawPointsDays": 14, "rollupsDays": 90, "deletedRunsDays": 1},
    )
    assert first.status_code == 200, first.text
    body = first.json()
    assert (body["rawPointsDays"], body["rollupsDays"], body["deletedRunsDays"]) == (14, 90, 30)
    assert body["updateTime"] is not None

    # no mask: the fields sent
    second = await api.patch(POLICY, json={"deletedRunsDays": 7})
    assert second.status_code == 200, second.text
    body = second.json()
    assert (body["rawPointsDays"], body["rollupsDays"], body["deletedRunsDays"]) == (14, 90, 7)
    assert (await api.get(POLICY)).json() == body

    # a masked field left out of the body goes back to its default
    third = await api.patch(POLICY, params={"update_mask": "deletedRunsDays"}, json={})
    assert third.json()["deletedRunsDays"] == 30

    # one policy per project: every location reads it; other projects keep the defaults
    other_location = await api.get("/v1/projects/default/locations/elsewhere/retentionPolicy")
    assert other_location.json()["name"] == ("projects/default/locations/elsewhere/retentionPolicy")
    assert other_location.json()["rawPointsDays"] == 14
    other_project = await api.get("/v1/projects/p2/locations/local/retentionPolicy")
    assert other_project.json()["rawPointsDays"] == 0


@pytest.mark.parametrize(
    ("params", "body", "code"),
    [
        ({}, {"rawPointsDays": -1}, "invalid_retention_policy"),
        ({}, {"rollupsDays": 40_000}, "invalid_retention_policy"),
        ({}, {"rawPointsDays": "soon"}, "invalid_retention_policy"),
        ({}, {"rawPointsDays": 30, "rollupsDays": 7}, "invalid_retention_policy"),
        # rollups kept forever but raw points not: fine; the reverse is not
        ({}, {"rollupsDays": 7}, "invalid_retention_policy"),
        ({}, {"retentionDays": 7}, "invalid_retention_policy"),
        ({"updateMask": "name"}, {}, "invalid_update_mask"),
        ({"updateMask": "rawPoints"}, {"rawPointsDays": 1}, "invalid_update_mask"),
    ],
)
async def test_invalid_policies_are_refused(
    retention: Retention, params: dict[str, str], body: dict[str, object], code: str
) -> None:
    response = await retention.api.patch(POLICY, params=params, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == code
    assert (await retention.api.get(POLICY)).json()["updateTime"] is None  # nothing stored


async def test_rollups_must_outlive_the_stored_raw_points(retention: Retention) -> None:
    api = retention.api
    ok = await api.patch(POLICY, json={"rawPointsDays": 10, "rollupsDays": 20})
    assert ok.status_code == 200, ok.text
    shorter = await api.patch(POLICY, json={"rollupsDays": 5})
    assert shorter.status_code == 400
    assert shorter.json()["error"]["code"] == "invalid_retention_policy"
    assert "rollupsDays" in shorter.json()["error"]["message"]
    assert (await api.get(POLICY)).json()["rollupsDays"] == 20


async def test_viewers_read_and_only_admins_change(
    retention: Retention, api_tokens: ApiTokens
) -> None:
    for role, read, write in (
        (Role.VIEWER, 200, 403),
        (Role.EDITOR, 200, 403),
        (Role.ADMIN, 200, 200),
    ):
        headers = api_tokens.headers(role)
        assert (await retention.api.get(POLICY, headers=headers)).status_code == read
        patched = await retention.api.patch(POLICY, headers=headers, json={"rawPointsDays": 3})
        assert patched.status_code == write, (role, patched.text)
