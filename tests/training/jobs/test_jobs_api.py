"""The custom-jobs API over HTTP, on real NATS and PostgreSQL: what the Vertex SDK sends is
stored and announced, read back in both enum encodings, listed, cancelled and deleted as
Vertex does; bad input is refused naming the field, and nothing is stored."""

import json
from typing import Any

import asyncpg
import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.bus import Publisher
from mldiag_platform.outbox import Outbox
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.auth import Role
from mldiag_schemas.jobs import CustomJobSpec, JobState
from mldiag_schemas.replicas import CustomJobCreated, CustomJobStateChanged
from mldiag_training.jobs.repository import JobsRepository
from mldiag_training.jobs.service import JobsService
from mldiag_training.jobs.validation import parse_custom_job
from mldiag_training.scheduler.machines import MachineTable
from support import read_messages, wait_until
from training.jobs.bodies import container_pool, sdk_job

pytestmark = pytest.mark.connected

SDK_QUERY = "?%24alt=json%3Benum-encoding%3Dint"
"""What the Vertex SDK appends to every request."""

LONG = "/v1/projects/default/locations/local/customJobs"
REGION = "/v1/projects/my-project/locations/us-central1/customJobs"


async def create(api: httpx.AsyncClient, path: str = "/v1/customJobs", **body: Any) -> Any:
    response = await api.post(path + SDK_QUERY, json={**sdk_job(), **body})
    assert response.status_code == 200, response.text
    return response.json()


def job_id(job: dict[str, Any]) -> str:
    return str(job["name"]).rsplit("/", 1)[-1]


async def set_state(db: asyncpg.Pool, job: dict[str, Any], state: JobState) -> None:
    """Arrange a state only the scheduler would reach (a job that has ended)."""
    await db.execute(
        "UPDATE custom_jobs SET state = $2, end_time = now() WHERE job_id = $1",
        job_id(job),
        state.value,
    )


