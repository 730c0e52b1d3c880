"""Bad input gets a 4xx naming what is wrong, never a 500 (issue 14, items 2 and 4): ids
outside the grammar, NUL and control characters, times and integers no column holds, deep
bodies, and bodies over the size limit."""

import base64
import hashlib
import json
from typing import Any

import asyncpg
import httpx
import pytest

from conftest import ApiTokens
from mldiag_run_registry.app import create_app
from mldiag_schemas.auth import Role
from run_registry.helpers import RegistrySettings
from support import serving

pytestmark = pytest.mark.connected

RUNS = "/v1/machineLearningRuns"
RUN = f"{RUNS}/known-run"
OUT_OF_RANGE = "0001-01-01T00:00:00+14:00"
"""A valid ISO 8601 time with no UTC equivalent: the driver overflows converting it."""


def _token(fields: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode()


def _query_hash(run_id: str, filter_text: str = "") -> str:
    return hashlib.sha256(f"{run_id}\0{filter_text}".encode()).hexdigest()[:16]


def _refused(response: httpx.Response, status: int, code: str, field: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["message"]
    if field is not None:
        assert field in [detail.get("field") for detail in error["details"]], error


@pytest.fixture
async def known_run(api: httpx.AsyncClient) -> str:
    created = await api.post(RUNS, json={"runId": "known-run", "displayName": "known"})
    assert created.status_code == 200, created.text
    return "known-run"


async def test_bad_project_in_a_write_is_refused_before_anything_is_committed(
    api: httpx.AsyncClient, database_url: str, db_schema: str
) -> None:
    # Reproduction: this committed, answered 500 and left an outbox row that failed forever.
    bad = await api.patch("/v1/projects/a..b/locations/local/monitoringRules", json={})
    _refused(bad, 400, "invalid_argument", "project")
    # A vertical tab in the project broke the event-detector's NATS connection.
    tab = await api.patch("/v1/projects/a%0Bb/locations/local/monitoringRules", json={})
    _refused(tab, 400, "invalid_argument", "path")
    conn = await asyncpg.connect(database_url, server_settings={"search_path": db_schema})
    try:
        assert await conn.fetchval("SELECT count(*) FROM outbox") == 0
    finally:
        await conn.close()
    good = await api.patch("/v1/projects/p1/locations/us-central1/monitoringRules", json={})
    assert good.status_code == 200, good.text


async def test_region_names_work_as_locations(api: httpx.AsyncClient) -> None:
    parent = "/v1/projects/team-a/locations/us-central1"
    created = await api.post(f"{parent}/machineLearningRuns", json={"displayName": "vertex"})
    assert created.status_code == 200, created.text
    listed = await api.get(f"{parent}/machineLearningRuns")
    assert [run["displayName"] for run in listed.json()["machineLearningRuns"]] == ["vertex"]


@pytest.mark.parametrize(
    ("method", "path", "code", "field"),
    [
        (
            "GET",
            "/v1/projects/Bad/locations/local/machineLearningRuns",
            "invalid_argument",
            "project",
        ),
        ("GET", "/v1/projects/p/locations/a.b/machineLearningRuns", "invalid_argument", "location"),
        ("GET", "/v1/projects/p/locations/-x/operations", "invalid_argument", "location"),
        ("GET", f"{RUNS}/Bad.Id", "invalid_run_id", "run_id"),
        ("GET", f"{RUNS}/{'x' * 64}/metrics", "invalid_run_id", "run_id"),
        ("GET", "/v1/operations/Not.An.Id", "invalid_operation_id", "operation_id"),
        ("GET", f"{RUN}/monitoredEvents/not_an_id", "invalid_argument", "event_id"),
        ("GET", f"{RUN}/profilerSessions/-x", "invalid_argument", "session_id"),
        ("DELETE", "/v1/apiTokens/tok.1", "invalid_argument", "token_id"),
        ("DELETE", "/v1/shareLinks/UPPER", "invalid_argument", "link_id"),
    ],
)
async def test_path_ids_outside_the_grammar_are_refused_naming_the_parameter(
    api: httpx.AsyncClient, method: str, path: str, code: str, field: str
) -> None:
    _refused(await api.request(method, path), 400, code, field)


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        (f"{RUNS}/a%00b", {}, "path"),
        (f"{RUNS}/ab%0A", {}, "path"),  # `$` alone would let a trailing newline through
        (RUNS, {"filter": 'displayName = "a\x00b"'}, "query.filter"),
        (RUNS, {"orderBy": "displayName\x00"}, "query.orderBy"),
        (RUNS, {"pageToken": "\x00"}, "query.pageToken"),
        ("/v1/monitoredEvents", {"filter": "kind = \x1b"}, "query.filter"),
        (f"{RUNS}:diffConfigs", {"base": "a\x00", "other": "b"}, "query.base"),
    ],
)
async def test_control_characters_in_paths_and_queries_are_refused(
    api: httpx.AsyncClient, path: str, params: dict[str, str], field: str
) -> None:
    _refused(await api.get(path, params=params), 400, "invalid_argument", field)


