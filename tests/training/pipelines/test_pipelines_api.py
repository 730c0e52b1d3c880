"""Training pipelines over HTTP, on real NATS and PostgreSQL: the SDK's body creates a
pipeline and its job; the job's state changes (real facts on the bus) move the pipeline;
success imports the model the job wrote (once, whatever is redelivered or restarted), no
files fail it by name; cancel, delete, and bad input that leaves nothing behind.

The jobs here do not run (no executor): their facts are published as the scheduler would
publish them, so each step is deterministic and fast. The e2e test runs real ones.
"""

import copy
import json
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.bus import Publisher
from mldiag_schemas.auth import Role
from mldiag_schemas.jobs import JobState, RpcStatus
from mldiag_schemas.pipelines import PIPELINE_STATE_NUMBERS, TUNING_TASK_DEFINITION
from mldiag_schemas.replicas import CustomJobStateChanged
from mldiag_schemas.tuning import Trial, TrialState, TuningJobStateChanged
from mldiag_training.app import create_app
from mldiag_training.settings import TrainingSettings
from support import serving, wait_until
from training.pipelines.test_validation import SDK_CONTAINER_BODY, TUNING_BODY

pytestmark = pytest.mark.connected

SDK_QUERY = "?%24alt=json%3Benum-encoding%3Dint"
PARENT = "/v1/projects/default/locations/us-central1"
PIPELINES = f"{PARENT}/trainingPipelines"
BUCKET = "pipelines-test"


def _body(prefix: str, *, model: bool = True, tuning: bool = False) -> dict[str, Any]:
    body = copy.deepcopy(TUNING_BODY if tuning else SDK_CONTAINER_BODY)
    inputs = body["trainingTaskInputs"]
    spec = inputs["trial_job_spec"] if tuning else inputs
    spec["base_output_directory"] = {"output_uri_prefix": f"gs://{BUCKET}/{prefix}"}
    spec["worker_pool_specs"][0]["machine_spec"]["machine_type"] = "n1-standard-4"
    if tuning:
        body["modelToUpload"] = copy.deepcopy(SDK_CONTAINER_BODY["modelToUpload"])
    if not model:
        body.pop("modelToUpload", None)
    return body


def _storage(settings: TrainingSettings) -> Path:
    return Path(settings.storage.url.removeprefix("file://"))


def _write_model(settings: TrainingSettings, prefix: str) -> Path:
    """What a job writes to AIP_MODEL_DIR (``gs://<bucket>/<prefix>/model/``)."""
    folder = _storage(settings) / "gs" / BUCKET / prefix / "model"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "weights.bin").write_bytes(b"\x00" * 16)
    return folder


def _id(resource: dict[str, Any] | str) -> str:
    name = resource if isinstance(resource, str) else resource["name"]
    return str(name).rsplit("/", 1)[-1]