async def test_a_job_is_stored_queued_and_announced_after_commit(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool, nats_settings: NatsSettings
) -> None:
    job = await create(training_api, labels={"team": "vision"})
    identifier = job_id(job)
    assert identifier.isdigit() and len(identifier) == 19
    assert job["name"] == f"projects/default/locations/local/customJobs/{identifier}"
    assert job["state"] == 1  # JOB_STATE_QUEUED, as enum-encoding=int asks
    assert job["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"
    assert job["labels"] == {"team": "vision"}
    assert job["createTime"] == job["updateTime"]
    assert "error" not in job and "startTime" not in job and job["webAccessUris"] == {}

    row = await training_db.fetchrow("SELECT * FROM custom_jobs WHERE job_id = $1", identifier)
    assert row is not None
    assert row["state"] == "JOB_STATE_QUEUED"
    assert (row["project"], row["location"], row["display_name"]) == ("default", "local", "train")
    assert row["deadline"] > row["create_time"]
    assert (row["deadline"] - row["create_time"]).days == 7  # Vertex's default timeout

    [created] = await wait_until(
        lambda: read_messages(nats_settings, bus.JOB_CREATED, CustomJobCreated), bool
    )
    assert created.job_id == identifier
    assert created.partition() == identifier  # the subject's last token
    assert created.run_set == "training-jobs"
    assert created.job.name == job["name"]
    assert created.job.state is JobState.QUEUED


async def test_the_experiment_is_the_run_set_and_the_timeout_the_deadline(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool, nats_settings: NatsSettings
) -> None:
    spec = sdk_job(experiment="sweeps", scheduling={"timeout": "600s"})["jobSpec"]
    job = await create(training_api, jobSpec=spec)
    row = await training_db.fetchrow(
        "SELECT create_time, deadline FROM custom_jobs WHERE job_id = $1", job_id(job)
    )
    assert row is not None
    assert (row["deadline"] - row["create_time"]).total_seconds() == 600
    [created] = await wait_until(
        lambda: read_messages(nats_settings, bus.JOB_CREATED, CustomJobCreated), bool
    )
    assert created.run_set == "sweeps"


async def test_get_answers_names_or_numbers_as_asked(training_api: httpx.AsyncClient) -> None:
    job = await create(training_api)
    by_name = await training_api.get(f"/v1/customJobs/{job_id(job)}")
    assert by_name.status_code == 200
    assert by_name.json()["state"] == "JOB_STATE_QUEUED"
    by_number = await training_api.get(f"{LONG}/{job_id(job)}{SDK_QUERY}")
    assert by_number.json()["state"] == 1
    assert by_number.json()["name"] == job["name"]


async def test_a_region_works_as_a_location_and_parents_are_apart(
    training_api: httpx.AsyncClient,
) -> None:
    job = await create(training_api, REGION)
    assert job["name"].startswith("projects/my-project/locations/us-central1/customJobs/")
    found = await training_api.get(f"{REGION}/{job_id(job)}{SDK_QUERY}")
    assert found.status_code == 200
    elsewhere = await training_api.get(f"/v1/customJobs/{job_id(job)}")
    assert elsewhere.status_code == 404
    listed = (await training_api.get(REGION)).json()
    assert [j["name"] for j in listed["customJobs"]] == [job["name"]]
    assert (await training_api.get("/v1/customJobs")).json()["customJobs"] == []


async def test_an_unknown_job_is_not_found_in_vertex_shape(
    training_api: httpx.AsyncClient,
) -> None:
    response = await training_api.get(f"{LONG}/1234567890123456789{SDK_QUERY}")
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == 404
    assert error["status"] == "NOT_FOUND"
    assert "1234567890123456789" in error["message"]
    assert error["details"][0]["reason"] == "not_found"
    for path in ("/v1/customJobs/NOT_AN_ID", "/v1/projects/Bad/locations/local/customJobs"):
        bad = await training_api.get(path)
        assert bad.status_code == 400
        assert bad.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_list_filters_orders_and_pages(training_api: httpx.AsyncClient) -> None:
    made = []
    for name, team in (("alpha", "a"), ("bravo", "b"), ("charlie", "a"), ("delta", "a")):
        made.append(await create(training_api, displayName=name, labels={"team": team}))

    async def names(query: str) -> list[str]:
        response = await training_api.get(f"/v1/customJobs?{query}")
        assert response.status_code == 200, response.text
        return [job["displayName"] for job in response.json()["customJobs"]]

    assert await names("") == ["delta", "charlie", "bravo", "alpha"]  # newest first
    assert await names("orderBy=create_time") == ["alpha", "bravo", "charlie", "delta"]
    assert await names("orderBy=display_name desc") == ["delta", "charlie", "bravo", "alpha"]
    assert await names("orderBy=update_time desc") == ["delta", "charlie", "bravo", "alpha"]
    assert await names('filter=display_name="bravo"') == ["bravo"]
    assert await names("filter=labels.team=a AND state=JOB_STATE_QUEUED") == [
        "delta",
        "charlie",
        "alpha",
    ]
    assert await names("filter=state=JOB_STATE_RUNNING") == []
    assert await names("filter=state=1 AND NOT displayName=alpha&order_by=display_name") == [
        "bravo",
        "charlie",
        "delta",
    ]

    pages: list[list[str]] = []
    token = ""
    while True:
        response = await training_api.get(
            "/v1/customJobs", params={"pageSize": 3, "pageToken": token, "orderBy": "display_name"}
        )
        page = response.json()
        pages.append([job["displayName"] for job in page["customJobs"]])
        token = page["nextPageToken"]
        if not token:
            break
    assert pages == [["alpha", "bravo", "charlie"], ["delta"]]
    page_size_snake = await training_api.get("/v1/customJobs?page_size=1")
    assert len(page_size_snake.json()["customJobs"]) == 1
    assert page_size_snake.json()["nextPageToken"]


BAD_LIST_QUERIES = [
    ("filter=colour=blue", "invalid_filter"),
    ("filter=state=JOB_STATE_SLEEPING", "invalid_filter"),
    ("filter=(state=1", "invalid_filter"),
    ("orderBy=labels", "invalid_order_by"),
    ("orderBy=end_time", "invalid_order_by"),
    ("pageSize=-1", "invalid_page_size"),
    ("pageSize=many", "invalid_page_size"),
    ("pageToken=garbage", "invalid_page_token"),
]


async def test_bad_list_queries_are_invalid_arguments(training_api: httpx.AsyncClient) -> None:
    # One service for every case: starting one costs more than the calls.
    for query, reason in BAD_LIST_QUERIES:
        response = await training_api.get(f"/v1/customJobs?{query}")
        assert response.status_code == 400, (query, response.text)
        error = response.json()["error"]
        assert error["status"] == "INVALID_ARGUMENT"
        assert error["details"][0]["reason"] == reason, query


async def test_a_page_token_is_bound_to_its_filter(training_api: httpx.AsyncClient) -> None:
    for _ in range(2):
        await create(training_api)
    first = (await training_api.get("/v1/customJobs?pageSize=1")).json()
    other = await training_api.get(
        "/v1/customJobs", params={"pageToken": first["nextPageToken"], "orderBy": "display_name"}
    )
    assert other.status_code == 400
    assert other.json()["error"]["details"][0]["reason"] == "invalid_page_token"


async def test_cancel_marks_the_job_cancelling_and_announces_it(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool, nats_settings: NatsSettings
) -> None:
    job = await create(training_api)
    response = await training_api.post(f"{LONG}/{job_id(job)}:cancel{SDK_QUERY}", json={})
    assert response.status_code == 200
    assert response.json() == {}
    row = await training_db.fetchrow(
        "SELECT state, cancel_requested FROM custom_jobs WHERE job_id = $1", job_id(job)
    )
    assert row is not None and row["cancel_requested"]
    # The scheduler may already have ended it (a queued job has nothing to stop).
    assert row["state"] in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    changes = await wait_until(
        lambda: read_messages(nats_settings, bus.JOB_STATE_CHANGED, CustomJobStateChanged), bool
    )
    first = changes[0]
    assert (first.job_id, first.previous_state, first.state) == (
        job_id(job),
        JobState.QUEUED,
        JobState.CANCELLING,
    )
    again = await training_api.post(f"/v1/customJobs/{job_id(job)}:cancel", json={})
    assert again.status_code in (200, 400)  # CANCELLING: fine; CANCELLED: it has ended


async def test_cancelling_an_ended_job_is_a_failed_precondition(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool
) -> None:
    for state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        job = await create(training_api)
        await set_state(training_db, job, state)
        response = await training_api.post(f"/v1/customJobs/{job_id(job)}:cancel", json={})
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["status"] == "FAILED_PRECONDITION"
        assert error["details"][0]["reason"] == "job_ended"
        stored = await training_db.fetchval(
            "SELECT state FROM custom_jobs WHERE job_id = $1", job_id(job)
        )
        assert stored == state.value


async def test_only_an_ended_job_is_deleted(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool
) -> None:
    job = await create(training_api)
    path = f"{LONG}/{job_id(job)}"
    refused = await training_api.delete(path + SDK_QUERY)
    assert refused.status_code == 400
    assert refused.json()["error"]["status"] == "FAILED_PRECONDITION"
    assert (await training_api.get(path)).status_code == 200

    await set_state(training_db, job, JobState.SUCCEEDED)
    deleted = await training_api.delete(path + SDK_QUERY)
    assert deleted.status_code == 200
    operation = deleted.json()
    assert operation["name"].startswith(job["name"] + "/operations/")
    assert operation["done"] is True
    assert operation["response"] == {"@type": "type.googleapis.com/google.protobuf.Empty"}
    assert (await training_api.get(path)).status_code == 404
    assert (await training_api.delete(path)).status_code == 404


async def test_replicas_are_listed_by_pool_and_index(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool
) -> None:
    job = await create(training_api)
    path = f"/v1/customJobs/{job_id(job)}/replicas"
    assert (await training_api.get(path)).json() == {"replicas": []}
    await training_db.executemany(
        "INSERT INTO replicas (job_id, pool, index, attempt, state, executor_id, host,"
        " exit_code) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        [
            (job_id(job), 1, 0, 0, "RUNNING", "exec-1", "node-b", None),
            (job_id(job), 0, 0, 2, "FAILED", "exec-1", "node-a", 1),
        ],
    )
    replicas = (await training_api.get(path + SDK_QUERY)).json()["replicas"]
    assert [(r["name"], r["state"], r["attempt"]) for r in replicas] == [
        ("workerpool0-0", "FAILED", 2),
        ("workerpool1-0", "RUNNING", 0),
    ]
    assert replicas[0]["exitCode"] == 1 and replicas[0]["executor"] == "exec-1"
    missing = await training_api.get("/v1/customJobs/1/replicas")
    assert missing.status_code == 404


