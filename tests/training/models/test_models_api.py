"""The model registry over HTTP, on real PostgreSQL: uploads as the Vertex SDK sends them,
versions and aliases by Vertex's rules, lists and paging, updates, deletes, and bad input
refused naming the field with nothing stored; a training pipeline's import is idempotent."""

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from mldiag_schemas.models import Model, ModelLineage
from mldiag_training.models.artifacts import ArtifactFiles
from mldiag_training.models.errors import ModelNotFound, NoModelArtifacts
from mldiag_training.models.repository import ModelsRepository
from mldiag_training.models.service import ModelsService
from mldiag_training.settings import TrainingSettings

pytestmark = pytest.mark.connected

SDK_QUERY = "?%24alt=json%3Benum-encoding%3Dint"
"""What the Vertex SDK appends to every request."""
LONG = "/v1/projects/default/locations/local/models"
IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-3:latest"


@pytest.fixture
def storage_root(training_settings: TrainingSettings) -> Path:
    return Path(training_settings.storage.url.removeprefix("file://"))


@pytest.fixture
def artifacts(storage_root: Path) -> str:
    """``gs://models/run-1/model``, holding a model file (on file storage)."""
    folder = storage_root / "gs" / "models" / "run-1" / "model"
    folder.mkdir(parents=True)
    (folder / "model.pkl").write_bytes(b"weights")
    return "gs://models/run-1/model"


def sdk_model(artifact_uri: str, **fields: Any) -> dict[str, Any]:
    """A Model as ``aiplatform.Model.upload`` sends it (empty explanationSpec included)."""
    return {
        "displayName": "iris",
        "artifactUri": artifact_uri,
        "containerSpec": {"imageUri": IMAGE, "ports": [{"containerPort": 8080}]},
        "versionAliases": ["default"],
        "explanationSpec": {},
        **fields,
    }