async def test_tabs_and_newlines_in_a_filter_are_whitespace(api: httpx.AsyncClient) -> None:
    listed = await api.get(RUNS, params={"filter": 'displayName = "x"\n\tAND runSet = "y"'})
    assert listed.status_code == 200, listed.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"displayName": "a\x00b"}, "displayName"),
        ({"displayName": "x", "labels": {"k": "v\x00"}}, "labels.k"),
        ({"displayName": "x", "labels": {"k\x00": "v"}}, "labels.k\x00"),
        (
            {"displayName": "x", "configs": {"userConfigs": {"opt": [{"lr": "\x00"}]}}},
            "configs.userConfigs.opt.0.lr",
        ),
    ],
)
async def test_nul_in_a_json_body_is_refused_naming_the_field(
    api: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    _refused(await api.post(RUNS, json=body), 400, "invalid_argument", field)
    listed = await api.get(RUNS)
    assert listed.json()["machineLearningRuns"] == []  # nothing stored


async def test_escaped_backslash_before_u0000_is_text_not_nul(api: httpx.AsyncClient) -> None:
    created = await api.post(RUNS, json={"displayName": "C:\\u0000dir"})
    assert created.status_code == 200, created.text
    assert created.json()["response"]["displayName"] == "C:\\u0000dir"


@pytest.mark.parametrize(
    "filter_text",
    [
        f'createTime > "{OUT_OF_RANGE}"',
        'createTime < "9999-12-31T23:00:00-14:00"',
        'createTime > "99999-01-01T00:00:00Z"',
    ],
)
async def test_filter_times_no_column_holds_are_invalid_filters(
    api: httpx.AsyncClient, known_run: str, filter_text: str
) -> None:
    for path in (RUNS, f"{RUN}/profilerSessions"):
        _refused(await api.get(path, params={"filter": filter_text}), 400, "invalid_filter")


async def test_page_tokens_carrying_bad_times_integers_or_text_are_invalid(
    api: httpx.AsyncClient, known_run: str
) -> None:
    await api.post(RUNS, json={"displayName": "second"})
    page = (await api.get(RUNS, params={"pageSize": 1})).json()
    real = json.loads(base64.urlsafe_b64decode(page["nextPageToken"]))
    operations = (await api.get("/v1/operations", params={"pageSize": 1})).json()
    real_operation = json.loads(base64.urlsafe_b64decode(operations["nextPageToken"]))
    # json.loads raised RecursionError (a 500) past ~1,000 levels
    deep = "[" * 5_000 + "]" * 5_000
    tokens = {
        RUNS: [
            _token({**real, "k": [OUT_OF_RANGE, real["k"][1]]}),
            _token({**real, "k": [real["k"][0], "a\x00b"]}),
            _token({**real, "k": ["99999-01-01T00:00:00Z", real["k"][1]]}),
            base64.urlsafe_b64encode(deep.encode()).decode(),
        ],
        "/v1/operations": [
            _token({**real_operation, "t": OUT_OF_RANGE}),
            _token({**real_operation, "o": 1e300}),
        ],
        "/v1/monitoredEvents": [
            _token(
                {"k": [OUT_OF_RANGE, "00000000-0000-0000-0000-000000000000"], "q": _query_hash("")}
            ),
        ],
        f"{RUN}/profilerSessions": [
            _token({"k": [OUT_OF_RANGE, "s1"], "q": _query_hash(known_run)}),
        ],
        f"{RUN}/metrics/loss": [
            base64.urlsafe_b64encode(b'{"s": 1e400, "i": 1, "t": 1}').decode(),
            _token({"s": 2**70, "i": 1, "t": 1}),
            _token({"s": "1", "i": 1, "t": 1}),
        ],
    }
    for path, bad_tokens in tokens.items():
        for token in bad_tokens:
            response = await api.get(path, params={"pageToken": token})
            _refused(response, 400, "invalid_page_token")


async def test_integers_and_times_beyond_their_columns_are_refused(
    api: httpx.AsyncClient, known_run: str
) -> None:
    target = {"host": "h1", "address": "h1:9012"}
    for field in ("processIndex", "pid"):
        for value in (2**31, 2**70):
            response = await api.post(f"{RUN}/profilerTargets", json={**target, field: value})
            _refused(response, 400, "invalid_argument", field)
    assert (await api.post(f"{RUN}/profilerTargets", json={**target, "pid": 2**31 - 1})).is_success

    for ttl in (2**70, 10**12):
        response = await api.post("/v1/apiTokens", json={"role": "viewer", "ttlSeconds": ttl})
        _refused(response, 400, "invalid_argument", "ttlSeconds")

    report = {"sessionId": "s1", "host": "h1", "phase": "SUCCEEDED"}
    for field, value in (
        ("sizeBytes", 2**63),
        ("startTime", OUT_OF_RANGE),
        ("endTime", "9999-12-31T23:00:00-14:00"),
        ("updateTime", OUT_OF_RANGE),
    ):
        response = await api.post(f"{RUN}/profilerSessions:report", json={**report, field: value})
        _refused(response, 400, "invalid_argument", field)


async def test_a_deeply_nested_body_is_a_400(api: httpx.AsyncClient, known_run: str) -> None:
    # Reproduction: json.loads raised RecursionError on this body (a 500).
    deep = b'{"workload":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    _refused(await api.patch(RUN, content=deep), 400, "invalid_argument")
    nested_configs = b'{"configs":{"userConfigs":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_002
    _refused(await api.patch(RUN, content=nested_configs), 400, "invalid_argument")


async def test_bodies_over_the_limit_get_413_while_reading(
    registry_settings_with: RegistrySettings, api_tokens: ApiTokens
) -> None:
    limit = 64 * 1024
    sent = 0

    async def chunks() -> Any:
        nonlocal sent
        for _ in range(1024):  # 64 MiB if read whole
            sent += 64 * 1024
            yield b" " * (64 * 1024)

    settings = registry_settings_with(max_body_bytes=limit)
    async with serving(create_app(settings), api_tokens.headers(Role.ADMIN)) as api:
        declared = await api.post(RUNS, content=b" " * (limit + 1))
        _refused(declared, 413, "payload_too_large")
        chunked = await api.post(RUNS, content=chunks())  # no Content-Length
        _refused(chunked, 413, "payload_too_large")
        assert sent <= 2 * limit  # reading stopped at the limit
        within = await api.post(RUNS, json={"displayName": "small"})
        assert within.status_code == 200, within.text


async def test_a_shared_resource_name_follows_the_id_grammar(
    api: httpx.AsyncClient, known_run: str
) -> None:
    for resource in (
        f"projects/a..b/locations/local/machineLearningRuns/{known_run}",
        f"projects/default/locations/Local/machineLearningRuns/{known_run}",
        "machineLearningRuns/Known-Run",
    ):
        response = await api.post("/v1/shareLinks", json={"resource": resource})
        _refused(response, 400, "invalid_share_resource")
    shared = await api.post("/v1/shareLinks", json={"resource": f"machineLearningRuns/{known_run}"})
    assert shared.status_code == 200, shared.text


@pytest.mark.parametrize(
    "authorization",
    [b"Bearer mldiag_share_abc.\xe9", b"Basic \xe9\xe9", b"Basic w6k=", b"Bearer \xe9"],
)
async def test_non_ascii_credentials_are_a_401(
    registry_settings_with: RegistrySettings, authorization: bytes
) -> None:
    # Reproduction: hmac.compare_digest and base64 raised on non-ASCII text (a 500).
    async with serving(create_app(registry_settings_with())) as anonymous:
        response = await anonymous.get("/v1/caller", headers={"Authorization": authorization})
        assert response.status_code == 401, response.text


async def test_an_sdk_upsert_on_a_gke_run_leaves_it_readable(api: httpx.AsyncClient) -> None:
    # Reproduction (found by the fuzzer): the upsert added a custom workload next to the
    # run's GKE one; the stored run then failed validation on every read (500s, for good).
    gke = {"gke": {"id": "job-1", "kind": "JobSet", "cluster": "c1"}}
    created = await api.post(
        RUNS,
        json={
            "runId": "gke-run",
            "displayName": "x",
            "logicalId": "gke-run",
            "workloadDetails": gke,
        },
    )
    assert created.status_code == 200, created.text
    upsert = await api.patch(
        RUNS,
        params={"allowMissing": "true"},
        json={"logicalId": "gke-run", "workload": {"workloadId": "w-2", "displayName": "renamed"}},
    )
    assert upsert.status_code == 200, upsert.text
    read = await api.get(f"{RUNS}/gke-run")
    assert read.status_code == 200, read.text
    assert read.json()["workloadDetails"]["gke"]["id"] == "job-1"
    assert read.json()["workloadId"] == "w-2"