BAD_BODIES = [
    ({**sdk_job(), "colour": "blue"}, 400, "colour"),
    ({**sdk_job(), "displayName": 7}, 400, "displayName"),
    (sdk_job(workerPoolSpecs=[]), 400, "jobSpec.workerPoolSpecs"),
    (sdk_job(workerPoolSpecs=[{}, container_pool()]), 400, "jobSpec.workerPoolSpecs"),
    (sdk_job(workerPoolSpecs=[container_pool(), {}]), 400, "jobSpec.workerPoolSpecs"),
    (
        sdk_job(workerPoolSpecs=[container_pool("2")]),
        400,
        "jobSpec.workerPoolSpecs[0].replicaCount",
    ),
    (
        sdk_job(workerPoolSpecs=[container_pool(), container_pool("1", "z9-imaginary")]),
        400,
        "jobSpec.workerPoolSpecs[1].machineSpec.machineType",
    ),
    (sdk_job(network="vpc"), 501, "jobSpec.network"),
    (sdk_job(scheduling={"strategy": "FLEX_START"}), 501, "jobSpec.scheduling.strategy"),
    (
        sdk_job(baseOutputDirectory={"outputUriPrefix": "/tmp/x"}),
        400,
        "jobSpec.baseOutputDirectory.outputUriPrefix",
    ),
    ({**sdk_job(), "labels": {"Bad": "x"}}, 400, "labels.Bad.[key]"),
]
"""One of each kind (test_validation.py has them all); here: through HTTP, nothing kept."""