async def upload(api: httpx.AsyncClient, path: str = "/v1/models", **body: Any) -> Any:
    response = await api.post(f"{path}:upload{SDK_QUERY}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def model_id(operation: dict[str, Any]) -> str:
    return str(operation["response"]["model"]).rsplit("/", 1)[-1]


async def get(api: httpx.AsyncClient, name: str, query: str = SDK_QUERY) -> Any:
    response = await api.get(f"/v1/models/{name}{query}")
    assert response.status_code == 200, response.text
    return response.json()


async def refused(response: httpx.Response, status: int, field: str | None = None) -> Any:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if field is not None:
        violations = next(d for d in error["details"] if d["@type"].endswith("BadRequest"))[
            "fieldViolations"
        ]
        assert violations[0]["field"] == field, error
    return error


async def test_an_upload_is_a_done_operation_and_the_model_reads_back(
    training_api: httpx.AsyncClient, artifacts: str
) -> None:
    operation = await upload(training_api, model=sdk_model(artifacts, labels={"team": "a"}))
    identifier = model_id(operation)
    assert identifier.isdigit() and len(identifier) == 19
    name = f"projects/default/locations/local/models/{identifier}"
    assert operation["done"] is True
    assert operation["name"].startswith(f"{name}/operations/")
    assert operation["response"] == {
        "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
        "model": name,
        "modelVersionId": "1",
    }
    # The SDK may poll it: the operation answers again.
    again = await training_api.get(f"/v1/{operation['name']}{SDK_QUERY}")
    assert again.status_code == 200 and again.json() == operation

    model = await get(training_api, identifier)
    assert model["name"] == name and model["versionId"] == "1"
    assert model["versionAliases"] == ["default"]
    assert model["displayName"] == "iris" and model["artifactUri"] == artifacts
    assert model["containerSpec"] == {
        "imageUri": IMAGE,
        "command": [],
        "args": [],
        "env": [],
        "ports": [{"containerPort": 8080}],
        "predictRoute": "",
        "healthRoute": "",
    }
    assert model["labels"] == {"team": "a"}
    assert model["modelSourceInfo"] == {"sourceType": 2, "copy": False}  # CUSTOM, as int asks
    assert model["createTime"] == model["versionCreateTime"]
    assert model["etag"] and "lineage" not in model and model["trainingPipeline"] == ""
    by_name = await get(training_api, identifier, "")
    assert by_name["modelSourceInfo"]["sourceType"] == "CUSTOM"
    long_form = await training_api.get(f"{LONG}/{identifier}")
    assert long_form.json() == by_name


async def test_versions_default_and_the_at_forms(
    training_api: httpx.AsyncClient, artifacts: str
) -> None:
    first = await upload(
        training_api, model=sdk_model(artifacts, versionAliases=["default", "prod"])
    )
    identifier = model_id(first)
    full = f"projects/default/locations/local/models/{identifier}"
    second = await upload(
        training_api, model=sdk_model(artifacts, versionDescription="v2"), parentModel=full
    )
    assert model_id(second) == identifier and second["response"]["modelVersionId"] == "2"
    # is_default_version=False sends no aliases: the default stays where it is.
    third = await upload(
        training_api, model=sdk_model(artifacts, versionAliases=[]), parentModel=identifier
    )
    assert third["response"]["modelVersionId"] == "3"

    default = await get(training_api, identifier)
    assert default["versionId"] == "2" and default["versionAliases"] == ["default"]
    assert (await get(training_api, f"{identifier}@1"))["versionAliases"] == ["prod"]
    assert (await get(training_api, f"{identifier}%401"))["versionId"] == "1"  # as the SDK sends
    assert (await get(training_api, f"{identifier}@prod"))["versionId"] == "1"
    assert (await get(training_api, f"{identifier}%40default"))["versionId"] == "2"
    assert (await get(training_api, f"{identifier}@3"))["versionAliases"] == []
    assert (await get(training_api, f"{identifier}@2"))["versionDescription"] == "v2"
    await refused(await training_api.get(f"/v1/models/{identifier}@4"), 404)
    await refused(await training_api.get(f"/v1/models/{identifier}@staging"), 404)
    await refused(await training_api.get(f"/v1/models/{identifier}@Bad_alias"), 400)


async def test_a_chosen_model_id_and_a_taken_one(
    training_api: httpx.AsyncClient, artifacts: str, training_db: asyncpg.Pool
) -> None:
    operation = await upload(training_api, model=sdk_model(artifacts), modelId="iris-model")
    assert model_id(operation) == "iris-model"
    response = await training_api.post(
        f"/v1/models:upload{SDK_QUERY}",
        json={"model": sdk_model(artifacts), "modelId": "iris-model"},
    )
    error = await refused(response, 409)
    assert error["status"] == "ALREADY_EXISTS"
    assert await training_db.fetchval("SELECT count(*) FROM model_versions") == 1
    bad = await training_api.post(
        "/v1/models:upload", json={"model": sdk_model(artifacts), "modelId": "Iris_Model"}
    )
    await refused(bad, 400, "modelId")


async def test_listing_models_pages_and_filters(
    training_api: httpx.AsyncClient, artifacts: str
) -> None:
    ids = []
    for index in range(5):
        labels = {"parity": "even" if index % 2 == 0 else "odd"}
        operation = await upload(
            training_api, model=sdk_model(artifacts, displayName=f"m{index}", labels=labels)
        )
        ids.append(model_id(operation))
    # A second version of the first model: the list shows its default (the new one).
    await upload(training_api, model=sdk_model(artifacts, displayName="x"), parentModel=ids[0])

    seen: list[str] = []
    token = ""
    while True:
        response = await training_api.get("/v1/models", params={"pageSize": 2, "pageToken": token})
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["models"]) <= 2
        seen += [model["name"].rsplit("/", 1)[-1] for model in page["models"]]
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert seen == list(reversed(ids))  # newest first, each model once
    listed = (await training_api.get("/v1/models")).json()["models"]
    assert [m["versionId"] for m in listed if m["name"].endswith(ids[0])] == ["2"]

    even = (await training_api.get("/v1/models", params={"filter": "labels.parity=even"})).json()
    assert sorted(m["name"].rsplit("/", 1)[-1] for m in even["models"]) == sorted(
        [ids[2], ids[4]]  # ids[0]'s default (version 2) has no labels
    )
    named = await training_api.get("/v1/models", params={"filter": 'display_name="m3"'})
    assert [m["name"].rsplit("/", 1)[-1] for m in named.json()["models"]] == [ids[3]]
    oldest = await training_api.get("/v1/models", params={"orderBy": "create_time", "pageSize": 1})
    assert oldest.json()["models"][0]["name"].endswith(ids[0])
    await refused(await training_api.get("/v1/models", params={"filter": "nope=1"}), 400)
    await refused(await training_api.get("/v1/models", params={"pageToken": "junk"}), 400)


