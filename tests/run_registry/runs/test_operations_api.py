"""Operations over HTTP: every run write returns one, stored and served (AIP-151)."""

import httpx
import pytest

pytestmark = pytest.mark.connected

RUNS = "/v1/machineLearningRuns"
OPERATIONS = "/v1/operations"


def _id(operation: dict[str, object]) -> str:
    return str(operation["name"]).rsplit("/", 1)[-1]


async def test_writes_return_stored_operations(api: httpx.AsyncClient) -> None:
    create = (await api.post(RUNS, json={"runId": "op-run", "displayName": "x"})).json()
    assert create["name"].startswith("projects/default/locations/local/operations/")
    assert create["done"] is True and create["error"] is None
    meta = create["metadata"]
    assert meta["verb"] == "create"
    assert meta["target"] == "projects/default/locations/local/machineLearningRuns/op-run"
    assert meta["createTime"] and meta["endTime"]

    fetched = await api.get(f"{OPERATIONS}/{_id(create)}")
    assert fetched.status_code == 200
    assert fetched.json() == create
    full = await api.get(f"/v1/{create['name']}")
    assert full.json() == create

    etag = create["response"]["etag"]
    update = (await api.patch(f"{RUNS}/op-run", json={"etag": etag, "labels": {"a": "b"}})).json()
    delete = (await api.delete(f"{RUNS}/op-run")).json()
    assert delete["metadata"]["verb"] == "delete"

    listing = (await api.get(OPERATIONS)).json()
    assert [_id(op) for op in listing["operations"]] == [_id(delete), _id(update), _id(create)]
    paged: list[str] = []
    token = ""
    while True:
        page = (await api.get(OPERATIONS, params={"pageSize": 2, "pageToken": token})).json()
        paged.extend(_id(op) for op in page["operations"])
        token = page["nextPageToken"]
        if not token:
            break
    assert paged == [_id(delete), _id(update), _id(create)]

    done = (await api.get(OPERATIONS, params={"filter": "done = true"})).json()
    assert len(done["operations"]) == 3
    running = (await api.get(OPERATIONS, params={"filter": "done = false"})).json()
    assert running["operations"] == []
    creates = (await api.get(OPERATIONS, params={"filter": 'metadata.verb = "create"'})).json()
    assert [_id(op) for op in creates["operations"]] == [_id(create)]
    bad = await api.get(OPERATIONS, params={"filter": "done = maybe"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_filter")

    # operations are scoped by parent
    other = await api.get(f"/v1/projects/p/locations/l/operations/{_id(create)}")
    assert (other.status_code, other.json()["error"]["code"]) == (404, "operation_not_found")


async def test_wait_cancel_and_delete(api: httpx.AsyncClient) -> None:
    create = (await api.post(RUNS, json={"displayName": "x"})).json()
    operation_id = _id(create)

    waited = await api.post(f"{OPERATIONS}/{operation_id}:wait", json={"timeout": "2s"})
    assert waited.status_code == 200
    assert waited.json()["done"] is True
    no_body = await api.post(f"{OPERATIONS}/{operation_id}:wait")
    assert no_body.json()["done"] is True
    bad_timeout = await api.post(f"{OPERATIONS}/{operation_id}:wait", json={"timeout": "soon"})
    assert (bad_timeout.status_code, bad_timeout.json()["error"]["code"]) == (
        400,
        "invalid_timeout",
    )

    cancel = await api.post(f"{OPERATIONS}/{operation_id}:cancel")
    assert (cancel.status_code, cancel.json()["error"]["code"]) == (409, "operation_already_done")

    deleted = await api.delete(f"{OPERATIONS}/{operation_id}")
    assert (deleted.status_code, deleted.json()) == (200, {})
    for method, path in [
        ("GET", f"{OPERATIONS}/{operation_id}"),
        ("DELETE", f"{OPERATIONS}/{operation_id}"),
        ("POST", f"{OPERATIONS}/{operation_id}:wait"),
        ("POST", f"{OPERATIONS}/{operation_id}:cancel"),
    ]:
        gone = await api.request(method, path)
        assert (gone.status_code, gone.json()["error"]["code"]) == (404, "operation_not_found")
    # forgetting the operation leaves the run alone
    run_id = create["response"]["runId"]
    assert (await api.get(f"{RUNS}/{run_id}")).status_code == 200
    bad_id = await api.get(f"{OPERATIONS}/Not.An.Id")
    assert (bad_id.status_code, bad_id.json()["error"]["code"]) == (400, "invalid_operation_id")