async def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool, nats_settings: NatsSettings
) -> None:
    for body, status, field in BAD_BODIES:
        response = await training_api.post("/v1/customJobs" + SDK_QUERY, json=body)
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["code"] == status
        assert error["status"] == ("UNIMPLEMENTED" if status == 501 else "INVALID_ARGUMENT")
        [violation] = error["details"][1]["fieldViolations"]
        assert violation["field"] == field
        assert field in error["message"]
    for raw in (b"not json", b"[]", b'{"displayName": "a\\u0000"}'):
        response = await training_api.post("/v1/customJobs", content=raw)
        assert response.status_code == 400, raw
        assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert await training_db.fetchval("SELECT count(*) FROM custom_jobs") == 0
    assert await training_db.fetchval("SELECT count(*) FROM outbox") == 0
    assert await read_messages(nats_settings, bus.JOB_CREATED, CustomJobCreated) == []


async def test_a_body_over_the_limit_is_refused_in_vertex_shape(
    training_api: httpx.AsyncClient,
) -> None:
    huge = json.dumps({**sdk_job(), "displayName": "x" * (17 * 1024 * 1024)}).encode()
    response = await training_api.post("/v1/customJobs", content=huge)
    assert response.status_code == 413
    assert response.json()["error"]["details"][0]["reason"] == "payload_too_large"


async def test_every_route_needs_its_permission(
    training_api: httpx.AsyncClient, api_tokens: ApiTokens
) -> None:
    job = await create(training_api)
    viewer = api_tokens.headers(Role.VIEWER)
    assert (await training_api.get(f"/v1/customJobs/{job_id(job)}", headers=viewer)).is_success
    assert (await training_api.get("/v1/customJobs", headers=viewer)).is_success
    for method, path in (
        ("POST", "/v1/customJobs"),
        ("POST", f"/v1/customJobs/{job_id(job)}:cancel"),
        ("DELETE", f"/v1/customJobs/{job_id(job)}"),
    ):
        denied = await training_api.request(method, path, headers=viewer, json=sdk_job())
        assert denied.status_code == 403
        assert denied.json()["error"]["status"] == "PERMISSION_DENIED"
    anonymous = await training_api.get("/v1/customJobs", headers={"Authorization": ""})
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["status"] == "UNAUTHENTICATED"


async def test_routing_errors_speak_vertex_too(training_api: httpx.AsyncClient) -> None:
    missing = await training_api.get("/v1/nothingHere")
    assert missing.status_code == 404
    assert missing.json()["error"]["status"] == "NOT_FOUND"
    wrong = await training_api.put("/v1/customJobs")
    assert wrong.status_code == 405
    assert wrong.json()["error"]["code"] == 405
    control = await training_api.get("/v1/customJobs", params={"filter": "state=\x01"})
    assert control.status_code == 400
    assert control.json()["error"]["status"] == "INVALID_ARGUMENT"


class LateScheduler:
    """A scheduler whose nudges fail (its tick would find the jobs anyway)."""

    async def refuse_unfittable(self, spec: CustomJobSpec) -> None:
        del spec

    async def cancel_requested(self, job_id: str) -> None:
        raise RuntimeError(f"scheduler busy with {job_id}")


async def test_a_failing_scheduler_nudge_loses_nothing(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool, publisher: Publisher
) -> None:
    outbox = Outbox(training_db, publisher)
    service = JobsService(
        JobsRepository(training_db, outbox), outbox, LateScheduler(), MachineTable()
    )
    job = await service.create("default", "local", parse_custom_job(json.dumps(sdk_job()).encode()))
    await service.cancel("default", "local", job_id(job.model_dump(mode="json")))
    stored = (
        await training_api.get(f"/v1/customJobs/{job_id(job.model_dump(mode='json'))}")
    ).json()
    assert stored["state"] in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