async def test_listing_versions_pages_in_version_order(
    training_api: httpx.AsyncClient, artifacts: str
) -> None:
    identifier = model_id(await upload(training_api, model=sdk_model(artifacts)))
    for _ in range(4):
        await upload(training_api, model=sdk_model(artifacts), parentModel=identifier)
    seen: list[str] = []
    token = ""
    while True:
        response = await training_api.get(
            f"/v1/models/{identifier}:listVersions{SDK_QUERY}",
            params={"pageSize": 2, "pageToken": token},
        )
        assert response.status_code == 200, response.text
        page = response.json()
        seen += [model["versionId"] for model in page["models"]]
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert seen == ["1", "2", "3", "4", "5"]
    newest = await training_api.get(
        f"/v1/models/{identifier}:listVersions", params={"orderBy": "create_time desc"}
    )
    assert [m["versionId"] for m in newest.json()["models"]] == ["5", "4", "3", "2", "1"]
    await refused(await training_api.get("/v1/models/404:listVersions"), 404)


async def test_aliases_move_merge_and_stay_unique(
    training_api: httpx.AsyncClient, artifacts: str
) -> None:
    identifier = model_id(
        await upload(training_api, model=sdk_model(artifacts, versionAliases=["prod"]))
    )
    # A new version taking "prod" takes it from version 1.
    await upload(
        training_api, model=sdk_model(artifacts, versionAliases=["prod"]), parentModel=identifier
    )
    assert (await get(training_api, f"{identifier}@1"))["versionAliases"] == ["default"]
    assert (await get(training_api, f"{identifier}@2"))["versionAliases"] == ["prod"]

    merged = await training_api.post(
        f"/v1/models/{identifier}@1:mergeVersionAliases{SDK_QUERY}",
        json={"versionAliases": ["prod", "golden"]},
    )
    assert merged.status_code == 200, merged.text
    assert merged.json()["versionAliases"] == ["default", "golden", "prod"]
    assert (await get(training_api, f"{identifier}@2"))["versionAliases"] == []
    removed = await training_api.post(
        f"/v1/models/{identifier}@golden:mergeVersionAliases",
        json={"versionAliases": ["-golden", "-absent"]},
    )
    assert removed.json()["versionAliases"] == ["default", "prod"]
    # Moving default by merge.
    moved = await training_api.post(
        f"/v1/models/{identifier}@2:mergeVersionAliases", json={"versionAliases": ["default"]}
    )
    assert moved.json()["versionAliases"] == ["default"]
    assert (await get(training_api, identifier))["versionId"] == "2"

    merge = f"/v1/models/{identifier}@1:mergeVersionAliases"
    await refused(await training_api.post(merge, json={"versionAliases": ["12"]}), 400)
    await refused(await training_api.post(merge, json={"versionAliases": ["Bad"]}), 400)
    await refused(await training_api.post(merge, json={"versionAliases": ["-default"]}), 400)
    await refused(await training_api.post(merge, json={"versionAliases": []}), 400)
    await refused(
        await training_api.post(
            f"/v1/models/{identifier}:mergeVersionAliases", json={"versionAliases": ["x1"]}
        ),
        400,
    )
    bad_upload = await training_api.post(
        "/v1/models:upload",
        json={"model": sdk_model(artifacts, versionAliases=["default", "7"])},
    )
    await refused(bad_upload, 400, "model.versionAliases[1]")