async def _create(api: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await api.post(PIPELINES + SDK_QUERY, json=body)
    assert response.status_code == 200, response.text
    created: dict[str, Any] = response.json()
    return created


async def _get(api: httpx.AsyncClient, name: str) -> dict[str, Any]:
    response = await api.get(f"/v1/{name}")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def _until(api: httpx.AsyncClient, name: str, state: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any]:
        return await _get(api, name)

    return await wait_until(probe, lambda found: found["state"] == state, timeout=20)


async def _job_moved(
    publisher: Publisher, job_id: str, state: JobState, error: RpcStatus | None = None
) -> None:
    """The fact the scheduler publishes when a custom job changes state."""
    await publisher.publish(
        CustomJobStateChanged(
            job_id=job_id,
            project="default",
            location="us-central1",
            previous_state=JobState.RUNNING,
            state=state,
            error=error,
        )
    )


def _backing_job(pipeline: dict[str, Any]) -> str:
    return str(pipeline["trainingTaskMetadata"]["backingCustomJob"])


async def test_the_sdks_body_creates_a_queued_pipeline_and_its_job(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool
) -> None:
    body = _body("created")
    pipeline = await _create(training_api, body)
    assert pipeline["state"] == PIPELINE_STATE_NUMBERS["PIPELINE_STATE_QUEUED"] == 1
    assert pipeline["name"].startswith(f"{PIPELINES[4:]}/")
    assert pipeline["trainingTaskInputs"] == body["trainingTaskInputs"]  # as sent
    job_name = _backing_job(pipeline)
    assert job_name.startswith("projects/default/locations/us-central1/customJobs/")
    job = await _get(training_api, job_name)
    assert job["state"] in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING")
    assert job["labels"] == {"mldiag-pipeline": _id(pipeline)}
    assert job["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"
    assert job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] == f"gs://{BUCKET}/created"
    # names, or numbers when asked; the short form of the path too
    by_name = await _get(training_api, pipeline["name"])
    assert by_name["state"] == "PIPELINE_STATE_QUEUED"
    assert by_name["modelToUpload"]["displayName"] == "m1"
    short = await training_api.get(f"/v1/trainingPipelines/{_id(pipeline)}")
    assert short.status_code == 404  # the short form is project default, location local
    listed = (await training_api.get(PIPELINES + SDK_QUERY)).json()
    assert [p["name"] for p in listed["trainingPipelines"]] == [pipeline["name"]]
    filtered = await training_api.get(PIPELINES, params={"filter": "state=PIPELINE_STATE_FAILED"})
    assert filtered.json().get("trainingPipelines", []) == []
    stored = await training_db.fetchval(
        "SELECT job_created FROM training_pipelines WHERE pipeline_id = $1", _id(pipeline)
    )
    assert stored is True


async def test_a_succeeded_job_imports_its_model_with_lineage(
    training_api: httpx.AsyncClient, training_settings: TrainingSettings, publisher: Publisher
) -> None:
    pipeline = await _create(training_api, _body("imported"))
    name, job_id = pipeline["name"], _id(_backing_job(pipeline))
    await _job_moved(publisher, job_id, JobState.PENDING)
    await _until(training_api, name, "PIPELINE_STATE_PENDING")
    await _job_moved(publisher, job_id, JobState.RUNNING)
    running = await _until(training_api, name, "PIPELINE_STATE_RUNNING")
    assert running["startTime"]
    _write_model(training_settings, "imported")
    await _job_moved(publisher, job_id, JobState.SUCCEEDED)
    done = await _until(training_api, name, "PIPELINE_STATE_SUCCEEDED")
    model = done["modelToUpload"]
    assert model["name"].startswith("projects/default/locations/us-central1/models/")
    assert model["versionId"] == "1"
    assert done["modelId"] == _id(model["name"])
    assert done["endTime"]
    version = await training_api.get(f"/v1/{model['name']}%401")
    assert version.status_code == 200, version.text
    seen = version.json()
    assert seen["artifactUri"] == f"gs://{BUCKET}/imported/model/"
    assert seen["displayName"] == "m1"
    assert seen["lineage"] == {
        "trainingPipeline": name,
        "customJob": _backing_job(pipeline),
        "hyperparameterTuningJob": "",
        "run": job_id,
    }


async def test_a_job_that_wrote_no_model_fails_the_pipeline_by_name(
    training_api: httpx.AsyncClient, publisher: Publisher
) -> None:
    pipeline = await _create(training_api, _body("empty"))
    await _job_moved(publisher, _id(_backing_job(pipeline)), JobState.SUCCEEDED)
    failed = await _until(training_api, pipeline["name"], "PIPELINE_STATE_FAILED")
    assert failed["error"]["message"] == (
        f"no model artifacts in AIP_MODEL_DIR (gs://{BUCKET}/empty/model/)"
    )
    assert failed["modelToUpload"].get("name", "") == ""  # nothing was imported


async def test_without_model_to_upload_the_jobs_success_is_the_pipelines(
    training_api: httpx.AsyncClient, publisher: Publisher
) -> None:
    pipeline = await _create(training_api, _body("plain", model=False))
    await _job_moved(publisher, _id(_backing_job(pipeline)), JobState.SUCCEEDED)
    done = await _until(training_api, pipeline["name"], "PIPELINE_STATE_SUCCEEDED")
    assert "modelToUpload" not in done


async def test_a_failed_job_fails_the_pipeline_with_its_error(
    training_api: httpx.AsyncClient, publisher: Publisher
) -> None:
    pipeline = await _create(training_api, _body("failing"))
    error = RpcStatus(code=3, message="workerpool0-0 exited with code 3")
    await _job_moved(publisher, _id(_backing_job(pipeline)), JobState.FAILED, error)
    failed = await _until(training_api, pipeline["name"], "PIPELINE_STATE_FAILED")
    assert failed["error"]["code"] == 3
    assert failed["error"]["message"] == "workerpool0-0 exited with code 3"
    # a late fact changes nothing: terminal states are sticky
    await _job_moved(publisher, _id(_backing_job(pipeline)), JobState.RUNNING)
    await _job_moved(publisher, _id(_backing_job(pipeline)), JobState.SUCCEEDED)
    probe = await _create(training_api, _body("after", model=False))  # a later fact is handled
    await _job_moved(publisher, _id(_backing_job(probe)), JobState.SUCCEEDED)
    await _until(training_api, probe["name"], "PIPELINE_STATE_SUCCEEDED")
    assert (await _get(training_api, pipeline["name"]))["state"] == "PIPELINE_STATE_FAILED"


async def test_cancel_cancels_the_job_then_the_pipeline_and_only_ended_ones_delete(
    training_api: httpx.AsyncClient,
) -> None:
    pipeline = await _create(training_api, _body("cancelled"))
    name = pipeline["name"]
    refused = await training_api.delete(f"/v1/{name}")
    assert refused.status_code == 400
    assert refused.json()["error"]["status"] == "FAILED_PRECONDITION"
    cancelled = await training_api.post(f"/v1/{name}:cancel{SDK_QUERY}", json={})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json() == {}
    # the scheduler ends the queued job CANCELLED; its fact ends the pipeline
    ended = await _until(training_api, name, "PIPELINE_STATE_CANCELLED")
    assert ended["error"]["code"] == 1
    job = await _get(training_api, _backing_job(pipeline))
    assert job["state"] == "JOB_STATE_CANCELLED"
    again = await training_api.post(f"/v1/{name}:cancel", json={})
    assert again.status_code == 400
    assert again.json()["error"]["status"] == "FAILED_PRECONDITION"
    deleted = await training_api.delete(f"/v1/{name}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["done"] is True
    assert deleted.json()["name"].startswith(f"{name}/operations/")
    gone = await training_api.get(f"/v1/{name}")
    assert gone.status_code == 404
    assert gone.json()["error"]["status"] == "NOT_FOUND"
    # the job stays
    assert (await _get(training_api, _backing_job(pipeline)))["state"] == "JOB_STATE_CANCELLED"


BAD_BODIES: list[tuple[dict[str, Any], int, str]] = [
    ({**_body("bad"), "inputDataConfig": {"datasetId": "1"}}, 501, "inputDataConfig"),
    (
        {**_body("bad"), "trainingTaskDefinition": "gs://x/automl_tables_1.0.0.yaml"},
        400,
        "trainingTaskDefinition",
    ),
    (
        {
            **_body("bad"),
            "trainingTaskInputs": {
                **_body("bad")["trainingTaskInputs"],
                "worker_pool_specs": [
                    {
                        **_body("bad")["trainingTaskInputs"]["worker_pool_specs"][0],
                        "replica_count": 1.5,
                    }
                ],
            },
        },
        400,
        "trainingTaskInputs.workerPoolSpecs[0].replicaCount",
    ),
    (
        {
            **_body("bad"),
            "trainingTaskInputs": {
                **_body("bad")["trainingTaskInputs"],
                "worker_pool_specs": [
                    {
                        **_body("bad")["trainingTaskInputs"]["worker_pool_specs"][0],
                        "machine_spec": {"machine_type": "no-such-machine"},
                    }
                ],
            },
        },
        400,
        "trainingTaskInputs.workerPoolSpecs[0].machineSpec.machineType",
    ),
]


async def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool
) -> None:
    for body, status, field in BAD_BODIES:
        response = await training_api.post(PIPELINES + SDK_QUERY, json=body)
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["status"] == ("UNIMPLEMENTED" if status == 501 else "INVALID_ARGUMENT")
        [violation] = error["details"][1]["fieldViolations"]
        assert violation["field"] == field
        assert field in error["message"]
    assert await training_db.fetchval("SELECT count(*) FROM training_pipelines") == 0
    assert await training_db.fetchval("SELECT count(*) FROM custom_jobs") == 0


async def test_every_route_needs_its_permission(
    training_api: httpx.AsyncClient, api_tokens: ApiTokens
) -> None:
    pipeline = await _create(training_api, _body("permissions"))
    viewer = api_tokens.headers(Role.VIEWER)
    assert (await training_api.get(f"/v1/{pipeline['name']}", headers=viewer)).is_success
    assert (await training_api.get(PIPELINES, headers=viewer)).is_success
    for method, path in (
        ("POST", PIPELINES),
        ("POST", f"/v1/{pipeline['name']}:cancel"),
        ("DELETE", f"/v1/{pipeline['name']}"),
    ):
        denied = await training_api.request(method, path, headers=viewer, json=_body("x"))
        assert denied.status_code == 403
        assert denied.json()["error"]["status"] == "PERMISSION_DENIED"


@pytest.fixture
def restartable(training_settings: TrainingSettings, api_tokens: ApiTokens) -> Any:
    """Start the training service again and again (each a fresh process's start)."""

    def start() -> Any:
        return serving(create_app(training_settings), api_tokens.headers(Role.EDITOR))

    return start


async def _versions(db: asyncpg.Pool) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM model_versions")
    return count


async def test_redelivery_and_restarts_import_one_version(
    restartable: Any,
    training_settings: TrainingSettings,
    training_db: asyncpg.Pool,
    publisher: Publisher,
) -> None:
    async with restartable() as api:
        pipeline = await _create(api, _body("once"))
        job_id = _id(_backing_job(pipeline))
        _write_model(training_settings, "once")
        await _job_moved(publisher, job_id, JobState.SUCCEEDED)
        await _job_moved(publisher, job_id, JobState.SUCCEEDED)  # a redelivered fact
        done = await _until(api, pipeline["name"], "PIPELINE_STATE_SUCCEEDED")
    assert await _versions(training_db) == 1
    # a crash after the import, before the pipeline's own update: the job has ended, the
    # pipeline still runs; the next start imports again and finds the same version
    await training_db.execute(
        "UPDATE training_pipelines SET state = 'PIPELINE_STATE_RUNNING', end_time = NULL,"
        " model_to_upload = $2::jsonb WHERE pipeline_id = $1",
        _id(pipeline),
        json.dumps(SDK_CONTAINER_BODY["modelToUpload"]),
    )
    await training_db.execute(
        "UPDATE custom_jobs SET state = 'JOB_STATE_SUCCEEDED' WHERE job_id = $1", job_id
    )
    async with restartable() as api:
        again = await _until(api, pipeline["name"], "PIPELINE_STATE_SUCCEEDED")
    assert again["modelToUpload"]["name"] == done["modelToUpload"]["name"]
    assert again["modelToUpload"]["versionId"] == "1"
    assert await _versions(training_db) == 1


async def test_a_pipeline_stored_without_its_job_gets_it_at_start(
    restartable: Any, training_db: asyncpg.Pool
) -> None:
    async with restartable() as api:
        pipeline = await _create(api, _body("reconciled", model=False))
    job_id = _id(_backing_job(pipeline))
    # as if the service died between the pipeline's commit and the job's create
    await training_db.execute("DELETE FROM custom_jobs WHERE job_id = $1", job_id)
    await training_db.execute(
        "UPDATE training_pipelines SET job_created = false WHERE pipeline_id = $1",
        _id(pipeline),
    )
    async with restartable() as api:
        job = await _get(api, _backing_job(pipeline))
        assert job["labels"] == {"mldiag-pipeline": _id(pipeline)}
    assert await training_db.fetchval(
        "SELECT job_created FROM training_pipelines WHERE pipeline_id = $1", _id(pipeline)
    )
    assert await training_db.fetchval("SELECT count(*) FROM custom_jobs") == 1


async def test_a_tuning_task_imports_the_best_trials_model(
    training_api: httpx.AsyncClient, training_settings: TrainingSettings, publisher: Publisher
) -> None:
    body = _body("tuned", tuning=True)
    assert body["trainingTaskDefinition"] == TUNING_TASK_DEFINITION
    pipeline = await _create(training_api, body)
    tuning_name = pipeline["trainingTaskMetadata"]["backingHyperparameterTuningJob"]
    tuning = await _get(training_api, tuning_name)
    assert tuning["maxTrialCount"] == 4
    _write_model(training_settings, "tuned/2")
    trial_job = "projects/default/locations/us-central1/customJobs/1234"
    await publisher.publish(
        TuningJobStateChanged(
            job_id=_id(tuning_name),
            project="default",
            location="us-central1",
            previous_state=JobState.RUNNING,
            state=JobState.SUCCEEDED,
            best_trial=Trial(id="2", state=TrialState.SUCCEEDED, custom_job=trial_job),
        )
    )
    done = await _until(training_api, pipeline["name"], "PIPELINE_STATE_SUCCEEDED")
    version = (await training_api.get(f"/v1/{done['modelToUpload']['name']}%401")).json()
    assert version["artifactUri"] == f"gs://{BUCKET}/tuned/2/model/"
    assert version["lineage"] == {
        "trainingPipeline": pipeline["name"],
        "customJob": trial_job,
        "hyperparameterTuningJob": tuning_name,
        "run": "1234",
    }


async def test_model_id_names_a_new_model_and_parent_model_adds_versions(
    training_api: httpx.AsyncClient, training_settings: TrainingSettings, publisher: Publisher
) -> None:
    first = await _create(training_api, {**_body("named"), "modelId": "digits-classifier"})
    _write_model(training_settings, "named")
    await _job_moved(publisher, _id(_backing_job(first)), JobState.SUCCEEDED)
    done = await _until(training_api, first["name"], "PIPELINE_STATE_SUCCEEDED")
    model_name = "projects/default/locations/us-central1/models/digits-classifier"
    assert done["modelToUpload"]["name"] == model_name
    assert done["modelId"] == "digits-classifier"
    second = await _create(training_api, {**_body("retrained"), "parentModel": model_name})
    _write_model(training_settings, "retrained")
    await _job_moved(publisher, _id(_backing_job(second)), JobState.SUCCEEDED)
    again = await _until(training_api, second["name"], "PIPELINE_STATE_SUCCEEDED")
    assert again["modelToUpload"]["name"] == model_name
    assert again["modelToUpload"]["versionId"] == "2"
    version = (await training_api.get(f"/v1/{model_name}%402")).json()
    assert version["artifactUri"] == f"gs://{BUCKET}/retrained/model/"
    # a parent that does not exist, or a model id that does, is refused before any job
    for body, status, field in (
        ({**_body("orphan"), "parentModel": f"{model_name}-nope"}, 400, "parentModel"),
        ({**_body("orphan"), "parentModel": "projects/x/locations/y/models/m"}, 400, "parentModel"),
        ({**_body("orphan"), "modelId": "digits-classifier"}, 409, "modelId"),
    ):
        refused = await training_api.post(PIPELINES, json=body)
        assert refused.status_code == status, refused.text
        assert refused.json()["error"]["details"][1]["fieldViolations"][0]["field"] == field
    listed = (await training_api.get(PIPELINES)).json()["trainingPipelines"]
    assert [p["name"] for p in listed] == [second["name"], first["name"]]
    # by id works as well as by name
    third = await _create(training_api, {**_body("by-id"), "parentModel": "digits-classifier"})
    _write_model(training_settings, "by-id")
    await _job_moved(publisher, _id(_backing_job(third)), JobState.SUCCEEDED)
    latest = await _until(training_api, third["name"], "PIPELINE_STATE_SUCCEEDED")
    assert latest["modelToUpload"]["versionId"] == "3"


async def test_list_pages_and_filters(training_api: httpx.AsyncClient) -> None:
    names = [
        (await _create(training_api, _body(f"page{n}", model=False)))["name"] for n in range(3)
    ]
    first = (await training_api.get(PIPELINES, params={"pageSize": 2})).json()
    assert [p["name"] for p in first["trainingPipelines"]] == names[::-1][:2]
    token = first["nextPageToken"]
    rest = (await training_api.get(PIPELINES, params={"pageSize": 2, "pageToken": token})).json()
    assert [p["name"] for p in rest["trainingPipelines"]] == names[:1]
    assert rest.get("nextPageToken", "") == ""
    queued = await training_api.get(
        PIPELINES,
        params={"filter": 'state=QUEUED AND display_name="ctj"', "orderBy": "create_time"},
    )
    assert [p["name"] for p in queued.json()["trainingPipelines"]] == names
    bad = await training_api.get(PIPELINES, params={"filter": "nope=1"})
    assert bad.status_code == 400
    assert bad.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_a_pipeline_whose_job_is_gone_fails_at_start_saying_so(
    restartable: Any, training_db: asyncpg.Pool
) -> None:
    async with restartable() as api:
        pipeline = await _create(api, _body("gone", model=False))
    job_id = _id(_backing_job(pipeline))
    # the job ended and was deleted while the service was down, its fact never read
    await training_db.execute("DELETE FROM custom_jobs WHERE job_id = $1", job_id)
    async with restartable() as api:
        failed = await _get(api, pipeline["name"])
    assert failed["state"] == "PIPELINE_STATE_FAILED"
    assert failed["error"] == {
        "code": 5,
        "message": f"the pipeline's job {job_id} was deleted",
        "details": [],
    }