async def test_updating_the_model_and_a_version(
    training_api: httpx.AsyncClient, artifacts: str
) -> None:
    identifier = model_id(await upload(training_api, model=sdk_model(artifacts)))
    await upload(
        training_api, model=sdk_model(artifacts, versionAliases=[]), parentModel=identifier
    )
    response = await training_api.patch(
        f"/v1/models/{identifier}{SDK_QUERY}&updateMask=displayName,description",
        json={
            "displayName": "renamed",
            "description": "a model",
            "labels": {"ignored": "x"},
            "explanationSpec": {"parameters": {}},  # outside the mask: ignored, as in Vertex
            "versionId": "9",
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["displayName"] == "renamed"
    assert response.json()["labels"] == {}  # not in the mask
    version = await training_api.patch(
        f"/v1/models/{identifier}@2",
        params={"updateMask": "labels,version_description"},
        json={"labels": {"stage": "test"}, "versionDescription": "second"},
    )
    assert version.status_code == 200, version.text
    body = version.json()
    assert (body["labels"], body["versionDescription"]) == ({"stage": "test"}, "second")
    assert body["displayName"] == "renamed"  # the model's, on every version
    assert (await get(training_api, f"{identifier}@1"))["labels"] == {}
    await refused(
        await training_api.patch(
            f"/v1/models/{identifier}", params={"updateMask": "artifactUri"}, json={}
        ),
        400,
        "updateMask",
    )
    await refused(await training_api.patch(f"/v1/models/{identifier}", json={}), 400, "updateMask")


async def test_deleting_versions_and_models(
    training_api: httpx.AsyncClient, artifacts: str, training_db: asyncpg.Pool
) -> None:
    identifier = model_id(await upload(training_api, model=sdk_model(artifacts)))
    await upload(
        training_api, model=sdk_model(artifacts, versionAliases=["beta"]), parentModel=identifier
    )
    # Version 1 is the default: not while version 2 exists.
    error = await refused(await training_api.delete(f"/v1/models/{identifier}@1"), 400)
    assert error["status"] == "FAILED_PRECONDITION"
    deleted = await training_api.delete(f"/v1/models/{identifier}@beta:deleteVersion{SDK_QUERY}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["done"] is True
    assert deleted.json()["response"] == {"@type": "type.googleapis.com/google.protobuf.Empty"}
    await refused(await training_api.get(f"/v1/models/{identifier}@2"), 404)
    # Version ids are never reused.
    again = await upload(training_api, model=sdk_model(artifacts), parentModel=identifier)
    assert again["response"]["modelVersionId"] == "3"
    # The default moved to 3 (the SDK sends "default"): now 1 may go, 3 may not.
    await refused(await training_api.delete(f"/v1/models/{identifier}%403"), 400)
    assert (await training_api.delete(f"/v1/models/{identifier}@1")).status_code == 200
    # The last version takes the model with it.
    last = await training_api.delete(f"/v1/models/{identifier}@default")
    assert last.status_code == 200, last.text
    await refused(await training_api.get(f"/v1/models/{identifier}"), 404)
    assert await training_db.fetchval("SELECT count(*) FROM models") == 0
    # The operation outlives the model.
    assert (await training_api.get(f"/v1/{last.json()['name']}")).status_code == 200

    other = model_id(await upload(training_api, model=sdk_model(artifacts)))
    await upload(training_api, model=sdk_model(artifacts), parentModel=other)
    whole = await training_api.delete(f"{LONG}/{other}")
    assert whole.status_code == 200, whole.text
    assert await training_db.fetchval("SELECT count(*) FROM model_versions") == 0
    assert await training_db.fetchval("SELECT count(*) FROM model_aliases") == 0
    await refused(await training_api.delete(f"{LONG}/{other}"), 404)


async def test_bad_uploads_are_refused_by_name_and_nothing_is_stored(
    training_api: httpx.AsyncClient,
    artifacts: str,
    storage_root: Path,
    training_db: asyncpg.Pool,
    tmp_path: Path,
) -> None:
    empty = storage_root / "gs" / "models" / "empty"
    empty.mkdir(parents=True)
    (empty / "sub").mkdir()

    async def refuse(body: dict[str, Any], status: int, field: str | None = None) -> Any:
        response = await training_api.post(f"/v1/models:upload{SDK_QUERY}", json=body)
        return await refused(response, status, field)

    error = await refuse({"model": sdk_model("gs://models/empty")}, 400, "model.artifactUri")
    assert "holds no files" in error["message"]
    reason = error["details"][0]["reason"]
    assert reason == "no_model_artifacts"
    await refuse({"model": sdk_model("gs://models/missing")}, 400, "model.artifactUri")
    missing = {k: v for k, v in sdk_model(artifacts).items() if k != "artifactUri"}
    error = await refuse({"model": missing}, 400, "model.artifactUri")
    assert "required" in error["message"]
    await refuse({"model": sdk_model("s3://bucket/model")}, 400, "model.artifactUri")
    await refuse({"model": sdk_model("gs://models/../../etc")}, 400, "model.artifactUri")
    error = await refuse(
        {"model": sdk_model(artifacts, explanationSpec={"parameters": {"x": 1}})},
        501,
        "model.explanationSpec",
    )
    assert error["status"] == "UNIMPLEMENTED"
    await refuse({"model": sdk_model(artifacts, encryptionSpec={"kmsKeyName": "k"})}, 501)
    await refuse(
        {"model": sdk_model(artifacts, containerSpec={"imageUri": "x", "grpcPorts": [{}]})},
        501,
        "model.containerSpec.grpcPorts",
    )
    await refuse({"model": sdk_model(artifacts), "serviceAccount": "sa@x"}, 501, "serviceAccount")
    await refuse({"model": sdk_model(artifacts, colour="blue")}, 400, "model.colour")
    await refuse({"model": sdk_model(artifacts, displayName="")}, 400, "model.displayName")
    await refuse({"model": sdk_model(artifacts), "parentModel": "424242"}, 404)
    await refuse(
        {"model": sdk_model(artifacts), "parentModel": "projects/other/locations/local/models/1"},
        400,
        "parentModel",
    )
    await refuse([], 400)  # type: ignore[arg-type]
    assert await training_db.fetchval("SELECT count(*) FROM models") == 0
    assert await training_db.fetchval("SELECT count(*) FROM model_operations") == 0

    # A file:// folder works as well as gs://.
    folder = tmp_path / "exported"
    folder.mkdir()
    (folder / "saved_model.pb").write_bytes(b"graph")
    operation = await upload(training_api, model=sdk_model(f"file://{folder}"))
    assert (await get(training_api, model_id(operation)))["artifactUri"] == f"file://{folder}"


async def test_a_pipelines_import_is_idempotent_and_records_lineage(
    training_api: httpx.AsyncClient,
    training_settings: TrainingSettings,
    training_db: asyncpg.Pool,
    artifacts: str,
) -> None:
    service = ModelsService(
        ModelsRepository(training_db), ArtifactFiles(training_settings.storage.url)
    )
    lineage = ModelLineage(
        training_pipeline="projects/default/locations/local/trainingPipelines/11",
        custom_job="projects/default/locations/local/customJobs/22",
        run="22",
    )
    wanted = Model(display_name="from-pipeline", labels={"k": "v"})

    async def imported() -> Model:
        return await service.import_version(
            "default",
            "local",
            wanted,
            artifact_uri=artifacts,
            lineage=lineage,
            idempotency_key=lineage.training_pipeline,
        )

    # Twice at once, then once more: one model, one version.
    first, second = await asyncio.gather(imported(), imported())
    third = await imported()
    assert first.name == second.name == third.name
    assert first.version_id == second.version_id == third.version_id == "1"
    assert await training_db.fetchval("SELECT count(*) FROM model_versions") == 1
    served = await get(training_api, first.name.rsplit("/", 1)[-1])
    assert served["trainingPipeline"] == lineage.training_pipeline
    assert served["lineage"] == {
        "trainingPipeline": lineage.training_pipeline,
        "customJob": lineage.custom_job,
        "hyperparameterTuningJob": "",
        "run": "22",
    }
    # A second pipeline adds a version to the same model.
    version = await service.import_version(
        "default",
        "local",
        wanted,
        artifact_uri=artifacts,
        parent_model=first.name,
        lineage=lineage.model_copy(update={"training_pipeline": "p2"}),
        idempotency_key="p2",
    )
    assert (version.name, version.version_id) == (first.name, "2")
    with pytest.raises(NoModelArtifacts):
        await service.import_version(
            "default", "local", wanted, artifact_uri="gs://models/nothing", lineage=lineage
        )
    with pytest.raises(ModelNotFound):
        await service.import_version(
            "default", "local", wanted, artifact_uri=artifacts, parent_model="999", lineage=lineage
        )
    assert await training_db.fetchval("SELECT count(*) FROM model_versions") == 2
